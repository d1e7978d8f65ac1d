from django.db import migrations, models
from django.db.models import BigIntegerField, Max, OuterRef, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce


def number_from_recordings(apps, schema_editor):
    """Each workspace's counter starts above every provisional id its recordings were handed: the
    highest `next_action` they stored (what opening a root read from all of them until now), once."""
    # On the migrating connection (the owner's): another would wait for this transaction's ALTER TABLE.
    alias = schema_editor.connection.alias
    Workspace = apps.get_model("provenance", "Workspace")
    Recording = apps.get_model("provenance", "Recording")
    taken = (Recording.objects.using(alias).filter(workspace=OuterRef("pk")).order_by()
             .annotate(n=Cast(KT("state__next_action"), BigIntegerField())).values("workspace")
             .annotate(top=Max("n")).values("top"))
    Workspace.objects.using(alias).update(next_provisional_action=Coalesce(Subquery(taken), 0))


class Migration(migrations.Migration):
    """Opening a root numbers its provisional id from a counter on the workspace's row, not from a scan
    of every recording the workspace ever had."""

    dependencies = [("provenance", "0010_agent_replay_secret")]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="next_provisional_action",
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(number_from_recordings, migrations.RunPython.noop),
    ]
