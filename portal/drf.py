"""Parser and pagination classes named in REST_FRAMEWORK's settings.

Kept apart from `portal.api` on purpose: DRF imports these while `rest_framework.views` is
itself being imported, so this module must not import the views (a cycle otherwise).
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, with JSON nested deeper than Python can recurse (thousands of
    levels) answered as a 400 instead of a RecursionError's 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """`limit` at most 500; an `offset` past anything a database can hold is clamped (a
    number beyond a 64-bit integer was a database error, a 500)."""

    max_limit = 500
    max_offset = 10**9

    def get_offset(self, request):
        return min(super().get_offset(request), self.max_offset)
