"""`field__any=[...]`: membership in a long list as one array parameter on PostgreSQL
(`col = ANY(%s)`), the same rows as `__in`.

With `__in` every value is its own placeholder: at thousands of values the driver splits
the statement's text in Python and PostgreSQL parses a list of literals, both per call (the
queue sync asks about 5,000 workload uids at once). Elsewhere (SQLite) it is `__in`.
"""

from __future__ import annotations

import re

from django.db.models import Field, ForeignObject, Lookup, Model
from django.db.models.lookups import In


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        field = self.lhs.output_field
        target = getattr(field, "target_field", field)  # a foreign key: the field it refers to
        # As with __in: a model instance stands for its key, and NULL is nobody's value (a
        # NULL in the array would make `NOT (x = ANY(...))` unknown for every other row).
        values = [getattr(v, target.attname) if isinstance(v, Model) else v
                  for v in self.rhs if v is not None]
        if connection.vendor != "postgresql":
            return compiler.compile(In(self.lhs, values))
        if not values:  # nothing is a member of an empty list
            return "FALSE", []
        lhs, lhs_params = self.process_lhs(compiler, connection)
        prepared = [field.get_db_prep_value(v, connection, prepared=False) for v in values]
        # The column's type without its size: varchar(64) would cut a longer value to 64 and
        # match another row; numeric(12, 4) would round the values looked for.
        kind = re.sub(r"\(.*?\)", "", field.db_type(connection)).strip()
        return f"{lhs} = ANY(%s::{kind}[])", [*lhs_params, prepared]


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # related fields keep their own lookups
