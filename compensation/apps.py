from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        from compensation import checks, receivers  # noqa: F401  (registers the checks and the receivers)
