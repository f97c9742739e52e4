"""Billing in the API, scoped exactly like the pages: finance and platform admins read every
tenant, a tenant's leads and members their own; the figures are the one number
(billing.figures) the statement, the overview, both exports and /metrics show. Finance and
platform admins close, reopen and adjust a month, and withdraw an adjustment, through the
same services as the pages."""

from __future__ import annotations

import datetime as dt

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from tenants.access import billing_scope, visible_tenants
from tenants.audit import REASON_MAX
from tenants.idempotency import IdempotentWritesMixin

from .domain import MONTH_RULE, parse_month
from .exports import statement_document, statement_response
from .figures import month_figures, tenant_month
from .models import Adjustment
from .services import (
    BillingError,
    adjustment_withdraw,
    require_billing_role,
    statement_adjust,
    statement_close,
    statement_for,
    statement_reopen,
)
from .statement_view import statement_view
from .validation import adjustment_errors


def month_param(value: str, name: str = "month") -> dt.date:
    """A month in a query or path (billing.domain.parse_month), else a 400 on the field."""
    month = parse_month(value)
    if month is None:
        raise ValidationError({name: [MONTH_RULE]})
    return month


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


class WhereItRanSerializer(serializers.Serializer):
    """A dispatched allocation's part of the month in one cluster (the parts add up to its
    line)."""

    allocation = serializers.IntegerField()
    cluster = serializers.CharField()
    allocated_device_hours = serializers.DecimalField(max_digits=16, decimal_places=4,
                                                      source="allocated_h")
    used_device_hours = serializers.DecimalField(max_digits=16, decimal_places=4,
                                                 source="used_h", allow_null=True)
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)


class StatementSerializer(serializers.Serializer):
    figures = MonthFiguresSerializer()
    lines = StatementLineSerializer(many=True)
    adjustments = serializers.ListField(child=serializers.DictField())
    where_it_ran = WhereItRanSerializer(many=True)


def _with_currency(f) -> dict:
    return MonthFiguresSerializer(f).data


class ReopenSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX, trim_whitespace=True)


class AdjustSerializer(serializers.Serializer):
    """Checked by billing.validation.adjustment_errors, as the page's form is: pass the
    statement's final before it as `final_before` in the context."""

    amount = serializers.CharField(max_length=40, help_text="EUR-style decimal, at most two "
                                   "places; negative for a credit, e.g. -25.00")
    reason = serializers.CharField(max_length=REASON_MAX, trim_whitespace=True)
    confirm = serializers.CharField(
        max_length=40, required=False, default="", allow_blank=True,
        help_text="the amount again, to record an adjustment that takes the final below "
                  "zero or exceeds half of it (refused on `amount` without it, the new "
                  "final in the message)")

    def validate(self, attrs):
        verdict = adjustment_errors(amount_value=attrs["amount"], reason=attrs["reason"],
                                    confirm=attrs.get("confirm", ""),
                                    final_before=self.context["final_before"])
        if verdict.errors:
            raise ValidationError({k: [v] for k, v in verdict.errors.items()})
        return attrs


class WithdrawSerializer(serializers.Serializer):
    adjustment = serializers.IntegerField(help_text="the id of the adjustment to withdraw")
    reason = serializers.CharField(max_length=REASON_MAX, trim_whitespace=True)


def adjustments_of(adjustments) -> list[dict]:
    """A statement's adjustments as the API lists them, withdrawals included: each names
    the adjustment it withdraws (`withdraws`), each withdrawn one its withdrawal."""
    return [{"id": a.pk, "kind": a.kind, "amount": f"{a.amount:.2f}", "reason": a.reason,
             "description": a.description, "at": a.at.isoformat(),
             "withdraws": a.withdraws_id,
             "withdrawn_by": getattr(getattr(a, "withdrawal", None), "pk", None)}
            for a in adjustments]


STATEMENT_ID = OpenApiParameter("id", str, OpenApiParameter.PATH,
                                description="`<tenant slug>:<YYYY-MM>`, e.g. "
                                            "`acme-research:2026-11`")


