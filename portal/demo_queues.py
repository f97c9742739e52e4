"""Queue state for the embedded demo: what Kueue would report for the demo allocations.

The embedded run has no cluster, so nothing runs; these rows are what the queue sync would
have recorded after two weeks of work (running and waiting jobs, admissions with their
waits, a reclaim preemption, borrowed hours), so the queue pages have something true to
the real shapes to show. A real deployment records them from Kueue (fleet.queues.sync).
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

from django.db.models import Q

from fleet.models import (
    Allocation,
    ClusterQueueState,
    GpuNode,
    QueueEvent,
    QueueUsageHour,
    QueueWorkload,
)
from fleet.queues.ledger import REQUEUED_WORDS
from fleet.queues.placement import NOTHING, Placement, placement_events
from fleet.queues.timing import EVENT, MICRO, WATCH
from fleet.queues.truth import Stop, explain_stop
from fleet.vocabulary import MIG_RESOURCE_PREFIX, WHOLE_GPU


def _uid(rng: random.Random) -> str:
    return f"{rng.getrandbits(32):08x}-demo-{rng.getrandbits(16):04x}"


def seed_demo_queues(now: dt.datetime) -> int:
    """Queue rows for every active or pending demo allocation on a Kueue route."""
    rng = random.Random(7)
    made = 0
    # Allocations still running at `now`: the demo writes queues before it plays the days
    # that retire a short allocation, which then must have no queue to show.
    for alloc in Allocation.objects.filter(status__in=(Allocation.Status.PENDING,
                                                         Allocation.Status.ACTIVE)).filter(
            Q(ends_at__isnull=True) | Q(ends_at__gt=now)).select_related("pool", "tenant"):
        mig = bool(alloc.mig_profile)
        nominal = Decimal(alloc.mig_count if mig else alloc.whole_devices)
        resource = f"{MIG_RESOURCE_PREFIX}{alloc.mig_profile}" if mig else WHOLE_GPU
        cohort = alloc.pool.cohort if alloc.route in ("shared_pool", "mig_vcluster") else ""
        limit = Decimal(alloc.pool.borrowing_limit_devices) if cohort else None
        running, pending = _scenario(alloc, nominal, now)
        for name, devices, since, limit_s in running:
            QueueWorkload.objects.create(
                allocation=alloc, uid=_uid(rng), namespace=alloc.namespace,
                name=f"job-{name}-{rng.getrandbits(20):05x}", job=name, local_queue="gpu",
                cluster_queue=alloc.namespace, devices=devices, state="admitted",
                submitted_at=since - dt.timedelta(minutes=3), admitted_at=since,
                max_seconds=limit_s, observed_at=now)
        for i, (name, devices, since) in enumerate(pending):
            QueueWorkload.objects.create(
                allocation=alloc, uid=_uid(rng), namespace=alloc.namespace,
                name=f"job-{name}-{rng.getrandbits(20):05x}", job=name, local_queue="gpu",
                cluster_queue=alloc.namespace, devices=devices, state="pending",
                submitted_at=since, pending_reason="Pending", position=i,
                position_source="visibility", observed_at=now)
        usage = sum((d for _, d, _, _ in running), Decimal(0))
        ClusterQueueState.objects.update_or_create(name=alloc.namespace, defaults={
            "allocation": alloc, "cohort": cohort, "resource": resource, "nominal": nominal,
            "borrowing_limit": limit, "usage": usage,
            "borrowed": max(Decimal(0), usage - nominal),
            "pending": len(pending), "admitted": len(running), "observed_at": now})
        # Only a queue that may borrow has borrowed hours or reclaims in its past.
        made += _history(alloc, rng, now, nominal, cohort if limit else "")
    return made


def _scenario(alloc: Allocation, nominal: Decimal, now: dt.datetime):
    """Running (name, devices, since, time limit) and pending (name, devices, since) work.
    In the shared cohort, one tenant borrows while the other waits for more than its own
    free quota: the case the queue page explains."""
    ago = lambda **kw: now - dt.timedelta(**kw)  # noqa: E731
    if alloc.route == "shared_pool" and alloc.tenant.slug.startswith("globex"):
        return [("batch-score", nominal + 2, ago(hours=1, minutes=10), None)], []
    if alloc.route == "shared_pool":
        return ([("train-7", nominal / 2, ago(hours=2, minutes=48), 6 * 3600)],
                [("eval-3", nominal, ago(minutes=25))])
    return ([("train-7", nominal, ago(hours=2, minutes=48), 6 * 3600)],
            [("eval-3", max(Decimal(1), nominal / 2), ago(minutes=25))])


def _history(alloc: Allocation, rng: random.Random, now: dt.datetime, nominal: Decimal,
             cohort: str) -> int:
    """Two weeks of admissions (waits growing on busy days), a preemption now and then, and
    borrowed hours when the queue shares a cohort."""
    events, hours, done = [], [], []
    nodes = _node_names(alloc)  # once per allocation, not per admission
    for day in range(14, 0, -1):
        base = (now - dt.timedelta(days=day)).replace(hour=8, minute=0, second=0,
                                                      microsecond=0)
        busy = 1 + (day % 7 in (1, 2))  # two busy days a week
        for k in range(rng.randint(3, 7)):
            submitted = base + dt.timedelta(minutes=rng.randint(0, 9 * 60))
            wait = rng.expovariate(1 / (240 * busy)) + rng.randint(5, 40)
            admitted = submitted + dt.timedelta(seconds=wait)
            uid, name = _uid(rng), f"run-{day:02d}{k}"
            devices = Decimal(rng.choice([1, 2, int(nominal) or 1]))
            estimate = admitted + dt.timedelta(seconds=rng.gauss(0, 0.3 * wait + 60))
            done.append(QueueWorkload(
                allocation=alloc, uid=uid, namespace=alloc.namespace, name=f"job-{name}",
                job=name, local_queue="gpu", cluster_queue=alloc.namespace, devices=devices,
                state="finished", submitted_at=submitted, admitted_at=admitted,
                finished_at=admitted + dt.timedelta(hours=2), first_estimate_at=estimate,
                first_estimate_basis="history", observed_at=now))
            common = {"allocation": alloc, "workload_uid": uid, "workload": name,
                      "local_queue": "gpu", "devices": devices}
            events += [QueueEvent(kind="submitted", at=submitted, reason="Submitted to the "
                                  "queue.", **common),
                       QueueEvent(kind="admitted", at=admitted, wait_seconds=wait,
                                  seam_seconds=wait, reason="Admitted: its devices were "
                                  "reserved and its pods released.", **common)]
            events += [QueueEvent(allocation=alloc, **e) for e in _steps(
                alloc, nodes, rng, admitted,
                {k: v for k, v in common.items() if k != "allocation"})]
            if cohort and busy > 1 and k == 0:
                stop = Stop(admitted + dt.timedelta(hours=1), "Preempted",
                            "InCohortReclamation", "")
                events.append(QueueEvent(kind="preempted", at=stop.at,
                                         reason=explain_stop(stop), **common))
                # Requeued once its pods stopped, admitted again once the cohort had room,
                # and running again.
                requeued = stop.at + dt.timedelta(seconds=2)
                events.append(QueueEvent(kind="requeued", at=requeued, reason=REQUEUED_WORDS,
                                         **common))
                back = stop.at + dt.timedelta(minutes=rng.randint(4, 40))
                requeue_wait = (back - requeued).total_seconds()
                events.append(QueueEvent(kind="admitted", at=back, wait_seconds=requeue_wait,
                                         seam_seconds=requeue_wait, reason="Admitted again: "
                                         "its devices were reserved and its pods released.",
                                         **common))
                events += [QueueEvent(allocation=alloc, **e) for e in _steps(
                    alloc, nodes, rng, back,
                    {k: v for k, v in common.items() if k != "allocation"})]
        if cohort:
            for h in range(10, 10 + rng.randint(1, 4)):
                hours.append(QueueUsageHour(
                    allocation=alloc, hour=base.replace(hour=h),
                    used_s=(nominal + 2) * 3600, borrowed_s=Decimal(2 * 3600)))
    QueueWorkload.objects.bulk_create(done)
    for e in events:
        _clocked(e)
    QueueEvent.objects.bulk_create(events)
    QueueUsageHour.objects.bulk_create(hours)
    return len(events)


def _clocked(e: QueueEvent) -> None:
    """A step's clocks as the watch records them (fleet/queues/timing.py): Kubernetes' stamp
    in whole seconds; the scheduler's Event for a placement, the watch's arrival, a few
    milliseconds late, for the rest."""
    e.kube_at = e.at.replace(microsecond=0)
    if e.kind == QueueEvent.Kind.SCHEDULED:
        e.at_source, e.at_bound_seconds = EVENT, MICRO
    else:
        e.at_source, e.at_bound_seconds = WATCH, 0.004


def _node_names(alloc: Allocation) -> list[str]:
    """Where the demo's pods ran: the block's own nodes, else the pool's."""
    return sorted(alloc.nodes.values_list("name", flat=True)) or sorted(
        GpuNode.objects.filter(pool=alloc.pool).values_list("name", flat=True)) or ["node"]


def _steps(alloc: Allocation, nodes: list[str], rng: random.Random, admitted: dt.datetime,
           base: dict) -> list[dict]:
    """The steps after admission as the ledger records them from the pods and claims: pods
    within a second or two, a MIG claim allocated, placed, running once the image is in."""
    pods = admitted + dt.timedelta(seconds=rng.uniform(0.3, 1.8))
    claimed = pods + dt.timedelta(seconds=rng.uniform(0.1, 0.6)) if alloc.mig_profile else None
    scheduled = (claimed or pods) + dt.timedelta(seconds=rng.uniform(0.05, 0.4))
    running = scheduled + dt.timedelta(seconds=rng.choice([2, 3, 4, 6, 25, 48]) *
                                       rng.uniform(0.8, 1.2))
    node = rng.choice(nodes)
    return placement_events(NOTHING, Placement(
        pods_at=pods, scheduled_at=scheduled, node=node, claimed_at=claimed,
        devices=(f"gpu.nvidia.com: gpu-{rng.randint(0, 7)}-mig-{alloc.mig_profile}-0 on "
                 f"{node}",) if claimed else (), running_at=running), admitted_at=admitted,
        base=base)
