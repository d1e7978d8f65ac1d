from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        from compensation import checks, drafting, receivers  # noqa: F401  (registers checks, model tasks, receivers)
