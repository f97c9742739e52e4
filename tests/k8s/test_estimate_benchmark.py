"""Benchmark (printed, never a timed assertion): how wrong the start estimates are, against
admissions the real Kueue made.

Two ClusterQueues of one device each. The deep one first drains a few workloads at a steady
pace (its admission rate is then measured), then gets a line of workloads at once and drains
it at the same pace: their first estimates have a line ahead (the *drain* basis). The shallow
one always has one runner and one waiting workload (no line: *history*, or the pace when the
history is short). A workload "finishes" when the test deletes it, every PACE seconds; the
queue sync runs after each change, as the watch would. Each first estimate is stored by the
sync, and scored when Kueue admits its workload; the figures per basis are printed, and the
queue API's track record must be exactly what this test computes from the same rows.

Small by default (a line of 12); PORTAL_BENCH_FULL=1 runs a line of 200:
make test ARGS="tests/k8s/test_estimate_benchmark.py"
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
from fleet.queues.estimates import track_record_by_basis
from fleet.queues.sync import queue_sync

from .conftest import eventually

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"
FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
LINE = 200 if FULL else 12  # the deep queue's line
WARM = 4  # admissions before the line arrives: the pace is measured from them
SHALLOW = 30 if FULL else 6  # one-at-a-time waits in the shallow queue
PACE = 1.0  # seconds between two "finishes"


def _queue(ns: str, flavor: str) -> list[dict]:
    labels = {MANAGED_BY: MANAGER}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": ns, "labels": labels},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO",
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                      "flavors": [{"name": flavor, "resources": [
                                          {"name": "cpu", "nominalQuota": "1"},
                                          {"name": "memory", "nominalQuota": "1Gi"},
                                          {"name": "nvidia.com/gpu", "nominalQuota": 1}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": "gpu", "namespace": ns, "labels": labels},
         "spec": {"clusterQueue": ns}},
    ]


def _workload(ns: str, name: str) -> dict:
    pod = {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "registry.example/bench:1",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": "gpu", "priority": 0, "podSets": [
                {"name": "main", "count": 1, "template": {"spec": pod}}]}}


def _admitted(kube, ns: str) -> list[str]:
    return [w["metadata"]["name"] for w in kube.list(KUEUE, "Workload", namespace=ns)
            if (w.get("status") or {}).get("admission")]


def _finish_one(admin_kube, portal_kube, ns: str, left: set[str]) -> None:
    """The running workload finishes (deleted); Kueue admits the next; the sync sees both."""
    (running,) = eventually(lambda: _one(_admitted(admin_kube, ns)), timeout=30)
    admin_kube.delete(KUEUE, "Workload", running, ns)
    left.discard(running)
    if left:
        eventually(lambda: _one([n for n in _admitted(admin_kube, ns) if n != running]),
                   timeout=30)
    queue_sync(portal_kube)


def _one(names: list[str]) -> list[str]:
    assert len(names) == 1, names
    return names


def _scored(alloc) -> list[tuple[str, float]]:
    return [(r.first_estimate_basis, abs((r.admitted_at - r.first_estimate_at).total_seconds()))
            for r in QueueWorkload.objects.filter(allocation=alloc, admitted_at__isnull=False,
                                                  first_estimate_at__isnull=False)]


def _figures(record: dict) -> str:
    return "; ".join(f"{basis}: {n} estimates, median error {m:.1f} s, p90 {p:.1f} s"
                     for basis, (n, m, p) in record.items()) or "none scored"


def test_benchmark_start_estimates_against_real_admissions(kueue, admin_kube, portal_kube,
                                                          tenant, lead, pools):
    tag = uuid.uuid4().hex[:5]
    flavor = f"est-{tag}"
    deep, shallow = f"eb-{tag}-deep", f"eb-{tag}-shallow"
    admin_kube.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor",
                      "metadata": {"name": flavor}}, force=True)
    now = timezone.now()
    allocs = {ns: Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=1, device_equivalents=Decimal(1), namespace=ns, status="active",
        starts_at=now - dt.timedelta(days=1)) for ns in (deep, shallow)}
    for ns in (deep, shallow):
        for obj in _queue(ns, flavor):
            admin_kube.apply(obj, force=True)
    try:
        started = time.monotonic()
        # The deep queue: a warm-up at the pace, then the line, drained at the same pace.
        left = set()
        for i in range(WARM + 1):
            admin_kube.apply(_workload(deep, f"warm{i:02d}"), force=True)
            left.add(f"warm{i:02d}")
        queue_sync(portal_kube)
        for _ in range(WARM):
            time.sleep(PACE)
            _finish_one(admin_kube, portal_kube, deep, left)
        for i in range(LINE):
            admin_kube.apply(_workload(deep, f"line{i:03d}"), force=True)
            left.add(f"line{i:03d}")
        eventually(lambda: _expect(QueueWorkload.objects.filter(
            allocation=allocs[deep], name__startswith="line").count(), LINE),
            timeout=60, between=lambda: queue_sync(portal_kube))
        while left:
            time.sleep(PACE)
            _finish_one(admin_kube, portal_kube, deep, left)
        # The shallow queue: one runner, one waiting, never a line.
        admin_kube.apply(_workload(shallow, "s000"), force=True)
        eventually(lambda: _one(_admitted(admin_kube, shallow)), timeout=30)
        waiting = {"s000"}
        for i in range(1, SHALLOW + 1):
            admin_kube.apply(_workload(shallow, f"s{i:03d}"), force=True)
            waiting.add(f"s{i:03d}")
            queue_sync(portal_kube)  # its first estimate, made while it waits
            time.sleep(PACE)
            _finish_one(admin_kube, portal_kube, shallow, waiting)
        elapsed = time.monotonic() - started
    finally:
        for ns in (deep, shallow):
            admin_kube.delete(KUEUE, "ClusterQueue", ns)
            admin_kube.delete("v1", "Namespace", ns)

    deep_record = track_record_by_basis(_scored(allocs[deep]))
    shallow_record = track_record_by_basis(_scored(allocs[shallow]))
    print(f"\nBENCHMARK start estimates against the real Kueue (one device per queue, a "
          f"finish every {PACE:.0f} s, {elapsed:.0f} s in all"
          f"{'' if FULL else '; PORTAL_BENCH_FULL=1 for a line of 200'}): deep queue, a line "
          f"of {LINE} after {WARM} admissions: {_figures(deep_record)}. Shallow queue, "
          f"{SHALLOW} one-at-a-time waits: {_figures(shallow_record)}.")
    # The line was estimated from its pace: every line workload but the head had one ahead.
    drained = deep_record.get("drain", (0, 0.0, 0.0))[0]
    assert drained >= LINE - 1, deep_record
    # What the queue API shows is what the rows say, computed the one way.
    client = Client()
    client.force_login(lead)
    for ns, record in ((deep, deep_record), (shallow, shallow_record)):
        shown = client.get(f"/api/allocations/{allocs[ns].pk}/queue/").json()[
            "estimates_track_record"]
        assert {b: (v["count"], v["median_error_seconds"], v["p90_error_seconds"])
                for b, v in shown["by_basis"].items()} == record, (shown, record)
        assert shown["count"] == sum(n for n, _m, _p in record.values())


def _expect(got, want):
    assert got == want, (got, want)
    return got
