"""Connectors: how an approved item leaves the building.

Each connector delivers some item kinds: the sandbox ledger and outbox (the demo), SMTP or an email
provider through Django's email backends, Stripe, a signed generic webhook (push), and the team's own agent pulling and acknowledging (agent_pull). A workspace chooses one per
item kind (compensation.delivery.connectors.config); compensation.delivery.deliveries runs the chosen one exactly once.
This registry alone owns how an item leaves: a kind's spec only names its default connector, and a
team's own way out is a connector registered here (`register`)."""
from compensation.delivery.connectors.base import (CONNECTORS, Connector, Outcome, PermanentFailure, TemporaryFailure, connector,
                                          register, unregister)

__all__ = ["CONNECTORS", "Connector", "Outcome", "PermanentFailure", "TemporaryFailure", "connector", "register",
           "unregister"]
