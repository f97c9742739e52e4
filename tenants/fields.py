"""Input fields shared by every API serializer and form: one validation path.

Python's int() and Decimal() accept digits of every script ("٣" is 3) and Decimal accepts
NaN and Infinity; numbers people type in a portal are ASCII, finite and in range.
"""

from __future__ import annotations

import re

from rest_framework import serializers

ASCII_INTEGER = re.compile(r"^\s*[-+]?[0-9]+\s*$")


class StrictIntegerField(serializers.IntegerField):
    """An integer written in ASCII digits, within the given bounds."""

    default_error_messages = {"invalid": "A whole number in digits 0-9 is required."}

    def to_internal_value(self, data):
        if isinstance(data, str) and not ASCII_INTEGER.match(data):
            self.fail("invalid")
        if isinstance(data, bool) or isinstance(data, float):
            self.fail("invalid")
        return super().to_internal_value(data)
