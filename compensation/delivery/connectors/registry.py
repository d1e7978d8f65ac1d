"""The built-in connectors, registered on import."""
from compensation.delivery.connectors import agent_pull, sandbox, smtp, stripe_payments, webhook  # noqa: F401
