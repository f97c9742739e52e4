"""What approving a request would create, and the API server's dry-run answer to it; the
objects page of a request."""

from __future__ import annotations

import yaml

from fleet.allocations.desired import PreviewRow, allocation_manifests, preview
from fleet.allocations.manifests import render_manifests, tenant_may_see
from fleet.inventory.connections import backend_of
from fleet.kube import KubeError

from .domain import Status
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


def request_objects(request: CapacityRequest, *, platform_admin: bool) -> dict:
    """The Kubernetes objects of a request as its objects page shows them: what its
    allocation holds; for platform admins, while it waits for review, each object with the
    API server's dry-run answer; otherwise what approval would create. A tenant sees only
    the objects it may (fleet.allocations.manifests.tenant_may_see). `checked`: the dry-run
    answered; `rejected`: how many objects it refused."""
    rows = None
    if request.allocation_id:
        manifests = allocation_manifests(request.allocation)
    elif platform_admin and request.status == Status.SUBMITTED:
        rows = request_preview(request)  # the real API server's dry-run answer, per object
        manifests = [r.manifest for r in rows]
    else:
        manifests = request_manifests(request)
    if not platform_admin:
        keep = [i for i, m in enumerate(manifests) if tenant_may_see(m)]
        manifests = [manifests[i] for i in keep]
        rows = [rows[i] for i in keep] if rows else rows
    docs = [{"kind": m.get("kind", "?"), "name": m.get("metadata", {}).get("name", ""),
             "namespace": m.get("metadata", {}).get("namespace", ""),
             "yaml": yaml.safe_dump(m, sort_keys=False),
             "row": rows[i] if rows else None} for i, m in enumerate(manifests)]
    return {"docs": docs, "checked": rows is not None,
            "rejected": sum(1 for r in rows or [] if not r.accepted)}
