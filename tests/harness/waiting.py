"""The one way the tests wait: for a condition, never for a while."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], *, timeout: float = 10, interval: float = 0.2,
               retry_on: tuple[type[BaseException], ...] = (AssertionError,), what: str = "",
               between: Callable[[], None] | None = None,
               detail: Callable[[], str] | None = None) -> T:
    """Call `check` until it returns something other than False without raising one of
    `retry_on`; return what it returned. `between` runs after each miss (e.g. to fail fast
    when a process the test waits on has died, or to let a follower record). At the
    deadline the last error is raised, or TimeoutError naming `what`; `detail`, if given,
    is called then and its text added to that failure (e.g. the tail of a process's log)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result is not False:
                return result
            error: BaseException | None = None
        except retry_on as exc:
            error = exc
        if time.monotonic() > deadline:
            note = detail() if detail is not None else ""
            if error is not None:
                if note:
                    error.add_note(note)
                raise error
            message = f"{what or 'condition'} not reached after {timeout:.0f}s"
            raise TimeoutError(f"{message}\n{note}" if note else message)
        if between is not None:
            between()
        time.sleep(interval)
