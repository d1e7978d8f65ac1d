"""`flush` as the database owner. The application role may not TRUNCATE the audit table and its
TRUNCATE trigger refuses everyone else, so emptying the whole database (Django's test flush between
transactional tests, or a developer's reset) runs as the owner with triggers off for that one
transaction. A production owner that is not allowed to set session_replication_role cannot flush the
record at all, which is the point."""
from django.core.management.commands.flush import Command as DjangoFlush
from django.core.management.sql import emit_post_migrate_signal, sql_flush
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.utils import load_backend

from core import db_roles


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
            statements = sql_flush(self.style, owner, reset_sequences=options.get("reset_sequences", True),
                                   allow_cascade=options.get("allow_cascade", False))
            owner.ensure_connection()
            owner.set_autocommit(False)
            with owner.cursor() as cur:
                cur.execute("SET LOCAL session_replication_role = replica")
                for sql in statements:
                    cur.execute(sql)
            owner.commit()
        finally:
            owner.close()
        if not options.get("inhibit_post_migrate", False):
            emit_post_migrate_signal(options.get("verbosity", 1), options.get("interactive", True), database)
