"""Groups Support lead, Reviewer and Auditor with their permissions (core.roles)."""
from django.db import migrations

from core.role_groups import create_roles


class Migration(migrations.Migration):
    dependencies = [
        ("compensation", "0001_initial"),
        ("provenance", "0001_initial"),
        ("repairs", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
