"""Queries compiled once per process: a `.values()` query whose SQL never changes (no
parameter from the request, the clock or the user) is turned into SQL by the ORM the first
time it runs and then only executed; one whose SQL depends only on a few hashable arguments
(the ids of the active pools) is compiled once per distinct arguments.

Why: the page profile (tests/db/page_profile.py) found the ORM's compiler a quarter of a
/metrics scrape — a histogram's sixteen filtered counts take longer to compile than the
database takes to answer them. Rows come back as `.values()` gives them: the compiler that
built the SQL applies its own converters (SQLite's decimals, for one) to every row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import wraps

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet


class CompiledValues:
    """One `.values()` query's SQL, parameters and compiler, for one database alias."""

    def __init__(self, qs: QuerySet):
        self.alias = qs.db
        query = qs.query
        self.names = [*query.extra_select, *query.values_select, *query.annotation_select]
        self.compiler = query.get_compiler(using=self.alias)
        try:
            self.sql, self.params = self.compiler.as_sql()
        except EmptyResultSet:  # e.g. `pk__in=()`: as the ORM does, no query and no rows
            self.sql = None

    def rows(self) -> list[dict]:
        if self.sql is None:
            return []
        with connections[self.alias].cursor() as cursor:
            cursor.execute(self.sql, self.params)
            fetched = cursor.fetchall()
        # As the compiler's own execution does: its converters over the fetched rows.
        return [dict(zip(self.names, row, strict=True))
                for row in self.compiler.results_iter(results=[fetched])]


def compiled_once(build: Callable[[], QuerySet]) -> Callable[[], list[dict]]:
    """Decorate a function that builds a fixed `.values()` queryset: calling it returns the
    rows, the SQL compiled on the first call (a process talks to one database; two threads
    compiling at once compile the same thing, and either is kept)."""
    compiled: list[CompiledValues] = []

    @wraps(build)
    def rows() -> list[dict]:
        if not compiled:
            compiled.append(CompiledValues(build()))
        return compiled[0].rows()

    return rows


def compiled_per_arguments(keep: int = 64):
    """As compiled_once, for a builder whose SQL depends on nothing but its arguments (all
    hashable: ids as a tuple, not a list): compiled once per distinct arguments, the `keep`
    most recently used kept. For the reads every page makes with the same few values — the
    pools' capacity of the active pools — not for a request's own ids."""

    def decorate(build: Callable[..., QuerySet]) -> Callable[..., list[dict]]:
        kept: OrderedDict[tuple[Hashable, ...], CompiledValues] = OrderedDict()
        lock = threading.Lock()

        @wraps(build)
        def rows(*args: Hashable) -> list[dict]:
            with lock:
                compiled = kept.get(args)
                if compiled is not None:
                    kept.move_to_end(args)
            if compiled is None:
                compiled = CompiledValues(build(*args))
                with lock:
                    kept[args] = compiled
                    while len(kept) > keep:
                        kept.popitem(last=False)
            return compiled.rows()

        return rows

    return decorate
