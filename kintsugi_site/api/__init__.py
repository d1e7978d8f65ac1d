"""The REST API under /api/v1/: thin views over the provenance, repairs and compensation services."""
