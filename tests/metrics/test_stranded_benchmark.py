"""Benchmark, not a timed assertion: a stranded-capacity pass over many allocations with 30
days of hourly DCGM series each, in a real Prometheus (backfilled with promtool): the four
range queries, the detectors, and recording what they found.

A third of the holds idle, a third busy on two of their devices (oversized), a third busy on
all of them; the findings must be exactly those. Default: 50 allocations over 3 days;
PORTAL_BENCH_FULL=1: 500 over 30 days. Eight GPUs per allocation, a sample an hour, the
window as long as the series. (promtool writes a block per two hours of backfill, which a
live Prometheus would have compacted: the pass reads hundreds of small blocks.) Rerun alone:
    make test ARGS="tests/metrics/test_stranded_benchmark.py"
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.models import StrandedFinding
from billing.stranded_reading import detect
from billing.stranded_services import findings_record
from fleet.inventory.services import rate_card_create
from fleet.models import Allocation, Pool, Route
from tenants.models import Tenant
from tests.harness.prometheus import PrometheusServer, write_openmetrics

pytestmark = pytest.mark.django_db

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
HOLDS, DAYS = (500, 30) if FULL else (50, 3)
GPUS, STEP = 8, 3600
END = floor_hour(timezone.now()) - dt.timedelta(hours=8)  # clear of the head block
START = END - dt.timedelta(days=DAYS)


def _kind(i: int) -> str:
    return ("idle", "oversized", "busy")[i % 3]


def _activity(i: int, g: int) -> float:
    kind = _kind(i)
    if kind == "idle":
        return 0.01
    if kind == "oversized":
        return 0.8 if g < 2 else 0.0
    return 0.9


class LazySeries(dict):
    """labels → samples, generated while the file is written."""

    def __init__(self, metric: str) -> None:
        super().__init__()
        self.metric = metric

    def items(self) -> Iterator:
        start = int(START.timestamp())
        for i in range(HOLDS):
            for g in range(GPUS):
                labels = (("gpu", str(g)), ("UUID", f"GPU-{i}-{g}"),
                          ("namespace", f"s{i:03d}-r1"), ("pod", "work-0"))
                value = _activity(i, g) if self.metric.endswith("ACTIVE") else \
                    (60000.0 if _activity(i, g) > 0.5 else 1000.0)
                yield labels, ((start + k * STEP, value) for k in range(DAYS * 24 + 1))


def test_benchmark_stranded_detection_over_a_month_of_hourly_series(tmp_path, settings):
    settings.PORTAL_STRANDED_WINDOW_HOURS = DAYS * 24
    settings.PORTAL_STRANDED_STEP_SECONDS = STEP
    server = PrometheusServer(tmp_path)
    started = time.monotonic()
    write_openmetrics(tmp_path / "dcgm.om", LazySeries("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
                      metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                      more={"DCGM_FI_DEV_FB_USED": LazySeries("DCGM_FI_DEV_FB_USED")})
    server.backfill(tmp_path / "dcgm.om")
    loaded = time.monotonic() - started
    written = server.blocks()
    server.start()
    compacted = 0.0
    try:
        if FULL:  # as a live Prometheus holds a month: in long blocks, not 360 short ones
            started = time.monotonic()
            # Compaction runs every minute: done once two runs left the blocks as they were.
            seen, steady_since = server.blocks(), time.monotonic()
            while time.monotonic() - steady_since < 130:
                assert time.monotonic() - started < 1500, "compaction did not settle"
                time.sleep(5)
                if server.blocks() != seen:
                    seen, steady_since = server.blocks(), time.monotonic()
            compacted = steady_since - started
        pool = Pool.objects.create(slug="bench", name="Bench", route=Route.SHARED_POOL,
                                   gpu_model="H100", capacity_devices=100_000)
        rate_card_create(pool=pool, rate=Decimal("2.50"))
        tenants = Tenant.objects.bulk_create([Tenant(slug=f"s{i:03d}", name=f"S {i:03d}")
                                              for i in range(HOLDS)])
        Allocation.objects.bulk_create([Allocation(
            tenant=t, pool=pool, route=Route.SHARED_POOL, whole_devices=GPUS,
            device_equivalents=Decimal(GPUS), namespace=f"{t.slug}-r1", status="active",
            starts_at=START - dt.timedelta(days=1)) for t in tenants])
        started = time.monotonic()
        findings, judged = detect(END, base_url=server.url)
        detected = time.monotonic() - started
        started = time.monotonic()
        report = findings_record(findings=findings, judged=judged, now=END)
        recorded = time.monotonic() - started
    finally:
        server_blocks = server.blocks()
        server.stop()
    kinds = sorted(str(f.kind) for f in findings)
    want = sorted(["idle_hold"] * len(range(0, HOLDS, 3)) + ["oversized"] * len(range(1, HOLDS, 3)))
    assert len(judged) == HOLDS and kinds == want
    assert report.found == len(want) == StrandedFinding.objects.filter(status="open").count()
    print(f"\nBENCHMARK stranded detection ({HOLDS} allocations × {GPUS} GPUs × {DAYS} days of "
          f"hourly DCGM samples, {HOLDS * GPUS * (DAYS * 24 + 1) * 2} samples; loaded "
          f"{loaded:.1f}s into {written} blocks"
          + (f", compacted by Prometheus to {server_blocks} in {compacted:.0f}s" if FULL else "")
          + f"): a pass {detected:.2f}s (the range queries and the detectors), "
          f"recording {len(findings)} new findings {recorded:.2f}s")
