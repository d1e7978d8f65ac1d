from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        # Registers the checks, the receivers, the built-in item kinds (compensation.drafting.item_kinds)
        # with the effect kinds that name them, and the built-in connectors.
        from compensation import checks, receivers  # noqa: F401
        from compensation.delivery.connectors import registry  # noqa: F401
        from compensation.drafting import effect_kinds  # noqa: F401
