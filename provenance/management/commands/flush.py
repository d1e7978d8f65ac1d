"""`flush` as the database owner. The application role may not TRUNCATE the audit table and its
TRUNCATE trigger refuses everyone else, so emptying the whole database (Django's test flush between
transactional tests, or a developer's reset) runs as the owner with triggers off for that one
transaction. A production owner that is not allowed to set session_replication_role cannot flush the
record at all, which is the point.

Only tables that hold rows are emptied, small ones by DELETE: TRUNCATE gives every table and index a new
file, which made an empty-the-database between two transactional tests cost 0.6 s against 0.1 s. The
rows that describe the schema rather than hold data (content types and permissions) are kept, so the
post_migrate that ends a flush would only write the same rows again: it is not sent while its receivers
are the ones known to do just that (0.07 s of every transactional test). A flush that resets sequences
(a developer's `manage.py flush`) still truncates every other table, restarting their ids."""
from django.apps import apps
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management.commands.flush import Command as DjangoFlush
from django.core.management.sql import emit_post_migrate_signal
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.models.signals import post_migrate
from django.db.utils import load_backend

from core import db_roles

# Above this many rows in a table, the flush truncates: deleting row by row would cost more than new files.
DELETE_AT_MOST = 1000

# post_migrate's receivers that a flush keeping the schema's rows leaves nothing to do for: the content
# types and permissions are still there, and emptying tables changes neither the application role's
# grants nor the triggers and functions pgtrigger and pghistory install. Any other receiver (an app
# added later) gets the signal as Django sends it.
IDLE_AFTER_FLUSH = {"django.contrib.contenttypes.management.create_contenttypes",
                    "django.contrib.auth.management.create_permissions", "provenance.apps._grant_app_role",
                    "pgtrigger.apps.install_on_migrate", "pghistory.apps.install_on_migrate"}


class Command(DjangoFlush):
    def handle(self, **options):
        database = options["database"]
        if database != DEFAULT_DB_ALIAS or not db_roles.split_roles():
            return super().handle(**options)
        if options.get("interactive", True):
            confirm = input("This empties every table of the database, the audit record included. "
                            "Type 'yes' to continue, or 'no' to cancel: ")
            if confirm != "yes":
                self.stdout.write("Flush cancelled.")
                return
        # A connection of our own under the alias Django gives its own ad-hoc connections (NO_DB_ALIAS): the
        # test runner forbids queries through configured aliases a test did not ask for and lets this one
        # through, and hooks that look an alias up among the configured ones (django.contrib.postgres's
        # type handlers) skip it.
        settings_dict = {**connections[db_roles.OWNER_ALIAS].settings_dict,
                         "NAME": connections[database].settings_dict["NAME"]}
        owner = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, alias=NO_DB_ALIAS)
        try:
            owner.ensure_connection()
            owner.set_autocommit(False)
            with owner.cursor() as cur:
                cur.execute("SET LOCAL session_replication_role = replica")
                for sql in self._statements(owner, cur, reset_sequences=options.get("reset_sequences", True)):
                    cur.execute(sql)
            owner.commit()
        finally:
            owner.close()
        if not options.get("inhibit_post_migrate", False) and not _post_migrate_idle():
            emit_post_migrate_signal(options.get("verbosity", 1), options.get("interactive", True), database)

    def _statements(self, owner, cur, *, reset_sequences: bool) -> list[str]:
        kept = {ContentType._meta.db_table, Permission._meta.db_table}
        tables = [t for t in owner.introspection.django_table_names(only_existing=True, include_views=False)
                  if t not in kept]
        if not tables:
            return []
        # One TRUNCATE of every table: Postgres refuses to truncate a table that a table left out references.
        if reset_sequences:
            return owner.ops.sql_flush(self.style, tables, reset_sequences=True)
        q = owner.ops.quote_name
        cur.execute(" UNION ALL ".join(
            f"SELECT %s, (SELECT count(*) FROM (SELECT 1 FROM {q(t)} LIMIT {DELETE_AT_MOST + 1}) AS held)"
            for t in tables), tables)
        held = {table: rows for table, rows in cur.fetchall() if rows}
        if any(rows > DELETE_AT_MOST for rows in held.values()):
            return owner.ops.sql_flush(self.style, tables, reset_sequences=False)
        return [f"DELETE FROM {q(t)}" for t in held]


def _post_migrate_idle() -> bool:
    """Whether every receiver post_migrate would reach, for any app, is one a kept schema leaves idle."""
    for app_config in apps.get_app_configs():
        sync, async_ = post_migrate._live_receivers(app_config)
        if any(f"{r.__module__}.{r.__qualname__}" not in IDLE_AFTER_FLUSH for r in (*sync, *async_)):
            return False
    return True
