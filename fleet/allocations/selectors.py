"""Reads of the allocations room."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.conf import settings
from django.db.models import Count, Q

from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant

from ..domain import Route
from ..inventory.selectors import pool_capacity
from ..models import Allocation, Pool
from ..vocabulary import KUEUE_QUEUE_LABEL
from .connect import example_workload, how_to_connect, tenant_kubeconfig
from .desired import allocation_spec
from .lifecycle import USABLE
from .manifests import LOCAL_QUEUE

S = Allocation.Status


def connect_info(allocation) -> dict:
    """What a tenant needs to use an active allocation: the cluster, a kubeconfig, the
    queue, an example workload and the steps (fleet/connect.py renders them)."""
    spec = allocation_spec(allocation)
    ca = ""
    if settings.PORTAL_CLUSTER_CA_FILE:
        try:
            ca = Path(settings.PORTAL_CLUSTER_CA_FILE).read_text()
        except OSError:
            ca = ""  # said on the page: the kubeconfig then needs the CA added by hand
    server = settings.PORTAL_CLUSTER_API_URL
    kubeconfig = tenant_kubeconfig(
        spec, server=server or "https://kubernetes.invalid:6443", ca_pem=ca,
        issuer=settings.KEYCLOAK_SERVER_URL or "https://keycloak.invalid/realms/ai-factory",
        client_id=settings.PORTAL_KUBECTL_CLIENT_ID)
    example = example_workload(spec, image=settings.PORTAL_EXAMPLE_IMAGE)
    return {"server": server, "ca_configured": bool(ca), "namespace": spec.namespace,
            "local_queue": LOCAL_QUEUE, "queue_label": KUEUE_QUEUE_LABEL, "route": spec.route,
            "steps": how_to_connect(spec),
            "kubeconfig": yaml.safe_dump(kubeconfig, sort_keys=False),
            "example": yaml.safe_dump(example, sort_keys=False)}


def stalled_provisioning(now: dt.datetime, stall: dt.timedelta) -> list[int]:
    """Allocations whose provisioning task is lost: approved but never started (the task
    queue was away at approval), or started and silent for longer than `stall` (its worker
    died). Queuing them again is safe: provisioning is idempotent, and the status changes
    are conditional, so a late duplicate changes nothing."""
    waiting = Allocation.objects.filter(status=S.PENDING, created_at__lt=now - stall)
    silent = Allocation.objects.filter(status=S.PROVISIONING).filter(
        Q(progress_at__lt=now - stall) | Q(progress_at__isnull=True, created_at__lt=now - stall))
    return sorted(set(waiting.values_list("pk", flat=True)) |
                  set(silent.values_list("pk", flat=True)))


@kept_across_requests(Allocation)
def usable_by_status(scope: tuple[int, ...] | None) -> tuple[tuple[str, int], ...]:
    """Usable allocations per status among the scope's tenants (None: every tenant's; the
    overview's figures), kept across reading requests until an allocation is written."""
    held = Allocation.objects.filter(status__in=USABLE)
    if scope is not None:
        held = held.filter(tenant__in=scope)
    return tuple(held.values_list("status").annotate(n=Count("id")).order_by())


@dataclass(frozen=True)
class FlaggedAllocation:
    tenant_name: str
    namespace: str
    pool_name: str
    flagged_reason: str


@kept_across_requests(Allocation, Tenant, Pool)
def flagged_allocations() -> tuple[FlaggedAllocation, ...]:
    """Holding allocations with a flag (capacity lost under them), with tenant and pool,
    kept across reading requests until an allocation, tenant or pool is written."""
    return tuple(FlaggedAllocation(*row) for row in (
        Allocation.objects.exclude(flagged_reason="").filter(status__in=Allocation.HOLDING)
        .order_by("-created_at", "-id")  # newest first, as the fleet page always had them
        .values_list("tenant__name", "namespace", "pool__name", "flagged_reason")))


def allocations_on(node):
    """The allocations holding the node, with tenant and pool."""
    return node.allocations.select_related("tenant", "pool").filter(
        status__in=Allocation.HOLDING)


def affected_by_retiring(node):
    """When a retiring node leaves its pool holding more than it can promise: the pool's
    holding allocations other than dedicated blocks (a block moves off node by node:
    moves.retirement_plan). Otherwise none."""
    if not (node.retiring and node.pool) or not pool_capacity(node.pool).overcommitted:
        return []
    return (Allocation.objects.filter(pool=node.pool, status__in=Allocation.HOLDING)
            .exclude(route=Route.DEDICATED_BLOCK).select_related("tenant"))
