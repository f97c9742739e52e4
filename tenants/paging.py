"""Lists paged without a queryset: rows already read (by one query that also counted them),
or read a window at a time (each window a read kept across requests), as Django's Paginator
and DRF's LimitOffsetPagination page them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.core.paginator import Page, Paginator


class Window:
    """What Paginator (and LimitOffsetPagination) need of an object list: how many rows
    (`count`: a number, a function giving it, or None where the pagination counts by
    itself) and a function giving rows start..stop."""

    def __init__(self, count: int | Callable[[], int] | None,
                 rows: Callable[[int, int | None], Sequence]):
        self._count, self._rows = count, rows

    def count(self) -> int:
        if self._count is None:
            raise TypeError("this window's pagination counts its rows itself")
        return self._count() if callable(self._count) else self._count

    def __getitem__(self, window: slice) -> Sequence:
        return self._rows(window.start or 0, window.stop)


class _ReadRows:
    """One page's rows already read, from their offset in the list (a class, not a closure:
    a kept page is pickled)."""

    def __init__(self, rows: list, offset: int):
        self.rows, self.offset = rows, offset

    def __call__(self, start: int, stop: int | None) -> list:
        return self.rows[start - self.offset:None if stop is None else stop - self.offset]


def known_page(rows: list, count: int, number: int, per_page: int) -> Page:
    """Page `number` (rows read for it, `count` in all) as Paginator.get_page gives it."""
    return Paginator(Window(count, _ReadRows(rows, (number - 1) * per_page)),
                     per_page).get_page(number)
