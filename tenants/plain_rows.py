"""API lists serialized row by row from a plan made once per list, not field by field.

Why: a page of the requests API is 50 rows of 28 fields, and DRF's own path for each value
(the readable-fields generator, `get_attribute` walking its source with a callable test,
the field's `to_representation`) was most of the page (the page benchmark's profile). The
plan resolves, once per list, how each field reads a row: a model's own column straight from
the instance, the common field types' conversion for the value types a column holds, and
DRF's own field methods for everything else (dotted sources, defaults, nested serializers,
method fields, any other type or value). tests/unit/test_plain_rows.py holds the rows equal
to DRF's `to_representation`, value for value, for generated instances and every field type
the portal's list serializers use.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject, PrimaryKeyRelatedField
from rest_framework.settings import api_settings

SKIP = object()


def _drf_value(field) -> Callable:
    """The field's value as ModelSerializer.to_representation takes it (SKIP: left out)."""

    def value(instance):
        try:
            attribute = field.get_attribute(instance)
        except SkipField:
            return SKIP
        check = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
        return None if check is None else field.to_representation(attribute)

    return value


def _iso(field, setting) -> bool:
    output = getattr(field, "format", setting)
    return isinstance(output, str) and output.lower() == ISO_8601


def _convert(field) -> Callable | None:
    """A value's representation for the field's exact type and the value types a column
    yields, falling back to the field's own method for any other value; None: no plan."""
    kind, own = type(field), field.to_representation
    if kind is serializers.CharField:
        return str
    if kind is serializers.IntegerField:
        return int
    if kind is serializers.BooleanField:
        return lambda v: v if v is True or v is False else own(v)
    if kind is serializers.ChoiceField:
        choices = field.choice_strings_to_values
        return lambda v: choices.get(v, v) if type(v) is str and v else own(v)
    if kind is serializers.DateField and _iso(field, api_settings.DATE_FORMAT):
        return lambda v: v.isoformat() if type(v) is dt.date else own(v)
    if kind is serializers.DateTimeField and _iso(field, api_settings.DATETIME_FORMAT):
        def moment(v):
            if type(v) is not dt.datetime:
                return own(v)
            text = field.enforce_timezone(v).isoformat()
            return text[:-6] + "Z" if text.endswith("+00:00") else text
        return moment
    return None


def _column(model, field) -> str | None:
    """The instance attribute holding the field's value when it is one of the model's own
    columns read as is (a foreign key as its id, for a primary-key field); else None."""
    if model is None or len(field.source_attrs) != 1:
        return None
    try:
        column = model._meta.get_field(field.source_attrs[0])
    except FieldDoesNotExist:  # a property or method: DRF reads it
        return None
    if not column.concrete:
        return None
    if column.is_relation:
        pk_only = (type(field) is PrimaryKeyRelatedField and field.pk_field is None
                   and field.use_pk_only_optimization() and column.many_to_one)
        return column.attname if pk_only else None
    return column.attname


def row_plan(serializer: serializers.Serializer) -> Callable[[object], dict]:
    """A function giving `serializer.to_representation(instance)` for any instance."""
    model = getattr(getattr(serializer, "Meta", None), "model", None)
    if not (isinstance(model, type) and issubclass(model, models.Model)):
        model = None
    steps = []
    for field in serializer._readable_fields:
        attname = _column(model, field)
        convert = _convert(field) if attname else None
        if attname and type(field) is PrimaryKeyRelatedField:
            convert = _same
        if convert is None:
            steps.append((field.field_name, None, _drf_value(field)))
        else:
            steps.append((field.field_name, attname, convert))

    def row(instance) -> dict:
        out = {}
        for name, attname, convert in steps:
            if attname is None:
                value = convert(instance)
                if value is not SKIP:
                    out[name] = value
            else:
                value = getattr(instance, attname)
                out[name] = None if value is None else convert(value)
        return out

    return row


def _same(value):
    return value


class PlainRowsList(serializers.ListSerializer):
    """`many=True` for a list serializer: rows from one row_plan of the child."""

    def to_representation(self, data):
        rows = data.all() if isinstance(data, models.manager.BaseManager) else data
        row = row_plan(self.child)
        return [row(item) for item in rows]
