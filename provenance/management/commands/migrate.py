"""`migrate` as the database owner: the application role that `default` logs in as may not create or
alter tables, so migrations always run on the `owner` alias (core.db_roles)."""
from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import DEFAULT_DB_ALIAS, connections

from core import db_roles


class Command(DjangoMigrate):
    def handle(self, *args, **options):
        if options["database"] == DEFAULT_DB_ALIAS:
            if db_roles.OWNER_ALIAS not in connections:
                raise CommandError("migrations run as the database owner: set DATABASE_OWNER_URL")
            options["database"] = db_roles.OWNER_ALIAS
        db_roles.prepare_default_privileges(using=options["database"])
        return super().handle(*args, **options)
