"""Used device-hours from a real Prometheus with backfilled DCGM history.

The expected totals are computed here from the samples we generate, independently of the
portal's PromQL, and the rollup must match them to the device-second.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.models import ClusterUsageHour, UsageHour, UsageMonth
from billing.services import rollup_usage
from fleet.models import Allocation, GpuNode, NodeOutage, Route
from tests.harness.prometheus import PrometheusServer, write_openmetrics

pytestmark = pytest.mark.django_db

STEP = 30  # seconds between samples
BASE = floor_hour(timezone.now()) - dt.timedelta(hours=8)  # well before the head block
HOURS = 3

SERIES = {
    # (labels) → value at sample k (k = 1 … HOURS × 120)
    (("gpu", "0"), ("UUID", "GPU-a0"), ("namespace", "acme-r1"), ("pod", "train-0"),
     ("GPU_I_PROFILE", "")): lambda k: (k % 10) / 10,
    (("gpu", "1"), ("UUID", "GPU-a1"), ("namespace", "acme-r1"), ("pod", "train-0"),
     ("GPU_I_PROFILE", "")): lambda k: 0.5,
    (("gpu", "0"), ("UUID", "GPU-m0"), ("namespace", "globex-r2"), ("pod", "eval-0"),
     ("GPU_I_PROFILE", "1g.10gb"), ("GPU_I_ID", "7")): lambda k: 0.7,
    (("gpu", "0"), ("UUID", "GPU-m0"), ("namespace", "globex-r2"), ("pod", "eval-1"),
     ("GPU_I_PROFILE", "3g.40gb"), ("GPU_I_ID", "1")): lambda k: 0.25 if k % 2 else 0.75,
    (("gpu", "3"), ("UUID", "GPU-d3"), ("namespace", "acme-r3"), ("pod", "secure-0"),
     ("GPU_I_PROFILE", "")): lambda k: 1.0,
    # A dispatched allocation's pods on two MultiKueue workers, told apart by the cluster
    # label one Prometheus gives each worker's series.
    (("gpu", "0"), ("UUID", "GPU-w1"), ("namespace", "acme-r9"), ("pod", "spread-0"),
     ("GPU_I_PROFILE", ""), ("cluster", "w1")): lambda k: 0.8,
    (("gpu", "1"), ("UUID", "GPU-w1b"), ("namespace", "acme-r9"), ("pod", "spread-0"),
     ("GPU_I_PROFILE", ""), ("cluster", "w1")): lambda k: (k % 4) / 4,
    (("gpu", "0"), ("UUID", "GPU-w2"), ("namespace", "acme-r9"), ("pod", "spread-1"),
     ("GPU_I_PROFILE", ""), ("cluster", "w2")): lambda k: 0.4,
}
WEIGHT = {"": Decimal(1), "1g.10gb": Decimal(1) / 7, "3g.40gb": Decimal(3) / 7}


def expected_used(namespace: str, hour_index: int, cluster: str | None = None) -> Decimal:
    """Σ value × STEP × MIG weight over the samples inside (hour, hour + 1h]."""
    total = Decimal(0)
    per_hour = 3600 // STEP
    for labels, value in SERIES.items():
        d = dict(labels)
        if d["namespace"] != namespace or cluster not in (None, d.get("cluster")):
            continue
        for k in range(hour_index * per_hour + 1, (hour_index + 1) * per_hour + 1):
            total += Decimal(str(value(k))) * STEP * WEIGHT[d["GPU_I_PROFILE"]]
    return total


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus")
    samples = {}
    start = int(BASE.timestamp())
    for labels, value in SERIES.items():
        clean = tuple((k, v) for k, v in labels if v != "")
        samples[clean] = [(start + k * STEP, value(k)) for k in range(1, HOURS * 120 + 1)]
    write_openmetrics(work / "dcgm.om", samples)
    server = PrometheusServer(work)
    server.backfill(work / "dcgm.om")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def allocations(tenant, other_tenant, pools):
    acme = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=2,
        device_equivalents=Decimal(2), namespace="acme-r1", status="active",
        starts_at=BASE, ends_at=BASE + dt.timedelta(hours=2, minutes=30))
    globex = Allocation.objects.create(
        tenant=other_tenant, pool=pools[Route.MIG_VCLUSTER], route=Route.MIG_VCLUSTER,
        mig_profile="1g.10gb", mig_count=4, device_equivalents=Decimal("0.5714"),
        namespace="globex-r2", status="active", starts_at=BASE + dt.timedelta(minutes=10))
    dedicated = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.DEDICATED_BLOCK], route=Route.DEDICATED_BLOCK,
        whole_devices=8, device_equivalents=Decimal(8), namespace="acme-r3", status="active",
        starts_at=BASE)
    node = GpuNode.objects.create(name="ded-node", gpu_count=8, validated=True, ready=True,
                                  state="schedulable")
    dedicated.nodes.add(node)
    # Burn-in withdrew validation for 40 minutes in the second hour.
    NodeOutage.objects.create(node=node, started_at=BASE + dt.timedelta(hours=1, minutes=10),
                              ended_at=BASE + dt.timedelta(hours=1, minutes=50),
                              reason="HBM stress test failed")
    return acme, globex, dedicated


def rows(alloc):
    return list(UsageHour.objects.filter(allocation=alloc).order_by("hour"))


def test_rollup_matches_the_samples_to_the_device_second(prometheus, allocations):
    acme, globex, dedicated = allocations
    report = rollup_usage(start=BASE, end=BASE + dt.timedelta(hours=HOURS),
                          prometheus_url=prometheus.url)
    assert report.pending_hours == []
    for alloc in allocations:
        got = rows(alloc)
        assert len(got) == HOURS
        for i, row in enumerate(got):
            assert abs(row.used_s - expected_used(alloc.namespace, i)) < 1, (alloc, i)
    # Allocated: acme ends mid-hour, globex starts mid-hour, MIG counts as its share.
    assert [r.allocated_s for r in rows(acme)] == [7200, 7200, 3600]
    assert rows(globex)[0].allocated_s == Decimal("0.5714") * 50 * 60
    # The dedicated block's 40 unvalidated minutes on its 8-device node are credited.
    ded = rows(dedicated)
    assert [r.credit_s for r in ded] == [0, 8 * 40 * 60, 0]
    assert ded[1].charged_s == 8 * 3600 - 8 * 40 * 60
    # Monthly totals agree with the hours.
    month = UsageMonth.objects.get(allocation=dedicated)
    assert month.allocated_s == sum(r.allocated_s for r in ded)
    assert month.used_s == sum(r.used_s for r in ded)


def test_rerunning_a_window_changes_nothing(prometheus, allocations):
    window = {"start": BASE, "end": BASE + dt.timedelta(hours=HOURS),
              "prometheus_url": prometheus.url}
    rollup_usage(**window)
    before = [(r.allocation_id, r.hour, r.used_s, r.allocated_s, r.amount)
              for r in UsageHour.objects.order_by("allocation_id", "hour")]
    months = list(UsageMonth.objects.values_list("allocation_id", "used_s", "amount"))
    rollup_usage(**window)
    rollup_usage(start=BASE + dt.timedelta(hours=1), end=BASE + dt.timedelta(hours=2),
                 prometheus_url=prometheus.url)
    after = [(r.allocation_id, r.hour, r.used_s, r.allocated_s, r.amount)
             for r in UsageHour.objects.order_by("allocation_id", "hour")]
    assert after == before
    assert list(UsageMonth.objects.values_list("allocation_id", "used_s", "amount")) == months


def test_an_outage_leaves_hours_pending_and_a_later_run_fills_them(prometheus, allocations):
    acme = allocations[0]
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    report = rollup_usage(start=BASE, end=BASE + dt.timedelta(hours=HOURS), prometheus_url=dead)
    assert len(report.pending_hours) == HOURS
    assert all(r.used_s is None for r in rows(acme))  # pending, never silently zero
    assert UsageMonth.objects.get(allocation=acme).pending_hours == HOURS
    rollup_usage(start=BASE, end=BASE + dt.timedelta(hours=HOURS),
                 prometheus_url=prometheus.url)
    assert all(r.used_s is not None for r in rows(acme))
    assert abs(rows(acme)[0].used_s - expected_used("acme-r1", 0)) < 1
    assert UsageMonth.objects.get(allocation=acme).pending_hours == 0
    # And an outage after a good run keeps the measured values.
    rollup_usage(start=BASE, end=BASE + dt.timedelta(hours=HOURS), prometheus_url=dead)
    assert all(r.used_s is not None for r in rows(acme))


def test_borrowing_is_charged_from_admissions_not_from_dcgm(prometheus, allocations):
    """acme's pod keeps 1.5 devices busy on average (DCGM) within a quota of 2: no borrowing.
    What is charged above the quota is what Kueue admitted above it (fleet's queue-hours):
    here 3 devices held for 20 minutes in the second hour, 1 of them above quota."""
    from fleet.models import QueueUsageHour

    acme, globex, _ = allocations
    QueueUsageHour.objects.create(allocation=acme, hour=BASE + dt.timedelta(hours=1),
                                  used_s=Decimal(3 * 1200), borrowed_s=Decimal(1200))
    # A MIG queue's borrowing is measured and charged too (every route that may borrow pays
    # for what it borrowed: fleet.inventory.pricing.borrowing_is_billed), as device-shares.
    QueueUsageHour.objects.create(allocation=globex, hour=BASE + dt.timedelta(hours=1),
                                  used_s=Decimal(5 * 1200), borrowed_s=Decimal(1200))
    rollup_usage(start=BASE, end=BASE + dt.timedelta(hours=HOURS),
                 prometheus_url=prometheus.url)
    first, second, _ = rows(acme)
    assert first.used_s > 0 and first.borrowed_s == 0 and first.charged_s == 7200
    assert second.borrowed_s == 1200 and second.charged_s == 7200 + 1200
    assert second.amount == Decimal("5.8333")  # 8,400 device-seconds at 2.50 an hour
    assert UsageMonth.objects.get(allocation=acme).borrowed_s == 1200
    mig = rows(globex)[1]
    from fleet.domain import mig_share

    share = Decimal(1200) * mig_share(globex.mig_profile)  # a slice is its share of a device
    assert mig.borrowed_s.quantize(Decimal("0.01")) == share.quantize(Decimal("0.01"))
    assert mig.charged_s == mig.allocated_s - mig.credit_s + mig.borrowed_s


def test_a_dispatched_allocations_use_is_measured_per_cluster(prometheus, allocations, tenant,
                                                              pools, settings):
    """With PORTAL_PROMETHEUS_CLUSTER_LABEL set, a dispatched allocation's hour is split over
    its workers: the quota and the amount by its shares (3 : 1), the use as each worker's
    series measured it; the parts add up to the hour exactly. Without the label the hour's
    figures are the same and the use is not split."""
    spread = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace="acme-r9", status="active", starts_at=BASE,
        cluster_shares={"w1": 3, "w2": 1})
    window = {"start": BASE, "end": BASE + dt.timedelta(hours=HOURS),
              "prometheus_url": prometheus.url}
    rollup_usage(**window)
    unsplit = [(r.used_s, r.allocated_s, r.amount) for r in rows(spread)]
    assert {p.used_s for p in ClusterUsageHour.objects.filter(allocation=spread)} == {None}
    settings.PORTAL_PROMETHEUS_CLUSTER_LABEL = "cluster"
    rollup_usage(**window)
    assert [(r.used_s, r.allocated_s, r.amount) for r in rows(spread)] == unsplit
    for i, row in enumerate(rows(spread)):
        parts = {p.cluster: p for p in ClusterUsageHour.objects.filter(allocation=spread,
                                                                        hour=row.hour)}
        assert set(parts) == {"w1", "w2"}
        for cluster in ("w1", "w2"):
            assert abs(parts[cluster].used_s - expected_used("acme-r9", i, cluster)) < 1
        assert parts["w1"].allocated_s == 3 * 3600 and parts["w2"].allocated_s == 3600
        for column in ("allocated_s", "used_s", "amount"):
            assert sum(getattr(p, column) for p in parts.values()) == getattr(row, column)
    # Re-running the window replaces the parts, never adds them twice.
    rollup_usage(**window)
    assert ClusterUsageHour.objects.filter(allocation=spread).count() == 2 * HOURS
