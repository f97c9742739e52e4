"""Read-only API over allocations, tenant-scoped like every other endpoint."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import mixins, serializers, viewsets

from tenants.access import scope_to_tenants

from .models import Allocation


class AllocationSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")
    pool = serializers.CharField(source="pool.slug")

    class Meta:
        model = Allocation
        fields = ["id", "tenant", "pool", "route", "whole_devices", "mig_profile", "mig_count",
                  "device_equivalents", "namespace", "starts_at", "ends_at", "status",
                  "status_message", "progress_done", "progress_total", "drift_report",
                  "flagged_reason"]


class AllocationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                        viewsets.GenericViewSet):
    """Allocations of the tenants you may see: where, how much, until when, and their state."""

    serializer_class = AllocationSerializer
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        qs = Allocation.objects.select_related("tenant", "pool").order_by("-created_at")
        status = self.request.query_params.get("status")
        if status:
            qs = qs.filter(status=status)
        return scope_to_tenants(self.request.user, qs)

    def get_object(self):
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])
