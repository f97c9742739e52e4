"""The cluster registry's API, for platform admins: register, inspect, check and retire the
clusters the portal provisions into and reads from. Values are validated by the same forms as
the pages (one rule per field)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from tenants.access import require_platform_admin
from tenants.audit import REASON_MAX
from tenants.idempotency import IdempotentWritesMixin

from .forms import ClusterCreateForm, ClusterForm
from .inventory.selectors import clusters_overview
from .inventory.services import cluster_check, cluster_register, cluster_retire, cluster_update
from .models import Cluster, home_cluster_id

# Device-equivalents as the rest of the API gives them: a decimal string, four places.
DEVICES = serializers.DecimalField(max_digits=12, decimal_places=4)


class ClusterSerializer(serializers.ModelSerializer):
    """A registered cluster: how it is reached (a reference, never the credential), what
    the last check found, and what its pools can promise."""

    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    api_server = serializers.CharField(read_only=True, help_text="blank: what the kubeconfig says")
    pools = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    promisable_devices = serializers.SerializerMethodField()
    allocated_devices = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = ["slug", "name", "role", "region", "provider", "labels", "connection",
                  "credential_ref", "api_server", "multikueue_name",
                  "dispatch_credential_ref", "created_at",
                  "retired_at", "retired_reason", "checked_at", "answers", "health_message",
                  "server_seen", "kubernetes_version", "kueue_version", "multikueue_active",
                  "multikueue_reason", "pools", "nodes", "promisable_devices",
                  "allocated_devices"]
        read_only_fields = fields

    def _view(self, obj):
        views = self.context.setdefault("cluster_views", {})
        if obj.pk not in views:
            views[obj.pk] = clusters_overview([obj])[0]
        return views[obj.pk]

    def get_pools(self, obj) -> list[str]:
        return [p.slug for p, _cap in self._view(obj).pools]

    def get_nodes(self, obj) -> int:
        return self._view(obj).counts.nodes

    @extend_schema_field(DEVICES)
    def get_promisable_devices(self, obj) -> str:
        return DEVICES.to_representation(self._view(obj).promisable_devices)

    @extend_schema_field(DEVICES)
    def get_allocated_devices(self, obj) -> str:
        return DEVICES.to_representation(self._view(obj).allocated_devices)


class ClusterWriteSerializer(serializers.Serializer):
    """What an admin gives to register or change a cluster (validated by the same form as
    the page: one rule per field)."""

    slug = serializers.CharField(required=False, help_text="registering only; fixed after")
    name = serializers.CharField(required=False)
    role = serializers.ChoiceField(choices=Cluster.Role.choices, required=False)
    region = serializers.CharField(required=False, allow_blank=True)
    provider = serializers.CharField(required=False, allow_blank=True)
    connection = serializers.ChoiceField(choices=Cluster.Connection.choices, required=False)
    credential_ref = serializers.CharField(required=False, allow_blank=True,
                                           help_text="file:/path or secret:<ns>/<name>[#key]")
    api_server = serializers.CharField(required=False, allow_blank=True)
    multikueue_name = serializers.CharField(required=False, allow_blank=True)
    dispatch_credential_ref = serializers.CharField(
        required=False, allow_blank=True,
        help_text="workers: the kubeconfig MultiKueue uses, as credential_ref")


class RetireClusterSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX)


def _valid(form):
    """The form's refusals as the API's (400, `extra.fields` per field), else the form."""
    if not form.is_valid():
        raise serializers.ValidationError(
            {name: [str(e) for e in errors] for name, errors in form.errors.items()})
    return form


class ClusterViewSet(IdempotentWritesMixin, viewsets.GenericViewSet):
    """Platform admins: the clusters the portal provisions into and reads from."""

    serializer_class = ClusterSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]{1,40}"
    pagination_class = None

    def get_queryset(self):
        home_cluster_id()  # the home cluster is there before anything names it
        return Cluster.objects.all()

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        require_platform_admin(request.user)

    def list(self, request):
        views = clusters_overview()
        context = {**self.get_serializer_context(),
                   "cluster_views": {v.cluster.pk: v for v in views}}
        return Response(ClusterSerializer([v.cluster for v in views], many=True,
                                          context=context).data)

    def retrieve(self, request, slug=None):
        return Response(ClusterSerializer(self.get_object()).data)

    def _fields(self, instance=None) -> dict:
        body = ClusterWriteSerializer(data=request_data(self.request))
        body.is_valid(raise_exception=True)
        given = dict(body.validated_data)
        if instance is None:
            return given
        if given.pop("slug", instance.slug) != instance.slug:  # the page has no such field
            raise serializers.ValidationError(
                {"slug": ["Fixed once registered: register a new cluster instead."]})
        current = {f: getattr(instance, f) for f in ClusterForm.Meta.fields}
        return {**current, **given}

    @extend_schema(request=ClusterWriteSerializer, responses={201: ClusterSerializer})
    def create(self, request):
        """Register a cluster (400 with the field's reason when a value is refused)."""
        cluster = cluster_register(form=_valid(ClusterCreateForm(data=self._fields())),
                                   by=request.user)
        return Response(ClusterSerializer(cluster).data, status=201)

    @extend_schema(request=ClusterWriteSerializer, responses=ClusterSerializer)
    def partial_update(self, request, slug=None):
        """Change a live cluster's registration; the fields not given stay."""
        cluster = self.get_object()
        form = _valid(ClusterForm(data=self._fields(cluster), instance=cluster))
        return Response(ClusterSerializer(cluster_update(form=form, by=request.user)).data)

    @extend_schema(request=None, responses=ClusterSerializer)
    @action(detail=True, methods=["post"])
    def check(self, request, slug=None):
        """Ask the cluster now whether it answers (versions; for a worker, MultiKueue's
        `Active` on the manager). Audited."""
        return Response(ClusterSerializer(cluster_check(cluster=self.get_object(),
                                                        by=request.user)).data)

    @extend_schema(request=RetireClusterSerializer, responses=ClusterSerializer)
    @action(detail=True, methods=["post"], serializer_class=RetireClusterSerializer)
    def retire(self, request, slug=None):
        """Take the cluster out of the portal; 400 while allocations still live there."""
        body = RetireClusterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(ClusterSerializer(cluster_retire(
            cluster=self.get_object(), by=request.user,
            reason=body.validated_data["reason"])).data)


def request_data(request) -> dict:
    """The body as a plain dict (a form post or JSON alike)."""
    data = request.data
    return data.dict() if hasattr(data, "dict") else dict(data)
