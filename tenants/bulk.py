"""Writing many rows' fields at once.

Django's bulk_update writes one CASE WHEN per field over every row of a batch: for thousands
of rows PostgreSQL spends most of its time parsing and planning that statement. On
PostgreSQL, `update_rows` sends one `UPDATE … FROM (VALUES …)` per batch instead (a join on
the primary key); elsewhere (SQLite, the embedded run) it is bulk_update.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from django.db import connections, models, router


def update_rows(model: type[models.Model], rows: Sequence[models.Model],
                fields: Sequence[str], *, batch_size: int = 1000) -> int:
    """Write `fields` of each row (by primary key), as bulk_update does. Returns the rows
    updated."""
    if not rows:
        return 0
    db = router.db_for_write(model)
    connection = connections[db]
    if connection.vendor != "postgresql":
        return model.objects.using(db).bulk_update(rows, fields, batch_size=batch_size)
    meta = model._meta
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(f.column)} = v.{qn(f.column)}::{f.db_type(connection)}"
                     for f in columns)
    names = ", ".join(qn(c) for c in [pk.column, *(f.column for f in columns)])
    done = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            # The first row casts each column, so PostgreSQL knows its type in every row
            # (a column of NULLs or strings would otherwise be text).
            first = "(" + ", ".join(
                f"%s::{f.db_type(connection)}" for f in [pk, *columns]) + ")"
            rest = "(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"
            values = ", ".join([first] + [rest] * (len(batch) - 1))
            params = []
            for row in batch:
                params.append(pk.get_db_prep_save(row.pk, connection))
                params.extend(f.get_db_prep_save(getattr(row, f.attname), connection)
                              for f in columns)
            cursor.execute(
                f"UPDATE {qn(meta.db_table)} AS t SET {sets} FROM (VALUES {values}) "
                f"AS v({names}) WHERE t.{qn(pk.column)} = v.{qn(pk.column)}", params)
            done += cursor.rowcount
    return done


# Field types whose value PostgreSQL's driver takes as the model holds it: their
# get_db_prep_save only returns a value of the right type unchanged (a str for text, an int,
# a Decimal, an aware datetime). A subclass may convert, so the type must match exactly.
_AS_HELD = frozenset({
    models.CharField, models.TextField, models.IntegerField, models.BigIntegerField,
    models.SmallIntegerField, models.PositiveIntegerField, models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField, models.BooleanField, models.FloatField,
    models.DecimalField, models.ForeignKey})
_DATES = frozenset({models.DateTimeField, models.DateField})


def _as_held(field: models.Field) -> bool:
    kind = type(field)
    return kind in _AS_HELD or (kind in _DATES and not (field.auto_now or field.auto_now_add))


def insert_rows(model: type[models.Model], rows: Sequence[models.Model]) -> int:
    """Insert new rows as bulk_create does, without reading their keys back. On PostgreSQL
    by COPY, which skips building (and the server parsing) an INSERT with a parameter per
    field per row; elsewhere bulk_create."""
    if not rows:
        return 0
    db = router.db_for_write(model)
    connection = connections[db]
    if connection.vendor != "postgresql":
        model.objects.using(db).bulk_create(rows, batch_size=500)
        return len(rows)
    meta = model._meta
    fields = [f for f in meta.concrete_fields
              if not (f.primary_key and getattr(f, "db_returning", False))]
    # Plain columns are read in one attrgetter call per row; the rest (JSON, auto_now, other
    # types) go through Django's own preparation. At 20,000 rows of 35 columns the per-field
    # calls were a third of a full queue sync's store.
    held = [f for f in fields if _as_held(f)]
    prepared = [f for f in fields if not _as_held(f)]
    read = attrgetter(*(f.attname for f in held)) if held else (lambda row: ())
    if len(held) == 1:
        one = read
        read = lambda row: (one(row),)  # noqa: E731 -- attrgetter of one name is no tuple
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in [*held, *prepared])
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {qn(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for row in rows:
                values = read(row)
                if prepared:
                    values = (*values, *(f.get_db_prep_save(f.pre_save(row, True), connection)
                                         for f in prepared))
                copy.write_row(values)
    return len(rows)
