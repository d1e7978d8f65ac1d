from django.db import migrations, models


class Migration(migrations.Migration):
    """Recordings of one workspace are open side by side: the one-open constraint goes, and an index
    serves the lookup of an open recording by action id (and the next free provisional id)."""

    dependencies = [("provenance", "0008_token_expiry")]

    operations = [
        migrations.RemoveConstraint(model_name="recording", name="one_open_recording_per_workspace"),
        migrations.AddIndex(model_name="recording",
                            index=models.Index(fields=["workspace", "status", "first_action"],
                                               name="recording_open_by_action")),
    ]
