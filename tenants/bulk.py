"""Writing many rows' fields at once.

Django's bulk_update writes one CASE WHEN per field over every row of a batch: for thousands
of rows PostgreSQL spends most of its time parsing and planning that statement. On
PostgreSQL, `update_rows` sends one `UPDATE … FROM unnest(arrays)` per batch instead (a join
on the primary key); elsewhere (SQLite, the embedded run) it is bulk_update. New rows go in
by COPY (`insert_rows`, `insert_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter

from django.db import connections, models, router
from django.db.models import NOT_PROVIDED

from . import kept_reads


def update_rows(model: type[models.Model], rows: Sequence[models.Model],
                fields: Sequence[str], *, batch_size: int = 5000) -> int:
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
    columns = [pk, *(meta.get_field(name) for name in fields)]
    qn = connection.ops.quote_name
    # One array per column, unnested into rows: the statement has a parameter per column,
    # not per value (the driver splits the statement's text in Python, and a VALUES list of
    # 1,000 rows × 3 columns cost it a third of a second).
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in columns)
    names = ", ".join(qn(f.column) for f in columns)
    sets = ", ".join(f"{qn(f.column)} = v.{qn(f.column)}" for f in columns[1:])
    sql = (f"UPDATE {qn(meta.db_table)} AS t SET {sets} FROM unnest({arrays}) AS v({names}) "
           f"WHERE t.{qn(pk.column)} = v.{qn(pk.column)}")
    # Every value through Django's preparation: an array holds one type, and a column may
    # hold a Decimal in one row and an int in the next.
    read = [(f, attrgetter(f.attname)) for f in columns]
    done = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            params = [[f.get_db_prep_save(get(row), connection) for row in batch]
                      for f, get in read]
            cursor.execute(sql, params)
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
# pre_save that only reads the attribute (the dates' own pre_save differs for auto_now only).
_PLAIN_PRE_SAVE = frozenset({models.Field.pre_save, models.DateField.pre_save,
                             models.DateTimeField.pre_save})


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
    kept_reads.written(connection, [meta.db_table])  # COPY passes the write watch by
    return len(rows)



def insert_values(model: type[models.Model], rows: Sequence[dict]) -> int:
    """insert_rows for rows given as {attname: value} (`allocation_id`, not `allocation`), a
    missing field taking its default. On PostgreSQL no model instance is built (at 20,000
    rows building them cost more than the COPY); elsewhere they are, and bulk-created."""
    if not rows:
        return 0
    meta = model._meta
    fields = [f for f in meta.concrete_fields
              if not (f.primary_key and getattr(f, "db_returning", False))]
    known = {f.attname for f in fields}
    for row in rows:
        if not row.keys() <= known:
            raise ValueError(f"{model.__name__} has no field {sorted(row.keys() - known)}")
    db = router.db_for_write(model)
    connection = connections[db]
    if connection.vendor != "postgresql":
        return insert_rows(model, [model(**row) for row in rows])
    if any(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
           or f.db_default is not NOT_PROVIDED or type(f).pre_save not in _PLAIN_PRE_SAVE
           for f in fields):
        raise ValueError(f"{model.__name__} has fields filled on save: use insert_rows")
    if len(fields) < 2:
        raise ValueError(f"{model.__name__} has one column: use insert_rows")
    computed = [f for f in fields if f.has_default() and callable(f.default)]
    defaults = {f.attname: f.get_default() for f in fields if f not in computed}
    read = itemgetter(*(f.attname for f in fields))
    prepared = [(i, f) for i, f in enumerate(fields) if not _as_held(f)]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {qn(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for row in rows:
                full = defaults | row
                for f in computed:
                    if f.attname not in row:
                        full[f.attname] = f.get_default()
                values = read(full)
                if prepared:
                    values = list(values)
                    for i, f in prepared:
                        values[i] = f.get_db_prep_save(values[i], connection)
                copy.write_row(values)
    kept_reads.written(connection, [meta.db_table])  # COPY passes the write watch by
    return len(rows)
