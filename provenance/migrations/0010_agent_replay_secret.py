import secrets

from django.db import migrations, models

import provenance.models


def give_each_a_secret(apps, schema_editor):
    """A fresh secret per existing registration: a default would give them all the same one."""
    # On the migrating connection (the owner's): another would wait for this transaction's ALTER TABLE.
    rows = apps.get_model("provenance", "AgentRegistration").objects.using(schema_editor.connection.alias)
    for pk in rows.values_list("pk", flat=True):
        rows.filter(pk=pk).update(replay_secret="krs_" + secrets.token_urlsafe(32))


class Migration(migrations.Migration):
    """Replays are signed: each agent registration gets its own HMAC secret."""

    dependencies = [("provenance", "0009_recordings_side_by_side")]

    operations = [
        migrations.AddField(model_name="agentregistration", name="replay_secret",
                            field=models.CharField(max_length=64, default="", editable=False)),
        migrations.RunPython(give_each_a_secret, migrations.RunPython.noop),
        migrations.AlterField(model_name="agentregistration", name="replay_secret",
                              field=models.CharField(max_length=64, default=provenance.models.new_replay_secret,
                                                     editable=False)),
    ]
