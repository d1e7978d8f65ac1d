"""What the repair announces. The apps above (compensation) receive; repairs never imports them.
repair_finished and incident_closed: nothing a receiver returns is read. repair_planned, stores_back and
walked_without_applying: each receiver's answer is part of the repair's own record (see each)."""
from django.dispatch import Signal

# Sent inside the transaction that marks a repair repaired (its items are drafted by then).
repair_finished = Signal()  # kwargs: incident
# Sent inside the transaction that closes an incident (by a person, or because its run was replaced).
incident_closed = Signal()  # kwargs: incident, actor, reason, via
# Sent once a repair's plan is checkpointed (what it invalidates is known), by the repairing worker and by
# idle workers offered the chore, while the repair is applied and verified. A receiver prepares what
# follows from it (compensation drafts its items) and returns True once that is done, False when another
# worker holds part of it and `wait` is off (with `wait` it returns once done).
repair_planned = Signal()  # kwargs: incident, wait
# Sent by the outage sweep once at least one store answers again: a receiver carries out what waited for
# the stores (compensation executes approved items older than `approved_before`) and returns how many.
stores_back = Signal()  # kwargs: skip_servers (FalkorDB servers still down), approved_before
# Sent by a what-if with the effects of a repair walked on an unsaved incident and never applied. A
# receiver returns what it would make of them, writing nothing: {"compensations": int, "amount_reversed":
# {currency: cents}, "amount_paid": {currency: cents}, "items": [...]} (compensation: the drafts).
walked_without_applying = Signal()  # kwargs: incident, effects
