"""Shared by the data migrations that create the role groups (a leading underscore: not a migration)."""
from django.contrib.auth.management import create_permissions

from core.roles import grant_roles


def create_roles(apps, schema_editor):
    using = schema_editor.connection.alias  # migrations run as the owner, not through `default`
    # Permissions are normally created after all migrations (post_migrate); create them now so the
    # groups can hold them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0, using=using)
        app_config.models_module = None
    grant_roles(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"), using=using,
                missing_ok=True)
