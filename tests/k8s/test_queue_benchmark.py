"""Benchmark (printed, never a timed assertion): the portal following Kueue at scale.

Queues and Workloads are created in the real API server and the real Kueue admits what fits
(4 devices of quota per queue, 10 one-device workloads each: 4 admitted, 6 waiting). Then:
time to the first full view (one queue sync from nothing), a re-sync with nothing changed,
one tenant's queue page, and the lag from a Workload change to the portal showing it: by the
periodic list, and by the watch (p50/p95 over a series of changes).

Small by default (50 queues, 500 workloads); PORTAL_BENCH_FULL=1 runs the issue's size
(500 queues, 5,000 workloads):  make test ARGS="tests/k8s/test_queue_benchmark.py"
PORTAL_BENCH_PROFILE=1 prints where the first full view's time goes (cProfile).
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from fleet.kube import MANAGED_BY, MANAGER
from fleet.models import Allocation, QueueWorkload, Route
from fleet.queues.sync import queue_sync
from fleet.queues.watch import QueueFollower

from .conftest import eventually

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"
FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
QUEUES, PER_QUEUE, QUOTA = (500, 10, 4) if FULL else (50, 10, 4)
CHANGES = 60 if FULL else 20


def _workload(ns: str, i: int) -> dict:
    pod = {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "registry.example/bench:1",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}
    # A priority, as Kueue's Job integration sets one: Kueue v0.17.0's visibility server
    # panics on a pending Workload without spec.priority.
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": f"w{i:02d}", "namespace": ns},
            "spec": {"queueName": "gpu", "priority": 0, "podSets": [
                {"name": "main", "count": 1, "template": {"spec": pod}}]}}


def _phases(report) -> str:
    """Cumulative phase times → each phase's own share."""
    out, last = [], 0.0
    for name in ("list", "read", "store", "positions"):
        at = report.timings.get(name, last)
        out.append(f"{name} {at - last:.2f}s")
        last = at
    out.append(f"estimates {report.seconds - last:.2f}s")
    return ", ".join(out).replace("read", "parse and pods")


