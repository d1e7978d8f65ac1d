"""The built-in connectors, registered on import."""
from compensation.connectors import sandbox, smtp, stripe_payments, webhook  # noqa: F401
