"""Where each workspace's graphs live: existing workspaces stay on the default server ('')."""
from django.db import migrations, models

import provenance.placement


class Migration(migrations.Migration):

    dependencies = [
        ("provenance", "0003_source_trust"),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="falkordb_server",
            field=models.CharField(blank=True, default="", editable=False, max_length=255,
                                   verbose_name="FalkorDB server",
                                   help_text="host:port of the FalkorDB server holding this workspace's graph, "
                                             "baseline and model cache (empty: the default server). Chosen at "
                                             "creation; changed only by `manage.py move_workspace`."),
        ),
        # New rows only: the default is computed when a workspace is created (provenance.placement).
        migrations.AlterField(
            model_name="workspace",
            name="falkordb_server",
            field=models.CharField(blank=True, default=provenance.placement.new_workspace_server, editable=False,
                                   max_length=255, verbose_name="FalkorDB server",
                                   help_text="host:port of the FalkorDB server holding this workspace's graph, "
                                             "baseline and model cache (empty: the default server). Chosen at "
                                             "creation; changed only by `manage.py move_workspace`."),
        ),
    ]
