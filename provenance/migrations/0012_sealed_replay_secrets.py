from django.db import migrations

import core.secret_box
import provenance.models


def seal_replay_secrets(apps, schema_editor):
    """Seal every replay secret still in the clear, on the migrating connection, column by column (the
    historical model's field would try to open them)."""
    from core import secret_box

    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT id, replay_secret FROM provenance_agentregistration")
        clear = [(pk, value) for pk, value in cur.fetchall() if value and not secret_box.is_sealed(value)]
        for pk, value in clear:
            cur.execute("UPDATE provenance_agentregistration SET replay_secret = %s WHERE id = %s",
                        [secret_box.seal(value), pk])


class Migration(migrations.Migration):
    """Agents' replay secrets sealed at rest (core.secret_box): a dump of the database holds ciphertext."""

    dependencies = [("provenance", "0011_provisional_action_counter")]

    operations = [
        migrations.AlterField(
            model_name="agentregistration",
            name="replay_secret",
            field=core.secret_box.SealedTextField(default=provenance.models.new_replay_secret, editable=False),
        ),
        migrations.RunPython(seal_replay_secrets, migrations.RunPython.noop),
    ]
