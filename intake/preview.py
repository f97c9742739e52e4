"""What approving a request would create, and the API server's dry-run answer to it."""

from __future__ import annotations

from tenants.capacity import choose_dedicated_nodes
from tenants.kube import KubeError
from tenants.manifests import render_manifests
from tenants.models import Allocation, GpuNode, Pool, Route
from tenants.provisioning import PreviewRow, preview, spec_for
from tenants.services import namespace_for

from .models import CapacityRequest
from .selectors import plan_for_request


def request_manifests(request: CapacityRequest) -> list[dict]:
    """The objects approval would render, with candidate nodes for a dedicated block."""
    decision, plan = plan_for_request(request)
    if plan is None or not decision.ok:
        return []
    pool = Pool.objects.get(pk=plan.pool.pool_id)
    nodes: tuple[str, ...] = ()
    if decision.route is Route.DEDICATED_BLOCK:
        pool_nodes = [n.facts() for n in GpuNode.objects.filter(pool=pool)]
        reserved = GpuNode.objects.filter(
            pool=pool, allocations__status__in=Allocation.HOLDING).values_list("name", flat=True)
        nodes = tuple(choose_dedicated_nodes(pool_nodes, count=plan.nodes,
                                             reserved_nodes=reserved))
    spec = spec_for(
        allocation_id=0, tenant=request.tenant, pool=pool,
        namespace=namespace_for(request.tenant, f"r{request.pk}"), route=decision.route.value,
        whole_devices=int(plan.held_devices) if decision.route is not Route.MIG_VCLUSTER else 0,
        mig_profile=decision.mig_profile, mig_count=decision.mig_count, nodes=nodes)
    return render_manifests(spec)


def request_preview(request: CapacityRequest) -> list[PreviewRow]:
    """Dry-run each object. A server that cannot be reached is one row saying so."""
    manifests = request_manifests(request)
    try:
        return preview(manifests)
    except KubeError as exc:
        return [PreviewRow(key=None, accepted=False, message=exc.message, manifest={})]
