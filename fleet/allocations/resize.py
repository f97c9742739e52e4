"""A resize in place: read the facts under the pool's lock, decide (`resizing.resize_plan`),
write the new size with its history row and audit row in one transaction, then bring the
cluster in line (Kueue's quota, a block's nodes) as a move does."""

from __future__ import annotations

import logging
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from tenants.access import roles_for
from tenants.audit import reason_error
from tenants.notifications import Kind, notify, tenant_leads

from ..domain import FleetError, Route
from ..inventory.connections import backend_of
from ..inventory.selectors import free_dedicated_nodes, mig_weights, pool_capacity
from ..kube import DryRunBackend, KubeBackend, KubeError
from ..models import (
    Allocation,
    AllocationResize,
    ClusterQueueState,
    GpuNode,
    Pool,
    QueueWorkload,
)
from ..vocabulary import WorkloadState
from . import lifecycle
from .desired import decided_shares, dispatch_workers, worker_capacity
from .dispatch import split_shares
from .reconcile import allocation_reconcile
from .resizing import Held, ResizeFacts, ResizePlan, resize_plan, size_words
from .transitions import allocation_transition

log = logging.getLogger(__name__)



def held_of(alloc: Allocation) -> Held:
    return Held(route=Route(alloc.route), status=alloc.status,
                whole_devices=alloc.whole_devices, mig_profile=alloc.mig_profile,
                mig_count=alloc.mig_count, device_equivalents=alloc.device_equivalents,
                nodes=tuple(alloc.nodes.order_by("name").values_list("name", flat=True)),
                devices_per_node=alloc.pool.devices_per_node,
                ended=alloc.ends_at is not None and alloc.ends_at <= timezone.now())


def running_work(alloc: Allocation) -> tuple[Decimal, tuple[str, ...]]:
    """What its admitted work holds now (in its unit) and the first of those jobs' names."""
    work = QueueWorkload.objects.filter(allocation=alloc, state__in=WorkloadState.HOLDING)
    in_use = work.aggregate(total=Sum("devices"))["total"] or Decimal(0)
    return in_use, tuple(work.order_by("name").values_list("job", flat=True)[:6])


def resize_facts(alloc: Allocation, *, extra_nodes: int = 0) -> ResizeFacts:
    """What the decision reads: the work holding the allocation's quota (and when Kueue's
    answer about it was read), its pool's free capacity, and for a dispatched allocation
    what runs on each worker (the caller holds the pool's lock: nothing is promised
    meanwhile)."""
    in_use, running = running_work(alloc)
    cap = pool_capacity(alloc.pool)
    free_slices = None
    if cap.free_mig_slices is not None and alloc.mig_profile:
        free_slices = cap.free_mig_slices.get(alloc.mig_profile, 0)  # unreported: none free
    nodes = (free_dedicated_nodes(alloc.pool, extra_nodes)
             if alloc.route == Route.DEDICATED_BLOCK and extra_nodes > 0 else ())
    state = ClusterQueueState.objects.filter(allocation=alloc).only("observed_at").first()
    try:
        dry = isinstance(backend_of(alloc.pool.cluster), DryRunBackend)
    except KubeError:
        dry = False
    worker_use, names, shares_after = {}, {}, None
    if alloc.pool.dispatched and alloc.cluster_shares:
        workers = dispatch_workers()
        slug_of = {w.multikueue_cluster: w.slug for w in workers}
        names = {w.slug: w.name for w in workers}
        for ran_on, used in QueueWorkload.objects.filter(
                allocation=alloc, state__in=WorkloadState.HOLDING).exclude(ran_on="").values_list(
                "ran_on").annotate(total=Sum("devices")).values_list("ran_on", "total"):
            key = slug_of.get(ran_on, ran_on)
            worker_use[key] = worker_use.get(key, Decimal(0)) + used
        capacity = worker_capacity(alloc.pool, workers)
        shares_after = lambda n: split_shares(n, capacity)  # noqa: E731
    return ResizeFacts(in_use=in_use, running=running, free_devices=cap.free_devices,
                       free_slices=free_slices, free_nodes=nodes, mig_weights=mig_weights(),
                       queue_read_at=state.observed_at if state else None, now=timezone.now(),
                       read_every_seconds=0 if dry else settings.PORTAL_QUEUE_SYNC_SECONDS,
                       worker_use=worker_use, worker_names=names, shares_after=shares_after)


def allocation_resize(*, allocation: Allocation, size: int, by, reason: str = "",
                      by_policy: str = "", backend: KubeBackend | None = None) -> Allocation:
    """Change an active allocation's size. A team lead of the tenant or a platform admin
    shrinks it; only a platform admin grows it (a new promise). `by` None with `by_policy`:
    the tenant's own standing policy (billing's stranded-capacity grace period)."""
    with transaction.atomic():
        alloc, held, plan = resize_record(allocation=allocation, size=size, by=by,
                                          reason=reason, by_policy=by_policy)
    return resize_carry_out(alloc.pk, held, plan, backend=backend)


