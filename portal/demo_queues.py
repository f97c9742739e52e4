"""Queue history for the embedded demo, recorded the way a real deployment records it.

The embedded run has no cluster, so nothing runs. The demo writes what Kueue would have
said over the last two weeks — each job's Workload as Kueue writes it at every step
(submitted, admitted, reclaimed by the cohort and requeued, admitted again, finished), its
pods' steps after each admission, and the ClusterQueues — and hands them, step by step, to
the queue sync's own recording path (parse_workload → record_workloads → ledger_changes;
parse_cluster_queue → held_by_admissions → store_queues; first_estimates). So the ledger's
rows, events and counts are made by the code that makes them from a real Kueue, and every
figure on the queue page (running now, admitted today, the last 14 days) agrees with the
others. Borrowed hours are the queue's measured use (QueueUsageHour), as the sync integrates
it; the first estimates of the past jobs are the demo's own (no past queue state to
estimate from).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Q

from fleet.models import Allocation, ClusterQueueState, GpuNode, QueueUsageHour, QueueWorkload
from fleet.queues.placement import Placement
from fleet.queues.positions import positions_kept
from fleet.queues.queue_hours import held_by_admissions, store_queues
from fleet.queues.reading import first_estimates
from fleet.queues.sync import record_workloads
from fleet.queues.truth import PENDING, parse_cluster_queue, parse_workload
from fleet.vocabulary import MIG_RESOURCE_PREFIX, WHOLE_GPU

QUEUE = "gpu"  # the LocalQueue every demo job is submitted to


def _t(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _s(at: dt.datetime) -> dt.datetime:
    """To the second, as Kubernetes records times."""
    return at.replace(microsecond=0)


@dataclass
class _Job:
    """One Workload over its life: what Kueue says of it at each step, with the steps its
    pods took after that admission (None: not admitted at that step)."""

    alloc: Allocation
    uid: str
    name: str
    devices: Decimal
    resource: str
    created: dt.datetime
    max_seconds: int | None = None
    estimate: dt.datetime | None = None  # the first estimate it was given (past jobs)
    snapshots: list[tuple[dict, Placement | None]] = field(default_factory=list)

    def workload(self, *, admitted=None, stop=None, requeued=None, finished=None) -> dict:
        ns = self.alloc.namespace
        spec = {"queueName": QUEUE, "priority": 0, "podSets": [{"name": "main", "count": 1}]}
        if self.max_seconds:
            spec["maximumExecutionTimeSeconds"] = self.max_seconds
        asks = {self.resource: f"{self.devices.normalize():f}"}
        status: dict = {"conditions": [], "resourceRequests": [{"name": "main",
                                                                "resources": asks}]}
        conds = status["conditions"]
        if admitted:
            conds += [{"type": t, "status": "True", "reason": t,
                       "lastTransitionTime": _t(admitted)} for t in ("QuotaReserved", "Admitted")]
            status["admission"] = {"clusterQueue": ns, "podSetAssignments": [
                {"name": "main", "count": 1, "resourceUsage": asks}]}
        else:
            conds.append({"type": "QuotaReserved", "status": "False", "reason": "Pending",
                          "message": "insufficient unused quota in the ClusterQueue",
                          "lastTransitionTime": _t(requeued or self.created)})
        if stop:  # reclaimed by the cohort: evicted (still so while it waits again)
            conds += [{"type": "Evicted", "status": "False" if admitted else "True",
                       "reason": "Preempted", "message": "Preempted to reclaim quota",
                       "lastTransitionTime": _t(stop)},
                      {"type": "Preempted", "status": "False" if admitted else "True",
                       "reason": "InCohortReclamation", "lastTransitionTime": _t(stop)},
                      {"type": "Requeued", "status": "True", "reason": "Preempted",
                       "lastTransitionTime": _t(requeued)}]
        if finished:
            conds.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                          "lastTransitionTime": _t(finished)})
        version = str(len(self.snapshots) + 1)
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": f"job-{self.name}-{self.uid[:5]}", "namespace": ns,
                             "uid": self.uid, "creationTimestamp": _t(self.created),
                             "resourceVersion": version, "ownerReferences": [
                                 {"kind": "Job", "name": self.name, "controller": True}]},
                "spec": spec, "status": status}

    def step(self, placement: Placement | None = None, **kw) -> None:
        self.snapshots.append((self.workload(**kw), placement))


def seed_demo_queues(now: dt.datetime) -> int:
    """Queue history for every active or pending demo allocation on a Kueue route, through
    the sync's recording path. Returns the number of events recorded."""
    rng = random.Random(7)
    # Allocations still running at `now`: the demo writes queues before it plays the days
    # that retire a short allocation, which then must have no queue to show.
    allocs = list(Allocation.objects.filter(status__in=(
        Allocation.Status.PENDING, Allocation.Status.ACTIVE)).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=now)).select_related("pool", "tenant"))
    allocations = {a.namespace: a for a in allocs}
    past, current, cluster_queues, hours = [], [], [], []
    for alloc in allocs:
        mig = bool(alloc.mig_profile)
        nominal = Decimal(alloc.mig_count if mig else alloc.whole_devices)
        resource = f"{MIG_RESOURCE_PREFIX}{alloc.mig_profile}" if mig else WHOLE_GPU
        cohort = alloc.pool.cohort if alloc.route in ("shared_pool", "mig_vcluster") else ""
        limit = alloc.pool.borrowing_limit_devices if cohort else None
        cluster_queues.append(_cluster_queue(alloc.namespace, resource, nominal, cohort, limit))
        nodes = _node_names(alloc)  # once per allocation, not per admission
        current += _scenario(alloc, nominal, resource, nodes, rng, now)
        # Only a queue that may borrow has borrowed hours or reclaims in its past.
        jobs, borrowed = _history(alloc, rng, now, nominal, resource, nodes,
                                  bool(cohort and limit))
        past += jobs
        hours += borrowed
    events = _replay(past, allocations, {}, now)
    final = [parse_workload(j.snapshots[-1][0], cluster_queue_of=_queue_of(allocations))
             for j in past + current]
    queues = held_by_admissions({q.name: q for q in map(parse_cluster_queue, cluster_queues)},
                                final, followed=set(allocations))
    store_queues(queues, {s.name: s for s in ClusterQueueState.objects.all()}, allocations,
                 now, due=set(queues))
    events += _replay(current, allocations, queues, now)
    first_estimates(now)  # the waiting jobs' first estimates, as every sync records them
    _past_estimates(past, rng)
    QueueUsageHour.objects.bulk_create(hours)
    return events


