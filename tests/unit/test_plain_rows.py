"""tenants.plain_rows gives what DRF's to_representation gives, value for value and type for
type: for the requests API's own serializer over generated requests, and for a serializer of
every field kind the plan treats apart (and some it leaves to DRF) over generated values,
in UTC and in another time zone."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from fleet.models import Pool, Route
from intake.api import CapacityRequestSerializer
from intake.models import CapacityRequest
from tenants.models import Tenant
from tenants.plain_rows import PlainRowsList, row_plan


def typed(value):
    """Equality that tells 1 from True and '1' from 1, through lists and dicts."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


texts = st.text(max_size=12)
moments = st.datetimes(min_value=dt.datetime(1990, 1, 1), max_value=dt.datetime(2090, 1, 1),
                       timezones=st.sampled_from([dt.UTC, zoneinfo.ZoneInfo("Asia/Kolkata")]))
zones = st.sampled_from(["UTC", "Europe/Berlin", "America/St_Johns"])


def choice(field: str):
    return st.sampled_from([c for c, _ in CapacityRequest._meta.get_field(field).choices])


@st.composite
def capacity_requests(draw):
    pool = draw(st.none() | st.builds(lambda s: Pool(slug=s, cluster_id=1), texts))
    return CapacityRequest(
        id=draw(st.integers(1, 10**9)), tenant=Tenant(slug=draw(texts)),
        requester=get_user_model()(username=draw(texts)), title=draw(texts),
        workload_kind=draw(choice("workload_kind")),
        isolation_origin=draw(choice("isolation_origin")), isolation_reference=draw(texts),
        device_fill=draw(choice("device_fill")), whole_devices=draw(st.integers(0, 64)),
        replicas=draw(st.integers(0, 9)), mig_profile=draw(st.sampled_from(["", "1g.10gb"])),
        memory_gb=draw(st.integers(0, 999)), gpu_model=draw(texts),
        starts_on=draw(st.dates()), ends_on=draw(st.none() | st.dates()),
        expected_utilisation=draw(st.none() | st.integers(0, 100)), justification=draw(texts),
        status=draw(choice("status")), route=draw(st.sampled_from(["", *Route.values])),
        route_reason=draw(texts), pool=pool, route_overridden=draw(st.booleans()),
        override_reason=draw(texts), decision_reason=draw(texts),
        decided_at=draw(st.none() | moments), created_at=draw(moments))


@settings(max_examples=150, deadline=None)
@given(capacity_requests(), zones)
def test_a_request_reads_as_drf_reads_it(request_, zone):
    with timezone.override(zone):
        serializer = CapacityRequestSerializer()
        assert typed(row_plan(serializer)(request_)) == typed(
            serializer.to_representation(request_))


class Kinds(serializers.ModelSerializer):
    """Every kind: columns the plan reads itself, columns it leaves to DRF (decimal, other
    formats), dotted sources with a default, a method field and a constant from a property."""

    starts_text = serializers.DateField(source="starts_on", format="%d/%m/%Y")
    created_epoch = serializers.DateTimeField(source="created_at", format="%s")
    pool_slug = serializers.CharField(source="pool.slug", default=None, allow_null=True)
    words = serializers.SerializerMethodField()
    utilisation = serializers.DecimalField(source="expected_utilisation", max_digits=5,
                                           decimal_places=1, allow_null=True)
    overridden = serializers.BooleanField(source="route_overridden")
    kind = serializers.ChoiceField(source="workload_kind", choices=[
        c for c, _ in CapacityRequest._meta.get_field("workload_kind").choices])
    size = serializers.CharField(source="size_label", read_only=True)
    renews = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = CapacityRequest
        fields = ["id", "title", "whole_devices", "starts_on", "ends_on", "decided_at",
                  "created_at", "starts_text", "created_epoch", "pool_slug", "words",
                  "utilisation", "overridden", "kind", "route", "size", "renews"]
        list_serializer_class = PlainRowsList

    def get_words(self, obj) -> str:
        return f"{obj.title}!"


@settings(max_examples=150, deadline=None)
@given(st.lists(capacity_requests(), max_size=4), zones,
       st.none() | st.integers(1, 10**6), st.sampled_from([None, Decimal("12.5")]))
def test_every_kind_of_field_reads_as_drf_reads_it(requests, zone, renews_id, utilisation):
    for r in requests:
        r.renews_id = renews_id
        if utilisation is not None:
            r.expected_utilisation = utilisation
    with timezone.override(zone):
        plain = Kinds(requests, many=True).data
        drf = serializers.ListSerializer(requests, child=Kinds()).data
        assert isinstance(Kinds(many=True), PlainRowsList)
        assert typed(list(plain)) == typed(list(drf))