def _queue_objects(ns: str, cohort: str, flavor: str) -> list[dict]:
    labels = {MANAGED_BY: MANAGER}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": ns, "labels": labels},
         "spec": {"cohortName": cohort, "namespaceSelector": {},
                  "queueingStrategy": "BestEffortFIFO",
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                      "flavors": [{"name": flavor, "resources": [
                                          {"name": "cpu", "nominalQuota": str(QUOTA)},
                                          {"name": "memory", "nominalQuota": f"{QUOTA}Gi"},
                                          {"name": "nvidia.com/gpu", "nominalQuota": QUOTA,
                                           "borrowingLimit": 0}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": "gpu", "namespace": ns, "labels": labels},
         "spec": {"clusterQueue": ns}},
    ]


def test_benchmark_following_workloads_across_queues(kueue, admin_kube, portal_kube, tenant,
                                                     lead, pools):
    tag = uuid.uuid4().hex[:5]
    flavor = f"bench-{tag}"
    namespaces = [f"qb-{tag}-{i:03d}" for i in range(QUEUES)]
    admin_kube.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor",
                      "metadata": {"name": flavor}}, force=True)
    now = timezone.now()
    Allocation.objects.bulk_create([Allocation(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=QUOTA, device_equivalents=Decimal(QUOTA), namespace=ns, status="active",
        starts_at=now - dt.timedelta(days=1)) for ns in namespaces])
    started = time.monotonic()
    for ns in namespaces:
        for obj in _queue_objects(ns, f"bench-{tag}", flavor):
            admin_kube.apply(obj, force=True)
    for i in range(PER_QUEUE):  # round-robin, so every queue has work early
        for ns in namespaces:
            admin_kube.apply(_workload(ns, i), force=True)
    created = time.monotonic() - started
    total = QUEUES * PER_QUEUE
    want_admitted = QUEUES * QUOTA

    def kueue_done() -> int:
        held = sum(1 for w in admin_kube.list(KUEUE, "Workload")
                   if w["metadata"]["namespace"].startswith(f"qb-{tag}")
                   and (w.get("status") or {}).get("admission"))
        assert held == want_admitted, f"{held} of {want_admitted} admitted"
        return held

    eventually(kueue_done, timeout=600 if FULL else 120)
    settled = time.monotonic() - started - created

    if os.environ.get("PORTAL_BENCH_PROFILE") == "1":  # where the first full view goes
        import cProfile
        import pstats

        profile = cProfile.Profile()
        first = profile.runcall(queue_sync, portal_kube)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    else:
        first = queue_sync(portal_kube)
    second = queue_sync(portal_kube)
    alloc = Allocation.objects.get(namespace=namespaces[0])
    client = Client()
    client.force_login(lead)
    page = client.get(f"/api/allocations/{alloc.pk}/queue/").json()  # warm
    timings = []
    for _ in range(5):
        t0 = time.monotonic()
        client.get(f"/api/allocations/{alloc.pk}/queue/")
        timings.append((time.monotonic() - t0) * 1000)
    view_ms = sorted(timings)[2]

    # Lag: free a device in the first queue and count until the portal shows the next
    # workload admitted (the beat would run queue_sync every PORTAL_QUEUE_SYNC_SECONDS).
    running = [r["name"] for r in page["running"]]
    waiting = [p["name"] for p in page["pending"]]
    victim = QueueWorkload.objects.filter(allocation=alloc, state="admitted").order_by(
        "name").first()
    changed_at = time.monotonic()
    admin_kube.delete(KUEUE, "Workload", victim.name, alloc.namespace)
    syncs, seen_gone = [], None

    def synced_until_the_next_is_admitted() -> float | bool:
        nonlocal seen_gone
        report = queue_sync(portal_kube)
        syncs.append(report.seconds)
        if seen_gone is None and QueueWorkload.objects.get(pk=victim.pk).state == "gone":
            seen_gone = time.monotonic() - changed_at
        if QueueWorkload.objects.filter(allocation=alloc, state="admitted").count() == QUOTA \
                and seen_gone is not None:
            return time.monotonic() - changed_at
        return False

    seen_next = eventually(synced_until_the_next_is_admitted, timeout=120, retry_on=(),
                           what="the change shown (the victim gone, the next admitted)")

    # The watch (`manage.py watch_queues`, driven step by step here so its writes stay in
    # this test's transaction): the lag from an API change to the portal's row, per change.
    follower = QueueFollower(portal_kube, timeout_seconds=120)
    t0 = time.monotonic()
    follower.start()
    watch_start = time.monotonic() - t0
    lags, burst_s = [], []
    try:
        for i in range(CHANGES):
            ns = namespaces[(i // 2) % len(namespaces)]  # made in one change, deleted next
            name = f"lag{i:03d}"
            changed_at = time.monotonic()
            if i % 2 == 0:
                admin_kube.apply(_workload(ns, i) | {"metadata": {"name": name,
                                                                  "namespace": ns}},
                                 force=True)
                shown = lambda ns=ns, name=name: QueueWorkload.objects.filter(  # noqa: E731
                    namespace=ns, name=name).exclude(state="gone").exists()
            else:
                assert admin_kube.delete(KUEUE, "Workload", f"lag{i - 1:03d}", ns)
                shown = lambda ns=ns, i=i: QueueWorkload.objects.filter(  # noqa: E731
                    namespace=ns, name=f"lag{i - 1:03d}", state="gone").exists()
            eventually(shown, timeout=30, interval=0, retry_on=(), what=f"change {i} shown",
                       between=lambda: burst_s.extend(r.seconds
                                                      for r in follower.drain(wait=0.02)))
            lags.append(time.monotonic() - changed_at)
    finally:
        follower.close()
    lags.sort()
    lag_p50, lag_p95 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * .95))]

    print(f"\nBENCHMARK queue watch ({QUEUES} queues, {total} workloads): list and open "
          f"the watches {watch_start:.2f}s; API change → the portal's row, "
          f"{len(lags)} changes: p50 {lag_p50 * 1000:.0f} ms, p95 {lag_p95 * 1000:.0f} ms "
          f"(recording a burst {1000 * sorted(burst_s)[len(burst_s) // 2]:.0f} ms median, "
          f"{1000 * max(burst_s):.0f} ms at most); the periodic list alone: up to "
          f"PORTAL_QUEUE_SYNC_SECONDS + a sync of {max(syncs):.2f}s")
    print(f"\nBENCHMARK queue truth ({QUEUES} queues, {total} workloads"
          f"{'' if FULL else '; PORTAL_BENCH_FULL=1 for 500/5,000'}): created in "
          f"{created:.1f}s, Kueue settled in {settled:.1f}s; first full view (every "
          f"workload stored, positions in Kueue's order) {first.timings['store']:.2f}s, "
          f"with Kueue's visibility positions and first estimates {first.seconds:.2f}s "
          f"({_phases(first)}, "
          f"{first.changed} new), re-sync {second.seconds:.2f}s ({_phases(second)}, "
          f"{second.changed} changed); "
          f"one tenant's queue API {view_ms:.0f} ms (median of 5, warm); a deleted "
          f"Workload shown gone after {seen_gone:.2f}s, the next one admitted by Kueue "
          f"shown after {seen_next:.2f}s "
          f"({len(syncs)} syncs of {max(syncs):.2f}s at most; add up to "
          f"PORTAL_QUEUE_SYNC_SECONDS between beats); positions from {first.positions}")
    assert first.workloads == total and first.changed == total
    assert len(running) == QUOTA and len(waiting) == PER_QUEUE - QUOTA
    assert QueueWorkload.objects.filter(allocation=alloc, state="admitted").count() == QUOTA

    for ns in namespaces:  # leave nothing for Kueue to chew on in later tests
        admin_kube.delete(KUEUE, "ClusterQueue", ns)
        admin_kube.delete("v1", "Namespace", ns)
