"""The review notice an incident owes its reviewers, kept in Postgres so a notice whose task the broker
refused is sent by the sweep (compensation.notices)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0014_message_template'),
        ('repairs', '0011_incident_phase_marks'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReviewNotice',
            fields=[
                ('incident', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='review_notice', serialize=False, to='repairs.incident')),
                ('owed_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('settled_at', models.DateTimeField(blank=True, null=True)),
                ('outcome', models.CharField(blank=True, choices=[('sent', 'sent'), ('nobody', 'nobody to tell (no reviewer with an address, no mail relay, no webhook)'), ('nothing', 'nothing left to review')], max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('last_error', models.CharField(blank=True, max_length=300)),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('settled_at__isnull', True)), fields=['next_attempt_at'], name='review_notice_owed')],
            },
        ),
    ]
