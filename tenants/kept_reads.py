"""Reads kept across requests: a page's read of data that changes rarely (the pools' facts,
the figures /metrics exports) is kept in the process, stamped with the change marks of the
tables it reads, and served again while those marks stand.

A change mark is a token per table in the shared cache. Every statement that may write a
table renews that table's mark — at once, and again when its transaction commits — by a
wrapper on every database connection (`watch_writes`), so no writer can forget: `save`,
`update`, `bulk_create`, many-to-many sets, raw SQL and migrations all pass through it
(COPY, which passes Django's cursor, is reported by tenants.bulk; what a database trigger
writes is declared by the app that owns it, `triggers_write`; columns no kept read shows,
`unread_columns`). A
kept read checks its tables' marks in one cache round trip and is built again when any has
moved. The order makes it safe: the marks are read before the build, so an entry built
from data a commit has just replaced carries the marks that commit's renewal retires.

Kept reads serve reading requests only (GET and HEAD, outside any transaction the
application opened): a decision — an approval under its lock, a task — always reads the
database, because between a commit and its renewal a kept entry may still be the one
before. Something that writes the database without Django (psql by hand) moves no mark;
PORTAL_KEPT_READS_SECONDS bounds how long such a change can go unseen. Without a shared
cache (several processes, no CACHE_URL) nothing is kept."""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from time import monotonic
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from .per_request import request_memo

log = logging.getLogger(__name__)

# Set by the test suite: every build also checks that it read only the tables it declares.
STRICT = False

_MARK = "tm:v1:"
# A statement that may write starts with one of these (Django's own writes start with the
# first three; the rest are raw SQL and migrations), or is a WITH … that writes.
_WRITES = ("INSERT", "UPDATE", "DELETE", "TRUNCA", "MERGE", "REPLAC", "COPY", "ALTER", "DROP",
           "CREATE")
_WRITING_WITH = re.compile(r"\b(?:INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


# Comments and parentheses before a statement's first word.
_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.DOTALL)
# Statements whose tables cannot be read from their text: every mark moves.
_ANY_TABLE = re.compile(r"(?:DO|CALL)\b|TRUNCATE\b.*\bCASCADE\b", re.IGNORECASE | re.DOTALL)


def _head(sql: str) -> str:
    return sql[_LEADING.match(sql).end():]


def may_write(sql: str) -> bool:
    body = _head(sql)
    head = body[:6].upper()
    return (head.startswith(_WRITES) or _ANY_TABLE.match(body) is not None
            or (head.startswith("WITH") and _WRITING_WITH.search(body) is not None))


def _known_tables() -> frozenset[str]:
    tables = getattr(_known_tables, "found", None)
    if tables is None:
        tables = frozenset(m._meta.db_table for m in apps.get_models(include_auto_created=True))
        _known_tables.found = tables
    return tables


# Table → the tables database triggers on it write (a write to the first is theirs too).
_TRIGGERED: dict[str, frozenset[str]] = {}


def triggers_write(on, written) -> None:
    """Say that a database trigger on the table of model `on` writes the table of model
    `written` (the request tally): a statement writing the first moves both marks. Called by
    the app that owns the trigger, as it is made ready, in every process."""
    table = on._meta.db_table
    _TRIGGERED[table] = _TRIGGERED.get(table, frozenset()) | {written._meta.db_table}


# Table → columns no kept read shows: an UPDATE of that table that sets only those moves
# no mark (the sign-in's `last_login`, written on every sign-in, once retired every kept
# read of a request, a statement or a list that names its requester).
_UNREAD: dict[str, frozenset[str]] = {}
_SET_ONLY = re.compile(r'UPDATE "(\w+)" SET ((?:"\w+" = %s)(?:, "\w+" = %s)*) '
                       r'WHERE "\1"\."\w+" = %s$')


def unread_columns(model, *columns: str) -> None:
    """Say that no kept read shows these columns of `model`'s table (so none may declare a
    build that shows them): writing only these renews no mark."""
    table = model._meta.db_table
    _UNREAD[table] = _UNREAD.get(table, frozenset()) | frozenset(columns)


