"""Stranded capacity found from DCGM series in a real Prometheus (billing.stranded_reading →
billing.stranded → findings_record): an idle hold with a stalled run in it, an oversized
hold, a queue whose quota says no while another pool's devices idle, and a busy hold left
alone. The series are generated here; the findings' figures are checked against them."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.models import StrandedFinding
from billing.stranded_reading import detect
from billing.stranded_services import findings_record
from fleet.models import Allocation, ClusterQueueState, QueueWorkload, Route
from tests.harness.prometheus import PrometheusServer, write_openmetrics

pytestmark = pytest.mark.django_db

STEP = 60
BASE = floor_hour(timezone.now()) - dt.timedelta(hours=7)  # well before the head block
WINDOW_HOURS = 3
END = BASE + dt.timedelta(hours=WINDOW_HOURS)
SAMPLES = range(0, WINDOW_HOURS * 60 + 1)


def t(k: int) -> int:
    return int(BASE.timestamp()) + k * STEP


def gpu(ns: str, pod: str, i: int):
    return (("gpu", str(i)), ("UUID", f"GPU-{ns}-{i}"), ("namespace", ns), ("pod", pod))


# labels → (activity at sample k, memory MiB at sample k)
SERIES = {
    # acme-idle: eight devices a stalled training run holds, never above 1 %
    **{gpu("acme-idle", "train-x7k2q", i): (lambda k: 0.01, lambda k: 2000) for i in range(8)},
    # acme-big: eight devices, two of them busy (1.6 devices at once), 30 GB each at most
    **{gpu("acme-big", "serve-qwert", i): (lambda k: 0.8, lambda k: 30000) for i in range(2)},
    **{gpu("acme-big", "serve-qwert", i): (lambda k: 0.0, lambda k: 0) for i in range(2, 8)},
    # globex-full: four devices busy to the brim; work waits behind its quota
    **{gpu("globex-full", "fill-asdfg", i): (lambda k: 0.9, lambda k: 70000) for i in range(4)},
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus-stranded")
    server = PrometheusServer(work)
    for i, metric in enumerate(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")):
        path = work / f"{metric}.om"
        write_openmetrics(path, {lab: [(t(k), fns[i](k)) for k in SAMPLES]
                                 for lab, fns in SERIES.items()}, metric=metric)
        server.backfill(path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def world(tenant, other_tenant, pools, settings):
    settings.PORTAL_STRANDED_WINDOW_HOURS = WINDOW_HOURS
    shared = pools[Route.SHARED_POOL]
    since = BASE - dt.timedelta(days=1)

    def alloc(t, ns, devices):
        return Allocation.objects.create(
            tenant=t, pool=shared, route=Route.SHARED_POOL, whole_devices=devices,
            device_equivalents=Decimal(devices), namespace=ns, status="active",
            starts_at=since)

    idle, big = alloc(tenant, "acme-idle", 8), alloc(tenant, "acme-big", 8)
    full = alloc(other_tenant, "globex-full", 4)
    QueueWorkload.objects.create(
        allocation=idle, uid="u-train", namespace="acme-idle", name="job-train",
        job="train", devices=8, state=QueueWorkload.State.ADMITTED, running_at=since,
        admitted_at=since, observed_at=END)
    QueueWorkload.objects.create(
        allocation=full, uid="u-wait", namespace="globex-full", name="job-wait", job="wait",
        devices=2, state=QueueWorkload.State.PENDING,
        submitted_at=END - dt.timedelta(hours=1), observed_at=END)
    ClusterQueueState.objects.create(name="globex-full", allocation=full, cohort="",
                                     nominal=4, usage=4, pending=1, admitted=1,
                                     observed_at=END)
    return {"idle": idle, "big": big, "full": full}


def test_the_four_findings_from_real_series(prometheus, world):
    started = time.perf_counter()
    findings, judged = detect(END, base_url=prometheus.url)
    took = time.perf_counter() - started
    print(f"BENCHMARK stranded detection, 3 allocations × {WINDOW_HOURS} h of DCGM samples every "
          f"{STEP} s: "
          f"{took * 1000:.0f} ms")
    assert judged == {a.pk for a in world.values()}
    got = {(f.allocation_id, str(f.kind)): f for f in findings}
    idle, big, full = world["idle"].pk, world["big"].pk, world["full"].pk
    assert set(got) == {(idle, "idle_hold"), (idle, "stalled_run"), (big, "oversized"),
                        (full, "quota_blocked")}

    hold = got[(idle, "idle_hold")]
    assert hold.stranded_devices == 8 and hold.cost_per_day == Decimal("480.00")  # × 2.50
    assert hold.evidence["series"]["samples"] >= WINDOW_HOURS * 60 // 5 - 1  # 5-minute steps
    assert hold.evidence["series"]["peak_activity"] == pytest.approx(0.01)

    stalled = got[(idle, "stalled_run")]
    assert [r["workload"] for r in stalled.evidence["runs"]] == ["train"]

    over = got[(big, "oversized")]
    # 1.6 devices busy at once, 25 % headroom → 2 devices
    assert over.evidence["series"]["peak_busy_devices"] == "1.6000"
    assert over.evidence["series"]["peak_memory_gb"] == pytest.approx(31.46, abs=0.01)
    assert (over.proposal.whole_devices_after, over.stranded_devices) == (2, Decimal(6))

    quota = got[(full, "quota_blocked")]
    assert quota.stranded_devices == 2  # what the waiting work asks of the idle devices
    assert "dedicated" in quota.reason  # the same GPU model, free, no cohort lends it

    report = findings_record(findings=findings, judged=judged, now=END)
    assert report.found == 4
    again = findings_record(findings=detect(END, base_url=prometheus.url)[0], judged=judged,
                            now=END)
    assert (again.found, again.refreshed) == (0, 4)
    assert StrandedFinding.objects.filter(status="open").count() == 4


def test_prometheus_away_judges_nothing(world):
    from fleet.prometheus import PrometheusError

    with pytest.raises(PrometheusError):
        detect(END, base_url="http://127.0.0.1:9")
    assert not StrandedFinding.objects.exists()
