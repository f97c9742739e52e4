"""Read-only API over allocations and their queues, tenant-scoped like every other endpoint
(the cluster registry's is in cluster_api)."""

from __future__ import annotations

import pickle

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from tenants.access import (
    require_holdings_changer,
    require_platform_admin,
    roles_for,
    scope_to_tenants,
    tenant_scope,
)
from tenants.audit import REASON_MAX
from tenants.fields import StrictIntegerField
from tenants.idempotency import IdempotentWritesMixin
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant
from tenants.paging import Window
from tenants.plain_rows import PlainRowsList

from .allocations.moves import allocation_move_off
from .allocations.resize import allocation_resize
from .allocations.resizing import MAX_SIZE
from .allocations.selectors import connect_info
from .allocations.services import allocation_release
from .models import Allocation, AllocationResize, GpuNode, Pool
from .queue_serializers import CohortSerializer, QueueQuerySerializer, QueueSerializer
from .queues.cohorts import cohort_views
from .queues.explain import allocation_queue


class ResizeRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = AllocationResize
        fields = ["at", "whole_devices_before", "whole_devices_after", "mig_count_before",
                  "mig_count_after", "devices_before", "devices_after", "reason"]


class AllocationSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")
    pool = serializers.CharField(source="pool.slug")
    flagged_reason = serializers.SerializerMethodField()
    size = serializers.IntegerField(read_only=True, help_text=(
        "its size in its own unit: slices of its MIG profile, else whole devices"))
    size_unit = serializers.CharField(read_only=True)
    resizes = ResizeRecordSerializer(many=True, read_only=True, help_text=(
        "each change of size in place, oldest first (billing holds each hour at the size "
        "in force)"))

    class Meta:
        list_serializer_class = PlainRowsList  # lists: one row plan, not DRF per value
        model = Allocation
        fields = ["id", "tenant", "pool", "route", "whole_devices", "mig_profile", "mig_count",
                  "device_equivalents", "size", "size_unit", "namespace", "starts_at",
                  "ends_at", "status", "status_message", "progress_done", "progress_total",
                  "drift_report", "flagged_reason", "resizes"]

    def get_flagged_reason(self, obj) -> str:
        """Node names are the platform's business: tenants learn that capacity was lost."""
        if not obj.flagged_reason:
            return ""
        request = self.context.get("request")
        admin = self.context.get("platform_admin") if request is None else \
            roles_for(request.user).platform_admin
        if admin:
            return obj.flagged_reason
        return obj.flag_words


class ConnectSerializer(serializers.Serializer):
    server = serializers.CharField(help_text="the API server URL (empty: not configured)")
    ca_configured = serializers.BooleanField()
    namespace = serializers.CharField()
    local_queue = serializers.CharField()
    route = serializers.CharField()
    steps = serializers.ListField(child=serializers.CharField())
    kubeconfig = serializers.CharField(help_text="YAML; OIDC through the portal's realm, "
                                                 "no secrets")
    example = serializers.CharField(help_text="YAML: a Job for the allocation's LocalQueue")


class ReleaseSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX, required=False, allow_blank=True,
                                   trim_whitespace=True, help_text="kept in the history")


class ResizeSerializer(serializers.Serializer):
    size = StrictIntegerField(min_value=1, max_value=MAX_SIZE, help_text=(
        "the new size in the allocation's own unit: whole devices, or slices of its MIG "
        "profile (its `size_unit`)"))
    reason = serializers.CharField(max_length=REASON_MAX, required=False, allow_blank=True,
                                   trim_whitespace=True, help_text="kept in the history")


class MoveSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=253, help_text="the node the block leaves")
    reason = serializers.CharField(max_length=REASON_MAX, trim_whitespace=True,
                                   help_text="kept in the history and sent to the tenant")


class MovedSerializer(serializers.Serializer):
    allocation = AllocationSerializer()
    moved_from = serializers.CharField()
    moved_to = serializers.CharField()


def _listed(scope: tuple[int, ...] | None, status: str):
    qs = Allocation.objects.select_related("tenant", "pool").order_by("-created_at", "-id")
    if status:
        qs = qs.filter(status=status)
    return qs if scope is None else qs.filter(tenant_id__in=scope)


_LISTED = (Allocation, Tenant, Pool, AllocationResize, GpuNode, Allocation.nodes.through)


@kept_across_requests(Allocation)  # the count reads allocations alone
def allocations_counted(scope: tuple[int, ...] | None, status: str) -> int:
    return _listed(scope, status).count()


@kept_across_requests(*_LISTED, freeze=pickle.dumps, thaw=pickle.loads)
def listed_allocations(scope: tuple[int, ...] | None, status: str, start: int, stop: int,
                       admin: bool) -> list[dict]:
    """Rows start..stop of the allocations list of the tenants of `scope` (None: all) with
    `status` (empty: any), as the API lists them to a platform admin (`admin`: node names in
    a flag's reason) or to anyone else; kept across reading requests until a write to what
    they show."""
    rows = _listed(scope, status).prefetch_related("resizes")[start:stop]
    return [dict(row) for row in AllocationSerializer(
        rows, many=True, context={"platform_admin": admin}).data]


