from django.apps import AppConfig


class RepairsConfig(AppConfig):
    name = "repairs"
    verbose_name = "Repairs"

    def ready(self) -> None:
        from repairs import receivers, what_if_tasks  # noqa: F401  (what_if_tasks: Celery finds only tasks.py)
        from provenance import upstream
        from repairs.models import Incident

        def open_repair_ids(*, workspace) -> list[int]:
            active = (Incident.Status.OPEN, Incident.Status.REPAIRING, Incident.Status.BLOCKED)
            return list(Incident.objects.filter(workspace=workspace, status__in=active).values_list("pk", flat=True))

        upstream.repairs.provide(open_repair_ids=open_repair_ids)
