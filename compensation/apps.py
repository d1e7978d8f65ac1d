from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        from compensation import drafting, receivers  # noqa: F401  (registers model tasks and receivers)
