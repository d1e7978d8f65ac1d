from django.dispatch import Signal

# Sent inside the transaction that marks a repair done. Receivers (compensation drafting) turn the
# incident's RepairEffect rows into work for people; they must be idempotent.
repair_finished = Signal()  # kwargs: incident
# Sent once a repair's plan is checkpointed (its RepairEffect rows exist), before verification, by the
# repairing worker or by an idle worker helping it. Receivers (compensation drafting) prepare what
# repair_finished will need and return True once it is done for the incident, or False when another
# worker is doing it and `wait` is off. Idempotent, like repair_finished.
repair_planned = Signal()  # kwargs: incident, wait
# Sent inside the transaction that closes an incident (by a person, or because its run was replaced).
incident_closed = Signal()  # kwargs: incident, actor, reason, via
