from celery.signals import worker_ready
from django.dispatch import receiver

from provenance.moves import MoveRefused
from provenance.signals import desk_replacing, workspace_moving
from repairs.models import Incident
from repairs.services import close_for_replaced_run, resume_orphaned_repairs


@receiver(desk_replacing)
def close_incidents_of_replaced_run(sender, workspace, actor, reason, **kwargs):
    close_for_replaced_run(workspace=workspace, actor=actor, reason=reason)


@receiver(workspace_moving, dispatch_uid="repairs.refuse_move_while_repairing")
def refuse_move_while_repairing(sender, workspace, **kwargs):
    # A repair reads and writes the workspace's graph where it is: it must end before the graph moves.
    active = (Incident.Status.OPEN, Incident.Status.REPAIRING, Incident.Status.BLOCKED)
    open_ids = list(Incident.objects.filter(workspace=workspace, status__in=active).values_list("pk", flat=True))
    if open_ids:
        raise MoveRefused(f"workspace {workspace.name!r} has a repair under way (incident "
                          f"{', '.join(f'#{i}' for i in open_ids)}); move it once the repair has ended")


@worker_ready.connect
def resume_repairs_when_a_worker_starts(sender=None, **kwargs):
    # A worker killed as a whole leaves its unacknowledged repair with the broker until the visibility
    # timeout; resuming here makes a restarted worker pick it up at once (duplicates are no-ops).
    resume_orphaned_repairs()
