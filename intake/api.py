"""The REST API for capacity requests: the same services as the pages, tenant-scoped."""

from __future__ import annotations

import pickle
import re

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.settings import api_settings

from fleet.domain import ALL_MIG_PROFILES
from fleet.models import Allocation, Pool, Route
from tenants.access import require_platform_admin, roles_for, scope_to_tenants, tenant_scope
from tenants.audit import REASON_MAX
from tenants.idempotency import IdempotentWritesMixin
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant
from tenants.paging import Window
from tenants.plain_rows import PlainRowsList

from . import services
from .domain import Status
from .models import AllocationTrace, CapacityRequest
from .selectors import answers_for, plan_answers
from .tally import request_counts
from .validation import request_field_errors

SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


class FilableTenantField(serializers.SlugRelatedField):
    """A tenant the caller may file for (platform admins: any, for previews in review).
    Another tenant's slug gets the same answer as one that does not exist."""

    default_error_messages = {"does_not_exist": "No such tenant.",
                              "invalid": "No such tenant."}

    def to_internal_value(self, data):
        # A slug, or no tenant: anything else (NUL bytes, other types) never reaches the DB.
        if not isinstance(data, str) or not SLUG.fullmatch(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return super().to_internal_value(data)

    def get_queryset(self):
        request = self.context.get("request")
        roles = roles_for(request.user if request else None)
        if roles.platform_admin and self.context.get("preview"):
            return Tenant.objects.all()
        return Tenant.objects.filter(pk__in=roles.lead_of)


class CapacityRequestSerializer(serializers.ModelSerializer):
    tenant = FilableTenantField(slug_field="slug")
    requester = serializers.CharField(source="requester.username", read_only=True)
    pool = serializers.CharField(source="pool.slug", read_only=True, default=None,
                                 allow_null=True, help_text="set when submitted")
    route = serializers.ChoiceField(choices=Route.choices, allow_blank=True, read_only=True,
                                    help_text="empty until the request is routed")
    mig_profile = serializers.ChoiceField(
        choices=[""] + [p for p, v in ALL_MIG_PROFILES.items() if v.is_fraction],
        required=False, allow_blank=True,
        help_text="one of the profiles the active MIG pools offer")

    trace_id = serializers.CharField(
        source="allocation.trace.trace_id", read_only=True, allow_null=True, default=None,
        help_text="the OpenTelemetry trace of the allocation's path from filing to its first "
                  "running workload; null until it was sent (PORTAL_OTLP_ENDPOINT)")

    class Meta:
        list_serializer_class = PlainRowsList  # lists: one row plan, not DRF per value
        model = CapacityRequest
        fields = [
            "id", "tenant", "requester", "title", "workload_kind", "isolation_origin",
            "isolation_reference", "device_fill", "whole_devices", "replicas", "mig_profile",
            "memory_gb", "gpu_model", "starts_on", "ends_on", "expected_utilisation",
            "justification", "status", "route", "route_reason", "pool", "route_overridden",
            "override_reason", "decision_reason", "decided_at", "allocation", "created_at",
            "trace_id",
        ]
        read_only_fields = [
            "status", "route", "route_reason", "route_overridden", "override_reason",
            "decision_reason", "decided_at", "allocation", "created_at",
        ]

    def validate(self, attrs):
        """The service's own validation (intake.validation), as field errors."""
        merged = {f: getattr(self.instance, f) for f in services.EDITABLE_FIELDS} \
            if self.instance else {}
        merged.update({k: v for k, v in attrs.items() if k != "tenant"})
        errors = request_field_errors(merged, new=self.instance is None)
        if errors:
            raise serializers.ValidationError(errors)
        if merged.get("isolation_origin") == "habitual":
            attrs["isolation_reference"] = ""  # evidence belongs to binding origins only
        return attrs


class PreviewSerializer(serializers.Serializer):
    """What approval would do with these answers: route, reason, pool, size, price, fit."""

    route = serializers.ChoiceField(choices=Route.choices, allow_null=True)
    reason = serializers.CharField()
    pool = serializers.CharField(allow_null=True)
    held_devices = serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True,
                                            coerce_to_string=True)
    monthly_price = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True,
                                             coerce_to_string=True)
    fit = serializers.ChoiceField(choices=["fits_now", "fits_later", "never"], allow_null=True)
    fit_reason = serializers.CharField(allow_null=True)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX, allow_blank=False, trim_whitespace=True)


class ApproveSerializer(ReasonSerializer):
    override_route = serializers.ChoiceField(choices=Route.choices, required=False,
                                             allow_blank=True)
    override_reason = serializers.CharField(max_length=REASON_MAX, required=False, allow_blank=True)


class OptionalReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX, required=False, allow_blank=True,
                                   trim_whitespace=True)


class TalliedRequestPagination(api_settings.DEFAULT_PAGINATION_CLASS):
    """The API's pagination, with the number of requests from the database's tally (the
    list's filters are the caller's tenants and a status) instead of a COUNT over every
    request ever filed."""

    def get_count(self, queryset):
        status = self.request.query_params.get("status")
        counts = request_counts(self.request.user)
        return counts.get(status, 0) if status in Status._value2member_map_ else \
            sum(counts.values())


# The columns the list's rows read (CapacityRequestSerializer's fields and sources);
# tests/db/test_api_rows.py holds the list equal to DRF's over fully read rows.
LISTED_COLUMNS = (
    *(f.name for f in CapacityRequest._meta.concrete_fields
      if f.name in CapacityRequestSerializer.Meta.fields),
    "tenant__slug", "requester__username", "pool__slug", "allocation__trace__trace_id")


