"""What approving a request would create, and the API server's dry-run answer to it; the
objects page of a request."""

from __future__ import annotations

import yaml

from fleet.allocations.desired import PreviewRow, allocation_manifests, preview
from fleet.allocations.manifests import render_manifests, tenant_may_see
from fleet.inventory.connections import backend_of
from fleet.kube import KubeError
from fleet.models import Route

from .domain import Status, no_pool_message
from .models import CapacityRequest
from .selectors import approval_plan, override_plan


def _approval(request: CapacityRequest, override_route: str):
    """The plan approval would carry out: as the request stands, or under an override."""
    return override_plan(request, override_route) if override_route else approval_plan(request)


def request_manifests(request: CapacityRequest, override_route: str = "") -> list[dict]:
    """The objects approval would render: the same plan `request_approve` applies (under
    `override_route`, the one it applies when approved with that override). Raises
    ValueError for a route the request cannot take."""
    plan = _approval(request, override_route)
    if not plan.ok:
        return []
    return render_manifests(plan.spec(request.tenant))


def request_preview(request: CapacityRequest, override_route: str = "") -> list[PreviewRow]:
    """Dry-run each object. A server that cannot be reached is one row saying so."""
    plan = _approval(request, override_route)
    if not plan.ok:
        return []
    manifests = render_manifests(plan.spec(request.tenant))
    try:  # dry-run where approval would apply: the pool's cluster
        return preview(manifests, backend=backend_of(plan.pool.cluster))
    except KubeError as exc:
        return [PreviewRow(key=None, accepted=False, message=exc.message, manifest={})]


def request_objects(request: CapacityRequest, *, platform_admin: bool,
                    override_route: str = "") -> dict:
    """The Kubernetes objects of a request as its objects page shows them: what its
    allocation holds; for platform admins, while it waits for review, each object with the
    API server's dry-run answer (under `override_route`, the route the admin chose on the
    review page: the objects approval with that override creates); otherwise what approval
    would create. A tenant sees only the objects it may
    (fleet.allocations.manifests.tenant_may_see). `checked`: the dry-run answered;
    `rejected`: how many objects it refused; `route`: the route they are of; `why`: why
    there are none under the override."""
    rows, why = None, ""
    pending_review = platform_admin and request.status == Status.SUBMITTED
    override_route = override_route if pending_review and override_route != request.route \
        else ""
    if request.allocation_id:
        manifests = allocation_manifests(request.allocation)
    elif pending_review:
        try:  # the real API server's dry-run answer, per object
            rows = request_preview(request, override_route)
        except ValueError as exc:
            rows, why = [], str(exc)
        manifests = [r.manifest for r in rows]
        if override_route and not rows and not why:  # a route with no active pool
            why = no_pool_message(Route(override_route)) + "."
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
    return {"docs": docs, "checked": bool(rows), "why": why,
            "rejected": sum(1 for r in rows or [] if not r.accepted),
            "override": Route(override_route).label
            if override_route in Route.values else ""}
