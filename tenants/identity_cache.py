"""What every page needs about its user — the user, their roles — kept in the shared cache,
each entry stamped with the user's current version token.

Any change to the user or their grants replaces the token, at once and again after commit.
An entry is served only while its stamp equals the token (both read in one round trip), so a
request that read the database just before a change and writes its entry just after it
writes something that is stale on arrival: a deactivation, a password change or a revoked
role cannot be kept alive by racing requests. A token evicted from the cache is replaced by
a fresh one, which retires every entry stamped before."""

from __future__ import annotations

import uuid

from django.core.cache import cache
from django.db import transaction


def _token_key(user_id) -> str:
    return f"uv:v1:{user_id}"


def read(entry_key: str, user_id) -> tuple[object | None, str]:
    """(the value if its stamp is current, else None; the token to stamp a new entry with)."""
    found, token = read_together([entry_key], user_id)
    return found.get(entry_key), token


def read_together(entry_keys: list[str], user_id) -> tuple[dict[str, object], str]:
    """Several entries about one user and their token in one round trip: (the values whose
    stamp is current, by key; the token to stamp new entries with)."""
    token_key = _token_key(user_id)
    found = cache.get_many([*entry_keys, token_key])
    token = found.get(token_key)
    if token is None:
        fresh = uuid.uuid4().hex
        token = fresh if cache.add(token_key, fresh, None) else (cache.get(token_key) or fresh)
        return {}, token
    current = {}
    for key in entry_keys:
        entry = found.get(key)
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == token:
            current[key] = entry[1]
    return current, token


def write(entry_key: str, token: str, value, seconds: int) -> None:
    cache.set(entry_key, (token, value), seconds)


def changed(user_id) -> None:
    """The user or their grants changed: every entry about them is stale from now on."""
    def renew() -> None:
        cache.set(_token_key(user_id), uuid.uuid4().hex, None)

    renew()
    transaction.on_commit(renew)
