"""An audit event's subject id holds a whole source id (up to 200 characters, as the API accepts): a source
of 65 to 200 characters could be created nowhere, its audit row failed to insert. Widening a varchar is a
change of the catalogue only in Postgres: no row is rewritten, no hash changes."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("compensation", "0012_case_desk_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="subject_id",
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