def _queue_of(allocations) -> dict[tuple[str, str], str]:
    return {(ns, QUEUE): ns for ns in allocations}  # an allocation's queue is its namespace


def _replay(jobs: list[_Job], allocations: dict, queues: dict, now: dt.datetime) -> int:
    """Hand the jobs' steps to the sync's recorder in order: the first step of every job,
    then the second, and so on (each job's steps in its own order; the ledger's decision is
    per workload)."""
    events = 0
    queue_of = _queue_of(allocations)
    for k in range(max((len(j.snapshots) for j in jobs), default=0)):
        steps = [j.snapshots[k] for j in jobs if k < len(j.snapshots)]
        facts = [parse_workload(obj, cluster_queue_of=queue_of) for obj, _ in steps]
        placements = {f.uid: p for f, (_, p) in zip(facts, steps, strict=True) if p}
        pending: dict[str, list] = {}
        for f in facts:
            if f.state == PENDING:
                pending.setdefault(f.cluster_queue, []).append(f)
        positions, _ask = positions_kept(pending, {})
        _, n = record_workloads(facts, queues=queues, positions=positions,
                                allocations=allocations, now=now, placements=placements,
                                gone=set())
        events += n
    return events


def _cluster_queue(name: str, resource: str, nominal: Decimal, cohort: str,
                   limit: int | None) -> dict:
    quota = {"name": resource, "nominalQuota": f"{nominal.normalize():f}"}
    if limit is not None:
        quota["borrowingLimit"] = str(limit)
    spec = {"resourceGroups": [{"coveredResources": [resource], "flavors": [
        {"name": "default", "resources": [quota]}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec,
            "status": {"conditions": [{"type": "Active", "status": "True"}]}}


def _uid(rng: random.Random) -> str:
    return f"{rng.getrandbits(32):08x}-demo-{rng.getrandbits(16):04x}"


def _scenario(alloc, nominal, resource, nodes, rng, now) -> list[_Job]:
    """The work of today: running and waiting jobs. In the shared cohort, one tenant
    borrows while the other waits for more than its own free quota: the case the queue page
    explains."""
    ago = lambda **kw: _s(now - dt.timedelta(**kw))  # noqa: E731
    if alloc.route == "shared_pool" and alloc.tenant.slug.startswith("globex"):
        running, waiting = [("batch-score", nominal + 2, ago(hours=1, minutes=10), None)], []
    elif alloc.route == "shared_pool":
        running = [("train-7", nominal / 2, ago(hours=2, minutes=48), 6 * 3600)]
        waiting = [("eval-3", nominal, ago(minutes=25))]
    else:
        running = [("train-7", nominal, ago(hours=2, minutes=48), 6 * 3600)]
        waiting = [("eval-3", max(Decimal(1), nominal / 2), ago(minutes=25))]
    jobs = []
    for name, devices, since, limit_s in running:
        job = _Job(alloc, _uid(rng), name, devices, resource, since - dt.timedelta(minutes=3),
                   max_seconds=limit_s)
        job.step()
        job.step(_placement(alloc, nodes, rng, since), admitted=since)
        jobs.append(job)
    for name, devices, since in waiting:
        job = _Job(alloc, _uid(rng), name, devices, resource, since)
        job.step()
        jobs.append(job)
    return jobs


def _history(alloc, rng, now, nominal, resource, nodes, borrows: bool
             ) -> tuple[list[_Job], list[QueueUsageHour]]:
    """Two weeks of jobs (waits growing on busy days, each running two hours), a reclaim by
    the cohort now and then, and borrowed hours when the queue may borrow."""
    jobs, hours = [], []
    for day in range(14, 0, -1):
        base = (now - dt.timedelta(days=day)).replace(hour=8, minute=0, second=0,
                                                      microsecond=0)
        busy = 1 + (day % 7 in (1, 2))  # two busy days a week
        for k in range(rng.randint(3, 7)):
            submitted = base + dt.timedelta(minutes=rng.randint(0, 9 * 60))
            wait = rng.expovariate(1 / (240 * busy)) + rng.randint(5, 40)
            admitted = _s(submitted + dt.timedelta(seconds=wait))
            devices = Decimal(rng.choice([1, 2, int(nominal) or 1]))
            job = _Job(alloc, _uid(rng), f"run-{day:02d}{k}", devices, resource, submitted)
            job.step()
            job.step(_placement(alloc, nodes, rng, admitted), admitted=admitted)
            again, stop, requeued = admitted, None, None
            if borrows and busy > 1 and k == 0:
                # Reclaimed by the cohort an hour in; requeued once its pods stopped,
                # admitted again once the cohort had room, and running again.
                stop = admitted + dt.timedelta(hours=1)
                requeued = stop + dt.timedelta(seconds=2)
                again = stop + dt.timedelta(minutes=rng.randint(4, 40))
                job.step(stop=stop, requeued=requeued)
                job.step(_placement(alloc, nodes, rng, again), admitted=again, stop=stop,
                         requeued=requeued)
            finished = again + dt.timedelta(hours=2)
            if finished < now:
                job.step(admitted=again, finished=finished, stop=stop, requeued=requeued)
            job.estimate = admitted + dt.timedelta(seconds=rng.gauss(0, 0.3 * wait + 60))
            jobs.append(job)
        if borrows:
            for h in range(10, 10 + rng.randint(1, 4)):
                hours.append(QueueUsageHour(
                    allocation=alloc, hour=base.replace(hour=h),
                    used_s=(nominal + 2) * 3600, borrowed_s=Decimal(2 * 3600)))
    return jobs, hours


def _past_estimates(jobs: list[_Job], rng: random.Random) -> None:
    """The first estimate each past job was given while it waited (the demo's, near its
    admission), so the page's track record of estimates has something to show."""
    rows = {r.uid: r for r in QueueWorkload.objects.filter(uid__in=[j.uid for j in jobs])}
    done = []
    for j in jobs:
        row = rows.get(j.uid)
        if row is not None and row.first_estimate_at is None:
            row.first_estimate_at, row.first_estimate_basis = j.estimate, "history"
            done.append(row)
    QueueWorkload.objects.bulk_update(done, ["first_estimate_at", "first_estimate_basis"])


def _node_names(alloc: Allocation) -> list[str]:
    """Where the demo's pods ran: the block's own nodes, else the pool's."""
    return sorted(alloc.nodes.values_list("name", flat=True)) or sorted(
        GpuNode.objects.filter(pool=alloc.pool).values_list("name", flat=True)) or ["node"]


def _placement(alloc: Allocation, nodes: list[str], rng: random.Random,
               admitted: dt.datetime) -> Placement:
    """The steps after admission as the sync reads them from the pods and claims: pods
    within a second or two, a MIG claim allocated, placed, running once the image is in."""
    pods = admitted + dt.timedelta(seconds=rng.uniform(0.3, 1.8))
    claimed = pods + dt.timedelta(seconds=rng.uniform(0.1, 0.6)) if alloc.mig_profile else None
    scheduled = (claimed or pods) + dt.timedelta(seconds=rng.uniform(0.05, 0.4))
    running = scheduled + dt.timedelta(seconds=rng.choice([2, 3, 4, 6, 25, 48]) *
                                       rng.uniform(0.8, 1.2))
    node = rng.choice(nodes)
    return Placement(pods_at=pods, scheduled_at=scheduled, node=node, claimed_at=claimed,
                     devices=(f"gpu.nvidia.com: gpu-{rng.randint(0, 7)}-mig-"
                              f"{alloc.mig_profile}-0 on {node}",) if claimed else (),
                     running_at=running)
