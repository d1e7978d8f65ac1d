"""What the repair announces. Receivers react; nothing they return is read."""
from django.dispatch import Signal

# Sent inside the transaction that marks a repair repaired (its items are drafted by then).
repair_finished = Signal()  # kwargs: incident
# Sent inside the transaction that closes an incident (by a person, or because its run was replaced).
incident_closed = Signal()  # kwargs: incident, actor, reason, via