def resize_record(*, allocation: Allocation, size: int, by, reason: str = "",
                  by_policy: str = "", may_grow: bool = True
                  ) -> tuple[Allocation, Held, ResizePlan]:
    """The resize's reads, decision and writes, in the caller's transaction (which takes
    the pool's lock, then the allocation's). FleetError, with the reason, when refused.
    `may_grow` False: only a shrink (a stranded finding's), whoever asks."""
    roles = roles_for(by)
    if not ((by is None and by_policy) or roles.can_change_holdings_of(allocation.tenant_id)):
        raise FleetError("Only a team lead of this tenant or a platform admin may resize it.")
    if problem := reason_error(reason, required=False):
        raise FleetError(problem)
    with transaction.atomic():
        # The pool's lock first, as approval takes it: no promise is made twice.
        alloc = Allocation.objects.select_related("pool").get(pk=allocation.pk)
        Pool.objects.select_for_update(of=("self",)).get(pk=alloc.pool_id)
        alloc = Allocation.objects.select_for_update(of=("self",)).select_related(
            "tenant", "pool__cluster").get(pk=allocation.pk)
        held = held_of(alloc)
        per_node = max(1, alloc.pool.devices_per_node)
        facts = resize_facts(alloc, extra_nodes=max(0, size - held.size) // per_node
                             if isinstance(size, int) else 0)
        plan = resize_plan(held, size, facts, may_grow=roles.platform_admin and may_grow)
        if not plan.ok:
            raise FleetError(plan.reason)
        _write(alloc, held, plan, by=by, reason=reason, by_policy=by_policy)
    return alloc, held, plan


def resize_carry_out(allocation_id: int, held: Held, plan: ResizePlan, *,
                     backend: KubeBackend | None = None) -> Allocation:
    """After the resize is committed: bring the cluster in line (Kueue's quota, a block's
    nodes). If the cluster is away the periodic reconcile finishes it; nothing is half
    recorded."""
    cause = f"the resize to {size_words(held, plan.size)}"
    try:
        allocation_reconcile(allocation_id, backend=backend, cause=cause)
    except KubeError as exc:
        log.warning("resize of allocation %s: cluster update deferred: %s", allocation_id,
                    exc)
        Allocation.objects.filter(pk=allocation_id).update(
            status_message=f"Resized; the cluster update waits for the next reconcile: "
                           f"{exc.message}")
    return Allocation.objects.get(pk=allocation_id)


def _write(alloc: Allocation, held: Held, plan: ResizePlan, *, by, reason: str,
           by_policy: str) -> None:
    now = timezone.now().replace(microsecond=0)  # billing splits the hour in whole seconds
    said = plan.reason + (f" {reason.strip()}" if reason.strip() else "") + \
        (f" (the tenant's policy: {by_policy})" if by_policy else "")
    Allocation.objects.filter(pk=alloc.pk).update(
        whole_devices=plan.whole_devices, mig_count=plan.mig_count,
        device_equivalents=plan.device_equivalents)
    if alloc.pool.dispatched and alloc.cluster_shares:
        # The workers' split is the new size's, decided as at first provisioning.
        alloc.whole_devices, alloc.cluster_shares = plan.whole_devices, {}
        shares = decided_shares(alloc)
        Allocation.objects.filter(pk=alloc.pk).update(cluster_shares=shares)
        said += " Split across MultiKueue workers: " + ", ".join(
            f"{k} {v}" for k, v in sorted(shares.items())) + " device(s)."
    if plan.release_nodes:
        alloc.nodes.remove(*GpuNode.objects.filter(pool=alloc.pool, name__in=plan.release_nodes))
    if plan.add_nodes:
        alloc.nodes.add(*GpuNode.objects.filter(pool=alloc.pool, name__in=plan.add_nodes))
    AllocationResize.objects.create(
        allocation=alloc, at=now, whole_devices_before=held.whole_devices,
        whole_devices_after=plan.whole_devices, mig_count_before=held.mig_count,
        mig_count_after=plan.mig_count, devices_before=held.device_equivalents,
        devices_after=plan.device_equivalents, reason=said)
    # Through the lifecycle's one writer (in place: it stays active or expiring).
    allocation_transition(alloc.pk, from_states=lifecycle.RESIZABLE, to=alloc.status, by=by,
                          action="allocation.resized", reason=said,
                          message=alloc.status_message,
                          data={**plan.data, "before": str(held.device_equivalents),
                                **({"policy": by_policy} if by_policy else {})})
    notify(tenant_leads(alloc.tenant), Kind.CAPACITY_CHANGED,
           f"{alloc.namespace} resized to {size_words(held, plan.size)}",
           f"{said}\n\nBilling counts {size_words(held, plan.size)} from "
           f"{now:%Y-%m-%d %H:%M:%S} UTC.")
