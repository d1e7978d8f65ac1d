"""The case list's search at 20,000 cases: trigram indexes (pg_trgm) on what the search compares, and
the amount by incident. CREATE EXTENSION needs the owner role, which runs migrations (core.db_roles);
pg_trgm is a trusted extension, so a database owner without superuser may create it."""
import django.contrib.postgres.indexes
import django.db.models.fields.json
import django.db.models.functions.text
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("compensation", "0011_agent_pull"),
    ]

    operations = [
        TrigramExtension(),
        migrations.AddIndex(
            model_name="compensationitem",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper("ticket_id"),
                                                        name="gin_trgm_ops"),
                name="compensation_ticket_trgm"),
        ),
        migrations.AddIndex(
            model_name="compensationitem",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(django.db.models.functions.text.Upper("customer_email"),
                                                        name="gin_trgm_ops"),
                name="compensation_email_trgm"),
        ),
        migrations.AddIndex(
            model_name="compensationitem",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.text.Upper(django.db.models.fields.json.KT("facts__customer")),
                    name="gin_trgm_ops"),
                name="compensation_customer_trgm"),
        ),
        migrations.AddIndex(
            model_name="compensationitem",
            index=models.Index(fields=["incident", "amount_cents"], name="compensation_incident_amount"),
        ),
    ]