class AllocationViewSet(IdempotentWritesMixin, mixins.ListModelMixin,
                        mixins.RetrieveModelMixin,
                        viewsets.GenericViewSet):
    """Allocations of the tenants you may see: where, how much, until when, and their state."""

    serializer_class = AllocationSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        qs = Allocation.objects.select_related("tenant", "pool").order_by("-created_at", "-id")
        status = self.request.query_params.get("status")
        if status in Allocation.Status.values:
            qs = qs.filter(status=status)
        return scope_to_tenants(self.request.user, qs)

    def get_object(self):
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def list(self, request, *args, **kwargs):
        status = request.query_params.get("status")
        scope, status = (tenant_scope(request.user),
                         status if status in Allocation.Status.values else "")
        admin = roles_for(request.user).platform_admin
        rows = Window(lambda: allocations_counted(scope, status), lambda start, stop:
                      listed_allocations(scope, status, start, stop, admin))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(page) if page is not None else Response(rows[0:None])

    @extend_schema(request=ReleaseSerializer, responses=AllocationSerializer)
    @action(detail=True, methods=["post"], serializer_class=ReleaseSerializer)
    def release(self, request, pk=None):
        """End an active allocation now (a team lead of its tenant, or a platform admin):
        billing stops at this moment and its objects are removed. Audited."""
        alloc = self.get_object()  # another tenant's: 404
        require_holdings_changer(request.user, alloc.tenant_id, "release")
        body = ReleaseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        alloc = allocation_release(allocation=alloc, by=request.user,
                                   reason=body.validated_data.get("reason", ""))
        return Response(AllocationSerializer(alloc).data)

    @extend_schema(request=ResizeSerializer, responses=AllocationSerializer)
    @action(detail=True, methods=["post"], serializer_class=ResizeSerializer)
    def resize(self, request, pk=None):
        """A new size for an active or expiring allocation, in place: a team lead of its
        tenant shrinks it, a platform admin also grows it (promised from the pool's free
        capacity under the pool's lock, as an approval is). 400, with the reason, when
        running work holds what a shrink would take or the pool cannot give what a grow
        needs. Kueue's quota follows; billing counts the new size from this moment."""
        alloc = self.get_object()  # another tenant's: 404
        require_holdings_changer(request.user, alloc.tenant_id, "resize")
        body = ResizeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        alloc = allocation_resize(allocation=alloc, size=body.validated_data["size"],
                                  by=request.user, reason=body.validated_data.get("reason", ""))
        return Response(AllocationSerializer(alloc).data)

    @extend_schema(request=MoveSerializer, responses=MovedSerializer)
    @action(detail=True, methods=["post"], serializer_class=MoveSerializer)
    def move(self, request, pk=None):
        """Platform admins: move a dedicated block off one of its nodes (a node being
        retired) onto a free validated node of the same pool. Same pool, same price; the
        tenant's leads are told; audited. 400 when it is not a dedicated block on that node
        or the pool has no free node."""
        require_platform_admin(request.user)
        alloc = self.get_object()
        body = MoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        to = allocation_move_off(allocation_id=alloc.pk, node_name=body.validated_data["node"],
                                 by=request.user, reason=body.validated_data["reason"])
        alloc.refresh_from_db()
        return Response({"allocation": AllocationSerializer(alloc).data,
                         "moved_from": body.validated_data["node"], "moved_to": to})

    @extend_schema(responses=QueueSerializer, parameters=[QueueQuerySerializer])
    @action(detail=True, methods=["get"], serializer_class=QueueSerializer)
    def queue(self, request, pk=None):
        """What Kueue does with the allocation's work: running and pending workloads, why each
        waits and when it should start, devices borrowed now and their price, preemptions
        with reasons, and wait-time history by day (narrowed by `local_queue` and
        `priority`). Other tenants are never named."""
        alloc = self.get_object()
        query = QueueQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        view = allocation_queue(alloc, **query.validated_data)
        return Response(QueueSerializer({**view.as_dict(), "history": view.history}).data)

    @extend_schema(responses=ConnectSerializer)
    @action(detail=True, methods=["get"], serializer_class=ConnectSerializer)
    def connect(self, request, pk=None):
        """How to use an active allocation: the cluster, a kubeconfig (OIDC, no secrets),
        the LocalQueue and an example workload for its route."""
        alloc = get_object_or_404(self.get_queryset(), pk=pk,
                                  status__in=(Allocation.Status.ACTIVE,
                                              Allocation.Status.EXPIRING))
        return Response(ConnectSerializer(connect_info(alloc)).data)

    @extend_schema(responses=CohortSerializer(many=True))
    @action(detail=False, methods=["get"], serializer_class=CohortSerializer,
            pagination_class=None)
    def cohorts(self, request):
        """Platform admins: every cohort's queues, with quota, use, borrowing, lending, pending
        work, the oldest wait and who is blocked by whom."""
        if not roles_for(request.user).platform_admin:
            raise PermissionDenied("Only platform admins see the cohorts.")
        data = [{"name": c.name, "queues": [
            {"queue": r.queue, "tenant": c.tenants.get(r.queue, ""), "nominal": r.nominal,
             "in_use": r.in_use, "borrowed": r.borrowed, "lent": r.lent, "pending": r.pending,
             "oldest_wait_seconds": r.oldest_wait_seconds, "blocked_by": list(r.blocked_by)}
            for r in c.rows]} for c in cohort_views()]
        return Response(CohortSerializer(data, many=True).data)
