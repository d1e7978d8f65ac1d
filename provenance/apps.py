from django.apps import AppConfig


class ProvenanceConfig(AppConfig):
    name = "provenance"
    verbose_name = "Provenance"

    def ready(self) -> None:
        from provenance import agents

        agents.load_agent_modules()
