from django.apps import AppConfig


class RepairsConfig(AppConfig):
    name = "repairs"
    verbose_name = "Repairs"

    def ready(self) -> None:
        from repairs import receivers, what_if_tasks  # noqa: F401  (what_if_tasks: Celery finds only tasks.py)
