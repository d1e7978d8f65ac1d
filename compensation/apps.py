from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        # Registers the checks, the receivers, and the built-in item kinds (compensation.drafting.item_kinds) with
        # the effect kinds that name them.
        from compensation import checks, receivers  # noqa: F401
        from compensation.drafting import effect_kinds
