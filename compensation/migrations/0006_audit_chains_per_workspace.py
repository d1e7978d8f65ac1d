"""One audit chain per workspace (and the system chain) instead of one global chain.

Existing rows are moved to their incident's workspace and each chain is numbered and hashed again (the
hash now covers the chain). Re-hashing is only honest over a record that holds, so the old global
chain is verified first and the migration refuses to run over a broken one: re-chaining must never
launder an edit. The update-refusing trigger is switched off for this transaction only (ALTER TABLE
also locks the table, so nobody appends meanwhile).
"""
import hashlib
import json
from datetime import timezone as dt_timezone


import django.db.models.deletion
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models

GENESIS = "0" * 64
OLD_FIELDS = ("seq", "at", "actor_id", "actor_name", "via", "subject_type", "subject_id", "incident_id",
              "action", "from_status", "to_status", "reason", "data", "prev_hash")
NEW_FIELDS = ("workspace_id",) + OLD_FIELDS


def _hash(event, fields) -> str:
    # Frozen copies of core.audit.row_hash before and after this migration.
    values = {}
    for name in fields:
        value = getattr(event, name)
        if name == "at":
            value = value.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")
        values[name] = value
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256((event.prev_hash + canonical).encode()).hexdigest()


def rechain(apps, schema_editor):
    using = schema_editor.connection.alias
    AuditEvent = apps.get_model("compensation", "AuditEvent")
    Incident = apps.get_model("repairs", "Incident")
    rows = list(AuditEvent.objects.using(using).order_by("seq"))
    if not rows:
        return
    prev = GENESIS
    for expected, event in enumerate(rows, 1):
        if event.seq != expected or event.prev_hash != prev or _hash(event, OLD_FIELDS) != event.hash:
            raise RuntimeError(f"the audit chain is broken at seq {event.seq} (manage.py verify_audit names the "
                               f"row); refusing to re-chain a record that does not hold")
        prev = event.hash
    workspace_of = dict(Incident.objects.using(using).values_list("pk", "workspace_id"))
    heads: dict = {}
    for event in rows:
        event.workspace_id = workspace_of.get(event.incident_id)
        seq, prev = heads.get(event.workspace_id, (0, GENESIS))
        event.seq, event.prev_hash = seq + 1, prev
        event.hash = _hash(event, NEW_FIELDS)
        heads[event.workspace_id] = (event.seq, event.hash)
    table = schema_editor.quote_name(AuditEvent._meta.db_table)
    schema_editor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    AuditEvent.objects.using(using).bulk_update(rows, ["workspace", "seq", "prev_hash", "hash"], batch_size=2000)
    schema_editor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0005_queue_totals_and_indexes'),
        ('provenance', '0001_initial'),
        ('repairs', '0003_incident_baseline_for'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='auditevent',
            options={'ordering': ['workspace_id', 'seq'], 'permissions': [('export_auditevent', 'Can export the audit trail')]},
        ),
        migrations.AddField(
            model_name='auditevent',
            name='workspace',
            field=models.ForeignKey(blank=True, db_constraint=False, editable=False, help_text='The chain this event belongs to; empty: the system chain.', null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='audit_events', to='provenance.workspace'),
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='seq',
            field=models.PositiveBigIntegerField(editable=False, help_text='Position in its chain, from 1.'),
        ),
        migrations.RunPython(rechain, migrations.RunPython.noop),
        pgtrigger.migrations.AddTrigger(
            model_name='auditevent',
            trigger=pgtrigger.compiler.Trigger(name='audit_no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate rows from % table', TG_TABLE_NAME;", hash='d5b6ff9371d9bb4bb51d5e25e1c4eeeaaf1044f2', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_audit_no_truncate_c1a3c', table='compensation_auditevent', when='BEFORE')),
        ),
        migrations.AddConstraint(
            model_name='auditevent',
            constraint=models.UniqueConstraint(condition=models.Q(('workspace__isnull', False)), fields=('workspace', 'seq'), name='audit_seq_unique_per_workspace'),
        ),
        migrations.AddConstraint(
            model_name='auditevent',
            constraint=models.UniqueConstraint(condition=models.Q(('workspace__isnull', True)), fields=('seq',), name='audit_seq_unique_in_system_chain'),
        ),
    ]