class BillingViewSet(IdempotentWritesMixin, viewsets.ViewSet):
    """Usage and charges per tenant and month; closing, reopening and adjusting a month."""

    lookup_value_regex = r"[^/]+"  # `<tenant slug>:<YYYY-MM>`; anything else is a JSON 404

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
        first = month_param(request.query_params["from"], "from") \
            if request.query_params.get("from") else None
        last = month_param(request.query_params["to"], "to") \
            if request.query_params.get("to") else None
        figures = month_figures(tenant_ids=tenant_ids, first=first, last=last)
        return Response([_with_currency(f) for f in figures])

    def _statement_of(self, request, pk, *, write: bool = False):
        if write:
            require_billing_role(request.user)  # the role first: 403 before anything else
        slug, _, month = (pk or "").partition(":")
        billing_scope(request.user)
        tenant = get_object_or_404(visible_tenants(request.user), slug=slug[:40])
        return tenant, month_param(month)

    def _answer(self, tenant, m):
        view = statement_view(tenant.pk, m)
        return Response({"figures": _with_currency(view.figures),
                         "lines": StatementLineSerializer(view.lines, many=True).data,
                         "adjustments": adjustments_of(view.adjustments),
                         "where_it_ran": WhereItRanSerializer(
                             [{"allocation": alloc_id, **vars(part)}
                              for alloc_id, parts in view.where_it_ran.items()
                              for part in parts], many=True).data})

    @extend_schema(request=None, responses=StatementSerializer, parameters=[STATEMENT_ID])
    @action(detail=True, methods=["post"])
    def close(self, request, pk=None):
        """Finance: freeze a finished month (months close in order)."""
        tenant, m = self._statement_of(request, pk, write=True)
        statement_close(tenant=tenant, month=m, by=request.user)
        return self._answer(tenant, m)

    @extend_schema(request=ReopenSerializer, responses=StatementSerializer,
                   parameters=[STATEMENT_ID])
    @action(detail=True, methods=["post"])
    def reopen(self, request, pk=None):
        """Finance: open the latest closed month again, with a reason (before any
        adjustment)."""
        tenant, m = self._statement_of(request, pk, write=True)
        body = ReopenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        stmt, _ = statement_for(tenant, m)
        if stmt is None:
            raise BillingError(f"{m:%B %Y} is open already.")
        statement_reopen(statement=stmt, by=request.user, reason=body.validated_data["reason"])
        return self._answer(tenant, m)

    @extend_schema(request=AdjustSerializer, responses=StatementSerializer,
                   parameters=[STATEMENT_ID])
    @action(detail=True, methods=["post"])
    def adjust(self, request, pk=None):
        """Finance: a correction to a closed month, with its reason."""
        tenant, m = self._statement_of(request, pk, write=True)
        stmt, _ = statement_for(tenant, m)
        if stmt is None or not stmt.closed:
            raise BillingError("Adjust only a closed month; an open one is recomputed from "
                               "usage.")
        body = AdjustSerializer(data=request.data,
                                context={"final_before": tenant_month(tenant.pk, m).final})
        body.is_valid(raise_exception=True)
        statement_adjust(statement=stmt, by=request.user,
                         amount_value=body.validated_data["amount"],
                         reason=body.validated_data["reason"],
                         confirm=body.validated_data["confirm"])
        return self._answer(tenant, m)

    @extend_schema(request=WithdrawSerializer, responses=StatementSerializer,
                   parameters=[STATEMENT_ID])
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """Finance: withdraw an adjustment of a closed month, with a reason: a new entry of
        the opposite amount (both stay listed; the final no longer counts it)."""
        tenant, m = self._statement_of(request, pk, write=True)
        body = WithdrawSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        stmt, _ = statement_for(tenant, m)
        adjustment = get_object_or_404(Adjustment, pk=body.validated_data["adjustment"],
                                       statement=stmt) if stmt else None
        if adjustment is None:
            raise BillingError(f"{m:%B %Y} has no adjustments.")
        adjustment_withdraw(adjustment=adjustment, by=request.user,
                            reason=body.validated_data["reason"])
        return self._answer(tenant, m)

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR},
                   parameters=[STATEMENT_ID])
    @action(detail=True, methods=["get"], url_path="csv")
    def statement_csv(self, request, pk=None):
        """The statement as CSV: its lines, the total, adjustments and the final amount,
        with the portal's currency (the same figures as the page and the PDF)."""
        tenant, m = self._statement_of(request, pk)
        return statement_response(statement_document(tenant, m), "csv")

    @extend_schema(responses={(200, "application/pdf"): OpenApiTypes.BINARY},
                   parameters=[STATEMENT_ID])
    @action(detail=True, methods=["get"], url_path="pdf")
    def statement_pdf(self, request, pk=None):
        """The statement as a PDF to send: the same document as the CSV."""
        tenant, m = self._statement_of(request, pk)
        return statement_response(statement_document(tenant, m), "pdf")

    @extend_schema(responses=StatementSerializer, parameters=[STATEMENT_ID])
    def retrieve(self, request, pk=None):
        """One statement: `<tenant slug>:<YYYY-MM>`, its lines, adjustments and figures."""
        tenant, m = self._statement_of(request, pk)
        return self._answer(tenant, m)
