from celery.signals import worker_ready
from django.dispatch import receiver

from provenance.signals import desk_replacing
from repairs.services import close_for_replaced_run, resume_orphaned_repairs


@receiver(desk_replacing)
def close_incidents_of_replaced_run(sender, workspace, actor, reason, **kwargs):
    close_for_replaced_run(workspace=workspace, actor=actor, reason=reason)


@worker_ready.connect
def resume_repairs_when_a_worker_starts(sender=None, **kwargs):
    # A worker killed as a whole leaves its unacknowledged repair with the broker until the visibility
    # timeout; resuming here makes a restarted worker pick it up at once (duplicates are no-ops).
    resume_orphaned_repairs()
