from django.db import migrations, models


def digest_keys(apps, schema_editor):
    """Every API token key still stored in the clear becomes its digest (provenance.access.tokens), its first
    characters kept on its lease; the key people hold keeps working, since lookups digest it too."""
    from provenance.access.tokens import PREFIX_CHARS, api_key_digest, is_digest

    alias = schema_editor.connection.alias
    Token = apps.get_model("authtoken", "Token")
    Lease = apps.get_model("provenance", "ApiTokenLease")
    keys = [k for k in Token.objects.using(alias).values_list("key", flat=True) if not is_digest(k)]
    with schema_editor.connection.cursor() as cur:
        # The key is the primary key and the lease points at it: both change in this transaction, the
        # foreign key checked at its end.
        cur.execute("SET CONSTRAINTS ALL DEFERRED")
        for key in keys:
            digest = api_key_digest(key)
            cur.execute("UPDATE authtoken_token SET key = %s WHERE key = %s", [digest, key])
            cur.execute("UPDATE provenance_apitokenlease SET token_id = %s WHERE token_id = %s", [digest, key])
    for key in keys:
        Lease.objects.using(alias).update_or_create(token_id=api_key_digest(key),
                                                    defaults={"prefix": key[:PREFIX_CHARS]})


class Migration(migrations.Migration):
    """API token keys stored as digests: a dump of the database holds nothing that logs in."""

    dependencies = [("authtoken", "0004_alter_tokenproxy_options"), ("provenance", "0012_sealed_replay_secrets")]

    operations = [
        migrations.AddField(model_name="apitokenlease", name="prefix",
                            field=models.CharField(blank=True, default="", max_length=12)),
        migrations.RunPython(digest_keys, migrations.RunPython.noop),
    ]