def _sets_only_unread(sql: str) -> bool:
    found = _SET_ONLY.match(sql) if _UNREAD else None
    if found is None or found.group(1) not in _UNREAD:
        return False
    columns = {part.split('"')[1] for part in found.group(2).split(", ")}
    return columns <= _UNREAD[found.group(1)]


def tables_in(sql: str) -> frozenset[str]:
    """The portal's tables a statement names (anywhere in it: a write renews every table it
    mentions, which may be more than it writes, never fewer)."""
    known = _known_tables()
    return frozenset(name for name in _NAME.findall(sql) if name in known)


def _written_by(sql: str) -> frozenset[str]:
    if _ANY_TABLE.match(_head(sql)):
        return _known_tables()
    if _sets_only_unread(sql):
        return frozenset()
    tables = tables_in(sql)
    for table in tables & _TRIGGERED.keys():
        tables |= _TRIGGERED[table]
    return tables


def _mark_key(table: str) -> str:
    return _MARK + table


def _renew(tables: Iterable[str]) -> None:
    try:
        cache.set_many({_mark_key(t): uuid.uuid4().hex for t in tables}, None)
    except Exception:  # the cache away: readers cannot read marks either; the age bounds it
        log.warning("could not renew the change marks of %s", sorted(tables), exc_info=True)


class _Renewal:
    """The on-commit renewal of one table's mark (one per table and transaction)."""

    def __init__(self, table: str):
        self.table = table

    def __call__(self) -> None:
        _renew([self.table])


def written(connection, tables) -> None:
    """Renew the marks of tables a statement the watch cannot see wrote (COPY, which the
    driver sends past Django's cursor: tenants.bulk)."""
    found = frozenset(tables)
    for table in found & _TRIGGERED.keys():
        found |= _TRIGGERED[table]
    _written(connection, found)


def _written(connection, tables: frozenset[str]) -> None:
    # At once (autocommit: the statement is committed already; in a transaction: entries
    # built from now on are stamped to be retired), and once more per table when it commits.
    _renew(tables)
    memo = request_memo()
    if memo:  # a reading request that writes reads the marks again
        memo.pop(_SEEN, None)
    if connection.in_atomic_block:
        pending = {func.table for _ids, func, _robust in connection.run_on_commit
                   if isinstance(func, _Renewal)}
        for table in tables - pending:
            connection.on_commit(_Renewal(table), robust=True)


def _watch(execute, sql, params, many, context):
    result = execute(sql, params, many, context)
    if may_write(sql):
        tables = _written_by(sql)
        if tables:
            _written(context["connection"], tables)
    return result


def watch_writes(sender=None, connection=None, **kwargs) -> None:
    """Install the write watch on a connection (every connection, as it is created)."""
    # First in the list: Django's execute_wrapper() pops the last one when it ends, and a
    # connection opened inside one must keep its watch.
    if _watch not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _watch)


connection_created.connect(watch_writes, dispatch_uid="tenants.kept_reads.watch_writes")


def renew_every_mark() -> None:
    """Retire every kept entry of every process (the test suite, between tests: a test's
    rolled-back transaction moves no mark back)."""
    try:
        cache.delete_many([_mark_key(t) for t in _known_tables()])
    except Exception:
        log.warning("could not retire the change marks", exc_info=True)


# Every table some kept read declares: a request reads all their marks in one round trip,
# the first time it needs any.
_declared: set = set()
_SEEN = "tenants.kept_reads.marks"


def _marks(tables: tuple[str, ...]) -> tuple[str, ...]:
    """The tables' marks as this reading request first read them."""
    memo = request_memo()
    seen = memo.setdefault(_SEEN, {})
    if not all(t in seen for t in tables):
        wanted = sorted({*tables, *(m._meta.db_table for m in _declared)} - seen.keys())
        keys = [_mark_key(t) for t in wanted]
        found = cache.get_many(keys)
        for table, key in zip(wanted, keys, strict=True):
            if key not in found:
                fresh = uuid.uuid4().hex
                found[key] = fresh if cache.add(key, fresh, None) else (
                    cache.get(key) or fresh)
            seen[table] = found[key]
    return tuple(seen[t] for t in tables)


def _in_application_transaction(alias: str = "default") -> bool:
    return any(not getattr(block, "_from_testcase", False)
               for block in connections[alias].atomic_blocks)


