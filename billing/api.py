"""Billing in the API, read-only and scoped exactly like the pages: finance and platform
admins read every tenant, a tenant's leads and members their own; the figures are the one
number (billing.figures) the statement, the overview, both exports and /metrics show."""

from __future__ import annotations

import datetime as dt
import re

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from tenants.access import billing_scope, visible_tenants

from .figures import month_figures, tenant_month

MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def parse_month(value: str, name: str = "month") -> dt.date:
    m = MONTH.match(value or "")
    if not m or not 1 <= int(m.group(2)) <= 12 or not 2000 <= int(m.group(1)) <= 2100:
        raise ValidationError({name: ["A month as YYYY-MM, between 2000-01 and 2100-12."]})
    return dt.date(int(m.group(1)), int(m.group(2)), 1)


class MonthFiguresSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="the tenant's slug")
    month = serializers.DateField(help_text="the first day of the month")
    closed = serializers.BooleanField(help_text="closed: its lines are frozen")
    allocated_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                      source="allocated_h")
    used_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                 source="used_h")
    idle_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                 source="idle_h")
    borrowed_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                     source="borrowed_h")
    credited_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                     source="credit_h")
    charged_device_hours = serializers.DecimalField(max_digits=18, decimal_places=4,
                                                    source="charged_h")
    usage_amount = serializers.DecimalField(max_digits=16, decimal_places=2,
                                            help_text="Σ statement lines, each to the cent")
    adjustments = serializers.DecimalField(max_digits=16, decimal_places=2)
    final = serializers.DecimalField(max_digits=16, decimal_places=2,
                                     help_text="usage_amount + adjustments")
    currency = serializers.CharField()
    pending_hours = serializers.IntegerField(help_text="hours still waiting for Prometheus")


class StatementLineSerializer(serializers.Serializer):
    allocation = serializers.IntegerField(source="allocation_id")
    description = serializers.CharField()
    route = serializers.CharField()
    policy = serializers.CharField()
    allocated_device_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                                      source="allocated_h")
    used_device_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                                 source="used_h")
    idle_device_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                                 source="idle_h")
    charged_device_hours = serializers.DecimalField(max_digits=14, decimal_places=4,
                                                    source="charged_h")
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)


class StatementSerializer(serializers.Serializer):
    figures = MonthFiguresSerializer()
    lines = StatementLineSerializer(many=True)
    adjustments = serializers.ListField(child=serializers.DictField())


def _with_currency(f) -> dict:
    return MonthFiguresSerializer(f).data


class BillingViewSet(viewsets.ViewSet):
    """Usage and charges per tenant and month (read-only)."""

    @extend_schema(responses=MonthFiguresSerializer(many=True), parameters=[
        OpenApiParameter("tenant", str, description="a tenant's slug (default: all you see)"),
        OpenApiParameter("from", str, description="first month, YYYY-MM"),
        OpenApiParameter("to", str, description="last month, YYYY-MM")])
    def list(self, request):
        """Per tenant and month: allocated, used, idle, borrowed, credited and charged
        device-hours, and the money (lines to the cent, adjustments, final)."""
        scope = billing_scope(request.user)
        tenant_ids = scope
        slug = request.query_params.get("tenant")
        if slug:  # a filter: a tenant you cannot see matches nothing (its existence unsaid)
            tenant = visible_tenants(request.user).filter(slug=slug[:40]).first()
            tenant_ids = [] if tenant is None or (scope is not None and tenant.pk not in scope) \
                else [tenant.pk]
        first = parse_month(request.query_params["from"], "from") \
            if request.query_params.get("from") else None
        last = parse_month(request.query_params["to"], "to") \
            if request.query_params.get("to") else None
        figures = [f for f in month_figures(tenant_ids=tenant_ids)
                   if (first is None or f.month >= first) and (last is None or f.month <= last)]
        return Response([_with_currency(f) for f in figures])

    @extend_schema(responses=StatementSerializer, parameters=[OpenApiParameter(
        "id", str, OpenApiParameter.PATH,
        description="`<tenant slug>:<YYYY-MM>`, e.g. `acme-research:2026-11`")])
    def retrieve(self, request, pk=None):
        """One statement: `<tenant slug>:<YYYY-MM>`, its lines, adjustments and figures."""
        from .services import statement_for

        slug, _, month = (pk or "").partition(":")
        billing_scope(request.user)
        tenant = get_object_or_404(visible_tenants(request.user), slug=slug[:40])
        m = parse_month(month)
        stmt, lines = statement_for(tenant, m)
        adjustments = [{"amount": f"{a.amount:.2f}", "reason": a.reason,
                        "at": a.at.isoformat()} for a in (stmt.adjustments.all() if stmt else [])]
        return Response({"figures": _with_currency(tenant_month(tenant.pk, m)),
                         "lines": StatementLineSerializer(lines, many=True).data,
                         "adjustments": adjustments})
