from django.dispatch import Signal

# Sent inside the transaction that marks a repair done. Receivers (compensation drafting) turn the
# incident's RepairEffect rows into work for people; they must be idempotent.
repair_finished = Signal()  # kwargs: incident
# Sent inside the transaction that closes an incident (by a person, or because its run was replaced).
incident_closed = Signal()  # kwargs: incident, actor, reason, via
