"""`field__any=[...]`: membership in a long list as one array parameter on PostgreSQL
(`col = ANY(%s)`), the same rows as `__in`.

With `__in` every value is its own placeholder: at thousands of values the driver splits
the statement's text in Python and PostgreSQL parses a list of literals, both per call (the
queue sync asks about 5,000 workload uids at once). Elsewhere (SQLite) it is `__in`.
"""

from __future__ import annotations

from django.db.models import Field, ForeignObject, Lookup, Model
from django.db.models.lookups import In


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        values = [v.pk if isinstance(v, Model) else v for v in self.rhs]
        if connection.vendor != "postgresql":
            return compiler.compile(In(self.lhs, values))
        if not values:  # nothing is a member of an empty list
            return "FALSE", []
        lhs, lhs_params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        prepared = [field.get_db_prep_value(v, connection, prepared=False) for v in values]
        kind = field.db_type(connection)
        # A varchar(n) cast would cut a longer value down to n and match another row.
        kind = "text" if kind.startswith(("varchar", "char")) else kind
        return f"{lhs} = ANY(%s::{kind}[])", [*lhs_params, prepared]


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # related fields keep their own lookups
