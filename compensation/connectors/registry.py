"""The built-in connectors, registered on import."""
from compensation.connectors import agent_pull, sandbox, smtp, stripe_payments, webhook  # noqa: F401