@kept_across_requests(CapacityRequest, Tenant, get_user_model(), Pool, Allocation,
                      AllocationTrace, freeze=pickle.dumps, thaw=pickle.loads)
def listed_requests(scope: tuple[int, ...] | None, status: str, start: int, stop: int
                    ) -> list[dict]:
    """Rows start..stop of the requests list of the tenants of `scope` (None: all) with
    `status` (empty: any), as the API lists them; kept across reading requests until a
    write to what they show."""
    qs = CapacityRequest.objects.select_related(
        "tenant", "requester", "pool", "allocation__trace").only(*LISTED_COLUMNS)
    if status:
        qs = qs.filter(status=status)
    if scope is not None:
        qs = qs.filter(tenant_id__in=scope)
    return [dict(row) for row in CapacityRequestSerializer(qs[start:stop], many=True).data]


class CapacityRequestViewSet(IdempotentWritesMixin, mixins.ListModelMixin,
                             mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                             mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """List, create and act on capacity requests of the tenants you may see."""

    serializer_class = CapacityRequestSerializer
    pagination_class = TalliedRequestPagination
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        qs = CapacityRequest.objects.select_related("tenant", "requester", "pool",
                                                    "allocation__trace")
        status = self.request.query_params.get("status")
        if status in Status._value2member_map_:
            qs = qs.filter(status=status)
        return scope_to_tenants(self.request.user, qs)

    def get_object(self):
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def list(self, request, *args, **kwargs):
        status = request.query_params.get("status")
        scope, status = (tenant_scope(request.user),
                         status if status in Status._value2member_map_ else "")
        # Counted by TalliedRequestPagination from the tally; each window one kept read.
        rows = Window(None, lambda start, stop: listed_requests(scope, status, start, stop))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(page) if page is not None else Response(rows[0:None])

    def create(self, request, *args, **kwargs):
        if not roles_for(request.user).is_lead:
            raise PermissionDenied("Only team leads file capacity requests.")
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        tenant = data.pop("tenant")
        # A tenant the caller cannot see is reported as a validation error, not a 403,
        # so its existence is not revealed.
        if not roles_for(self.request.user).can_view_tenant(tenant.pk):
            raise serializers.ValidationError({"tenant": ["No such tenant."]})
        serializer.instance = services.request_create(tenant=tenant, by=self.request.user,
                                                      fields=data)

    def _respond(self, obj):
        return Response(self.get_serializer(obj).data)

    def _lead_object(self):
        """A request of the caller's tenants (else 404) that the caller leads (else 403)."""
        obj = self.get_object()
        if not roles_for(self.request.user).can_file_for(obj.tenant_id):
            raise PermissionDenied("Only a team lead of this tenant may do that.")
        return obj

    def _admin_object(self):
        """Review actions: the role first (403 for anyone else, whatever the object)."""
        require_platform_admin(self.request.user)
        return self.get_object()

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def submit(self, request, pk=None):
        return self._respond(services.request_submit(request=self._lead_object(),
                                                     by=request.user))

    @extend_schema(request=OptionalReasonSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """A team lead takes a submitted (or sent back) request out of review."""
        body = OptionalReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._respond(services.request_withdraw(
            request=self._lead_object(), by=request.user,
            reason=body.validated_data.get("reason", "")))

    def destroy(self, request, *args, **kwargs):
        """Delete a draft (team leads of its tenant); anything filed is withdrawn instead."""
        services.request_delete_draft(request=self._lead_object(), by=request.user)
        return Response(status=204)

    @extend_schema(request=ApproveSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._respond(services.request_approve(
            request=self._admin_object(), by=request.user, reason=body.validated_data["reason"],
            override_route=body.validated_data.get("override_route", ""),
            override_reason=body.validated_data.get("override_reason", "")))

    @extend_schema(request=ReasonSerializer)
    @action(detail=True, methods=["post"])
    def deny(self, request, pk=None):
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._respond(services.request_deny(
            request=self._admin_object(), by=request.user, reason=body.validated_data["reason"]))

    @extend_schema(request=ReasonSerializer)
    @action(detail=True, methods=["post"], url_path="request-changes")
    def request_changes(self, request, pk=None):
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._respond(services.request_request_changes(
            request=self._admin_object(), by=request.user, reason=body.validated_data["reason"]))

    @extend_schema(request=CapacityRequestSerializer, responses=PreviewSerializer)
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """Route and price answers without saving anything (team leads for their tenants,
        platform admins for any)."""
        roles = roles_for(request.user)
        if not (roles.is_lead or roles.platform_admin):
            raise PermissionDenied("Only team leads and platform admins preview requests.")
        serializer = self.get_serializer(data=request.data,
                                         context={**self.get_serializer_context(),
                                                  "preview": True})
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        obj = CapacityRequest(**{k: v for k, v in d.items() if k != "tenant"})
        decision, plan = plan_answers(
            answers_for(obj.answers(), obj.gpu_model), gpu_model=obj.gpu_model,
            expected_utilisation=obj.expected_utilisation, starts_on=obj.starts_on,
            ends_on=obj.ends_on)
        return Response({
            "route": decision.route, "reason": decision.reason,
            "pool": plan.pool.name if plan else None,
            "held_devices": str(plan.held_devices) if plan else None,
            "monthly_price": str(plan.monthly_price) if plan else None,
            "fit": plan.fit if plan else None, "fit_reason": plan.fit_reason if plan else None,
        })
