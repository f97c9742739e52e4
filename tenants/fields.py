"""Input fields shared by every API serializer and form: one validation path.

Python's int() and Decimal() accept digits of every script ("٣" is 3) and Decimal accepts
NaN and Infinity; numbers people type in a portal are ASCII, finite and in range.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django import forms
from django.core.exceptions import ValidationError
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


def decimal_for_column(value, *, max_digits: int, decimal_places: int, what: str):
    """`value` (text typed by a person, or a number) as a finite Decimal rounded to the
    column's places and small enough for it; ValueError with a sentence otherwise.

    The one check behind every money and rate input, in forms, API and services alike:
    SQLite stores whatever it is given, so an out-of-range value would be kept and fail on
    every later read."""
    example = "e.g. 120.50" if decimal_places <= 2 else "e.g. 2.45"
    if isinstance(value, str):
        text = value.strip()
        if not text or not text.isascii():
            raise ValueError(f"{what} must be a number in digits 0-9, {example}.")
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ValueError(f"{what} must be a number, {example}.") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        value = Decimal(value)
    elif not isinstance(value, Decimal):
        raise ValueError(f"{what} must be a number, {example}.")
    if not value.is_finite():
        raise ValueError(f"{what} must be a finite number, {example}.")
    limit = Decimal(10) ** (max_digits - decimal_places)
    if abs(value) >= limit:
        raise ValueError(f"{what} must be less than {limit:,} in size.")
    if value != value.quantize(Decimal(1).scaleb(-decimal_places), rounding=ROUND_HALF_UP):
        # Refused, not rounded: a rate typed as 2.123456789 must not be kept as 2.1235 unseen.
        raise ValueError(f"{what} has at most {decimal_places} decimal places, {example}.")
    try:
        return value.quantize(Decimal(1).scaleb(-decimal_places), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise ValueError(f"{what} must be a number, {example}.") from None


def _form_integer_field():
    class AsciiIntegerField(forms.IntegerField):
        """The forms' twin of StrictIntegerField: Django's IntegerField takes "١٠" as 10."""

        default_error_messages = {"ascii": "A whole number in digits 0-9 is required."}

        def to_python(self, value):
            if isinstance(value, str) and value.strip() and not ASCII_INTEGER.match(value):
                try:
                    int(value)
                except ValueError:
                    return super().to_python(value)  # not a number at all: Django's message
                raise ValidationError(self.error_messages["ascii"], code="ascii")
            return super().to_python(value)

    return AsciiIntegerField


AsciiIntegerField = _form_integer_field()
