"""Inserting many rows through Postgres COPY instead of bulk_create's INSERT, and updating many rows in one
statement from arrays instead of bulk_update's CASE expressions.

bulk_create binds its values client side: every text and JSON value of tens of thousands of rows is
quoted and escaped in Python (a regex substitution per quote in the JSON), which was most of
checkpointing a 100k-action repair's outcomes and of drafting its items. COPY sends the rows as data,
formatted by psycopg's C implementation, and fires the same insert triggers. bulk_update builds a
CASE WHEN per row and field as Django expressions and compiles them: for a batch of 100 review decisions
that was most of the time the decisions held their audit chain's lock. update_rows sends one array per
column and lets Postgres unnest them.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from django.db import connections, router
from django.db.models import JSONField, Model


def copy_create(objs: Sequence[Model], *, with_ids: bool = False) -> Sequence[Model]:
    """Insert `objs` (all of one model, unsaved) like bulk_create. With `with_ids` their primary keys
    are taken from the table's sequence first and set on the objects (bulk_create's RETURNING)."""
    if not objs:
        return objs
    model = type(objs[0])
    opts = model._meta
    db = router.db_for_write(model)
    connection = connections[db]
    pk = opts.pk
    fields = [f for f in opts.concrete_fields if f is not pk or (with_ids or getattr(objs[0], pk.attname) is not None)]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        if with_ids:
            cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                           [opts.db_table, pk.column, len(objs)])
            for obj, (value,) in zip(objs, cursor.fetchall()):
                setattr(obj, pk.attname, value)
        columns = ", ".join(quote(f.column) for f in fields)
        with cursor.cursor.copy(f"COPY {quote(opts.db_table)} ({columns}) FROM STDIN") as copy:
            for obj in objs:
                copy.write_row([f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields])
    for obj in objs:
        obj._state.adding, obj._state.db = False, db
    return objs


def copy_rows(model: type[Model], rows: Iterable[dict], **same: Any) -> None:
    """Insert plain rows (dicts keyed by field attname, e.g. a repair plan's outcomes) without building a
    model instance for each: `same` gives values every row shares (the incident). The rows carry every
    column but the primary key, which the table numbers; JSON is sent as text for the server to parse."""
    opts = model._meta
    connection = connections[router.db_for_write(model)]
    fields = {f.attname: f for f in opts.concrete_fields if f is not opts.pk}
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return
    names = list(first) + [k for k in same if k not in first]
    json_names = {n for n in names if isinstance(fields[n], JSONField)}
    quote = connection.ops.quote_name
    columns = ", ".join(quote(fields[n].column) for n in names)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {quote(opts.db_table)} ({columns}) FROM STDIN") as copy:
        for row in (first, *iterator):
            values = {**row, **same}
            copy.write_row([json.dumps(values[n]) if n in json_names and values[n] is not None else values[n]
                            for n in names])


def update_rows(objs: Sequence[Model], fields: Sequence[str]) -> None:
    """Write `fields` (names) of `objs` (saved rows of one model) as they are on the objects, in one UPDATE
    joined to the unnested arrays of their values: no pre_save (an auto_now field is written as set), no
    signals, and the table's statement triggers fire once."""
    if not objs:
        return
    model = type(objs[0])
    opts = model._meta
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    columns = [opts.pk, *(opts.get_field(name) for name in fields)]
    arrays, unnest = [], []
    for f in columns:
        if isinstance(f, JSONField):
            values = [None if v is None else json.dumps(v, cls=f.encoder)
                      for v in (getattr(o, f.attname) for o in objs)]
        else:
            values = [f.get_db_prep_value(getattr(o, f.attname), connection, prepared=False) for o in objs]
        arrays.append(values)
        unnest.append(f"%s::{f.db_type(connection)}[]")
    names = [quote(f.column) for f in columns]
    sets = ", ".join(f"{n} = v.{n}" for n in names[1:])
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(opts.db_table)} AS t SET {sets} FROM unnest({', '.join(unnest)}) "
                       f"AS v({', '.join(names)}) WHERE t.{names[0]} = v.{names[0]}", arrays)
