"""What approving a request would create, and the API server's dry-run answer to it."""

from __future__ import annotations

from fleet.allocations.desired import PreviewRow, preview
from fleet.allocations.manifests import render_manifests
from fleet.inventory.connections import backend_of
from fleet.kube import KubeError

from .models import CapacityRequest
from .selectors import approval_plan


def request_manifests(request: CapacityRequest) -> list[dict]:
    """The objects approval would render: the same plan `request_approve` applies."""
    plan = approval_plan(request)
    if not plan.ok:
        return []
    return render_manifests(plan.spec(request.tenant))


def request_preview(request: CapacityRequest) -> list[PreviewRow]:
    """Dry-run each object. A server that cannot be reached is one row saying so."""
    plan = approval_plan(request)
    if not plan.ok:
        return []
    manifests = render_manifests(plan.spec(request.tenant))
    try:  # dry-run where approval would apply: the pool's cluster
        return preview(manifests, backend=backend_of(plan.pool.cluster))
    except KubeError as exc:
        return [PreviewRow(key=None, accepted=False, message=exc.message, manifest={})]
