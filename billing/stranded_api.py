"""Stranded findings in the API, scoped as the pages: finance and platform admins read every
one, a tenant's leads and members their own (another tenant's is a 404). A tenant's lead
answers one (accept, or keep with a reason) through the same services as the page."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from tenants.access import roles_for
from tenants.audit import REASON_MAX

from .forms import StrandedAnswerForm
from .models import StrandedFinding
from .stranded_board import visible_findings
from .stranded_services import finding_accept, finding_decline


class StrandedFindingSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = serializers.CharField(source="allocation.namespace", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    proposal_data = serializers.JSONField(read_only=True,
                                          help_text="the proposal's figures after the action")
    evidence = serializers.JSONField(read_only=True, help_text="window, series summary, "
                                     "thresholds, rate")

    class Meta:
        model = StrandedFinding
        fields = ["id", "tenant", "pool", "allocation", "namespace", "kind", "status",
                  "stranded_devices", "cost_per_day", "action", "proposal", "proposal_data",
                  "cost_per_day_after", "reason", "evidence", "needs_yes", "stranded_since",
                  "found_at", "last_seen_at", "closed_at", "decided_by", "decision_reason",
                  "outcome", "given_back_devices"]
        read_only_fields = fields


class AnswerSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["accept", "decline"])
    reason = serializers.CharField(required=False, allow_blank=True, max_length=REASON_MAX,
                                   help_text="needed to decline (keep)")

    def validate(self, attrs):
        form = StrandedAnswerForm(attrs)  # the page's rule, once
        if not form.is_valid():
            raise serializers.ValidationError({k: list(v) for k, v in form.errors.items()})
        return form.cleaned_data


class StrandedViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      viewsets.GenericViewSet):
    """Findings of stranded capacity, each with its evidence, price per day and proposal."""

    serializer_class = StrandedFindingSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return StrandedFinding.objects.none()
        rows = visible_findings(self.request.user).order_by("-found_at", "-pk")
        status = self.request.query_params.get("status", "")
        if status in StrandedFinding.Status.values:
            rows = rows.filter(status=status)
        return rows

    @extend_schema(parameters=[OpenApiParameter(
        "status", str, enum=StrandedFinding.Status.values,
        description="only findings in this status (default: every one)")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=AnswerSerializer, responses=StrandedFindingSerializer)
    @action(detail=True, methods=["post"])
    def answer(self, request, pk=None):
        """A tenant's lead accepts the proposal (a release is carried out) or keeps the hold
        with a reason; audited and notified."""
        row = get_object_or_404(self.get_queryset(), pk=pk)
        if not roles_for(request.user).can_file_for(row.tenant_id):
            raise PermissionDenied("Only a team lead of this tenant answers its findings.")
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data["decision"] == "accept":
            row = finding_accept(finding=row, by=request.user, reason=data["reason"])
        else:
            row = finding_decline(finding=row, by=request.user, reason=data["reason"])
        return Response(StrandedFindingSerializer(row).data)


__all__ = ["StrandedViewSet"]
