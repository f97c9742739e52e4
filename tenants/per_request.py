"""Reads a page makes several times, made once per request.

A page's panels and planners ask the same question more than once (the review page asks
which MIG slices the pool offers seven times: once per route it plans), and each ask was a
query. `once_per_request` keeps a function's answer for the rest of the request that asked,
keyed by its arguments; outside a request (tasks, services, the shell, tests calling
selectors) every call reads afresh. Only reading requests (GET, HEAD) keep answers: a
request that writes may change what it reads between two asks. The memo lives in a context
variable, so concurrent requests (threads or ASGI tasks) never see each other's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import wraps
from typing import TypeVar

T = TypeVar("T")

_memo: ContextVar[dict | None] = ContextVar("portal_per_request_memo", default=None)


class PerRequestMemoMiddleware:
    """Opens the memo for a reading request and drops it when the response is made."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        token = _memo.set({})
        try:
            return self.get_response(request)
        finally:
            _memo.reset(token)


def request_memo() -> dict | None:
    """The reading request's memo (None outside a reading request: GET or HEAD), for a
    module's own keys."""
    return _memo.get()


def once_per_request(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate a read whose answer (and arguments: hashable) may be shared for the rest of a
    reading request. Return values are shared, so they must not be changed by callers."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        memo = _memo.get()
        if memo is None:
            return fn(*args, **kwargs)
        key = (fn, args, tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = fn(*args, **kwargs)
        return memo[key]

    return wrapper
