from django.dispatch import receiver

from provenance.signals import desk_replacing
from repairs.services import close_for_replaced_run


@receiver(desk_replacing)
def close_incidents_of_replaced_run(sender, workspace, actor, reason, **kwargs):
    close_for_replaced_run(workspace=workspace, actor=actor, reason=reason)
