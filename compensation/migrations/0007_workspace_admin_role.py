"""The Workspace admin group (core.roles), who manages the members of their own workspaces."""
from django.db import migrations

from core.role_groups import create_roles


class Migration(migrations.Migration):
    dependencies = [
        ("compensation", "0006_audit_chains_per_workspace"),
        ("provenance", "0002_workspace_manage_members"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