def key_of(ids) -> tuple[int, ...] | None:
    """Ids (or None: all) as a kept read's argument: the same set, the same key."""
    return None if ids is None else tuple(sorted(set(ids)))


@dataclass(frozen=True)
class Until:
    """What a build returns when its answer also changes with the clock: the value, and the
    moment it stops being true (a rate card that starts later)."""

    value: Any
    at: Any  # an aware datetime, or None: only a write changes it


class _Kept:
    """One kept read's entries, the most recently used `keep` (a read per tenant or per
    filter cannot push out another read's)."""

    def __init__(self, keep: int):
        self.keep = keep
        self.entries: OrderedDict[Hashable, tuple] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def put(self, key, entry) -> None:
        with self.lock:
            self.entries[key] = entry
            self.entries.move_to_end(key)
            while len(self.entries) > self.keep:
                self.entries.popitem(last=False)


class UndeclaredTable(AssertionError):
    pass


def _strict_build(build: Callable[[], Any], declared: frozenset[str], name: str):
    read: set[str] = set()

    def note(execute, sql, params, many, context):
        read.update(tables_in(sql))
        return execute(sql, params, many, context)

    wrappers = connections["default"].execute_wrappers
    wrappers.append(note)
    try:
        answer = build()
    finally:
        wrappers.remove(note)
    if not read <= declared:
        raise UndeclaredTable(f"{name} read {sorted(read - declared)}, which it does not "
                              f"declare: a write there would not retire what it keeps")
    return answer


_building: ContextVar[bool] = ContextVar("tenants_kept_reads_building", default=False)


def keeping() -> bool:
    """Whether a read now may be served kept: in a reading request, outside a transaction
    the portal opened and any kept read's build, with a shared cache and an age above 0."""
    return bool(settings.PORTAL_KEPT_READS_SECONDS and settings.SHARED_CACHE
                and request_memo() is not None and not _building.get()
                and not _in_application_transaction())


def kept_across_requests(*models, thaw: Callable[[Any], Any] | None = None,
                         freeze: Callable[[Any], Any] | None = None, keep: int = 64):
    """Decorate a read (hashable arguments) of the tables of `models` (model classes, or
    many-to-many `through` models) to be kept across reading requests while their marks
    stand. The read may return `Until(value, at)` when its answer also ends at a time.
    Values are shared between requests: immutable ones are returned as they are; others
    are kept frozen (`freeze`, e.g. pickled) and thawed per request (`thaw`). A read made
    while another is built is read afresh: what it reads counts as the outer read's."""

    def decorate(build: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{build.__module__}.{build.__qualname__}"
        tables: list[tuple[str, ...]] = []
        _declared.update(models)
        kept = _Kept(keep)

        def declared() -> tuple[str, ...]:
            if not tables:
                tables.append(tuple(sorted({m._meta.db_table for m in models})))
            return tables[0]

        def fresh(*args):
            answer = build(*args)
            return answer.value if isinstance(answer, Until) else answer

        @wraps(build)
        def read(*args):
            if not keeping():
                return fresh(*args)
            names = declared()
            try:
                marks = _marks(names)
            except Exception:  # the cache away: read the database
                log.warning("change marks unavailable; reading %s afresh", name, exc_info=True)
                return fresh(*args)
            key = (name, args)
            entry = kept.get(key)
            now = monotonic()
            if entry is not None:
                e_marks, e_until, e_born, kept_value = entry
                if (e_marks == marks and now - e_born < settings.PORTAL_KEPT_READS_SECONDS
                        and (e_until is None or timezone.now() < e_until)):
                    return thaw(kept_value) if thaw else kept_value
            token = _building.set(True)
            try:
                answer = (_strict_build(lambda: build(*args), frozenset(names), name)
                          if STRICT else build(*args))
            finally:
                _building.reset(token)
            value, until = ((answer.value, answer.at) if isinstance(answer, Until)
                            else (answer, None))
            kept_value = freeze(value) if freeze else value
            kept.put(key, (marks, until, now, kept_value))
            return thaw(kept_value) if thaw else value

        read.uncached = fresh
        return read

    return decorate
