"""A workspace's own customer message template, and the Support lead's permission to write it (core.roles)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from core.role_groups import create_roles


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0013_audit_subject_id_length'),
        ('provenance', '0016_source_trust_in_plain_words'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='MessageTemplate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('subject', models.CharField(max_length=300)),
                ('body', models.TextField()),
                ('version', models.PositiveIntegerField(default=1, help_text='Counts the saved changes: drafts name the version they used.')),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('updated_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('workspace', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='message_template', to='provenance.workspace')),
            ],
        ),
        migrations.RunPython(create_roles, migrations.RunPython.noop),
    ]
