from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _grant_app_role(sender, using, verbosity=1, **kwargs) -> None:
    from core import db_roles

    db_roles.ensure_app_role(using=using, verbosity=verbosity)


class ProvenanceConfig(AppConfig):
    name = "provenance"
    verbose_name = "Provenance"

    def ready(self) -> None:
        from provenance import agents
        from provenance.access import tokens

        agents.load_agent_modules()
        tokens.connect_signals()  # API token keys are stored as digests, however a token is made
        # After every migrate (as the owner): the application role's grants, the audit table append-only.
        post_migrate.connect(_grant_app_role, sender=self, dispatch_uid="kintsugi.db_roles.ensure_app_role")
