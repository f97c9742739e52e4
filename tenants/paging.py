"""A page of rows already read (by one query that also counted them, or kept across
requests), as Django's Paginator pages it."""

from __future__ import annotations

from django.core.paginator import Page, Paginator


class KnownPage:
    """What Paginator needs of an object list whose size and one page are already known."""

    def __init__(self, rows: list, count: int, offset: int):
        self.rows, self._count, self.offset = rows, count, offset

    def count(self) -> int:
        return self._count

    def __getitem__(self, window: slice) -> list:
        return self.rows[window.start - self.offset:window.stop - self.offset]


def known_page(rows: list, count: int, number: int, per_page: int) -> Page:
    """Page `number` (rows read for it, `count` in all) as Paginator.get_page gives it."""
    return Paginator(KnownPage(rows, count, (number - 1) * per_page), per_page).get_page(number)
