"""A clock for building the demo's past: the real services run as if at an earlier moment.

`timezone.now()` is what every service, model default and task reads for "now", so setting
it is enough to file, approve, provision, roll up and close in time order. The clock stands
still inside a step (rows written "at once" keep their order by id).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone


@contextmanager
def clock_at(instant: dt.datetime) -> Iterator[None]:
    real = timezone.now
    timezone.now = lambda: instant
    try:
        yield
    finally:
        timezone.now = real
