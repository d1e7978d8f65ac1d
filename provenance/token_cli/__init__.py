"""`manage.py drf_create_token`, kept for the people and scripts that know it, over hashed keys.

An app of its own so that it is listed before rest_framework.authtoken (the first app to name a
command provides it): DRF's command prints the key of a user's existing token, which is no longer
stored (provenance.access.tokens keeps only its digest)."""
