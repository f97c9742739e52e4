"""Benchmark, not a timed assertion: the usage rollup of a day for every tenant's allocation
from a real Prometheus holding a day of DCGM series for them (backfilled with promtool), and
the rollup of a whole month (the same machinery over 720 hours; samples exist for the last
day only, the rest reads as idle).

Default: 50 tenants; PORTAL_BENCH_FULL=1: 500 tenants. Two GPUs per allocation, a sample a
minute. Rerun alone:
    make test ARGS="tests/metrics/test_rollup_benchmark.py"
"""

from __future__ import annotations

import datetime as dt
import os
import resource
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.models import UsageHour, UsageMonth
from billing.services import rollup_usage
from fleet.inventory.services import rate_card_create
from fleet.models import Allocation, Pool, Route
from tenants.models import Tenant
from tests.harness.prometheus import PrometheusServer, write_openmetrics

pytestmark = pytest.mark.django_db

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
TENANTS = 500 if FULL else 50
GPUS = 2
STEP = 60
DAY_END = floor_hour(timezone.now()) - dt.timedelta(hours=8)  # clear of the head block
DAY_START = DAY_END - dt.timedelta(hours=24)


class LazySeries(dict):
    """labels → samples, generated while the file is written (no million-item lists)."""

    def items(self) -> Iterator:
        start = int(DAY_START.timestamp())
        for t in range(TENANTS):
            for g in range(GPUS):
                labels = (("gpu", str(g)), ("UUID", f"GPU-{t}-{g}"),
                          ("namespace", f"b{t:03d}-r1"), ("pod", "train-0"))
                yield labels, ((start + k * STEP, ((k + t + g) % 10) / 10)
                               for k in range(1, 24 * 3600 // STEP + 1))


def test_benchmark_rollup_of_a_day_and_a_month(tmp_path):
    started = time.monotonic()
    write_openmetrics(tmp_path / "dcgm.om", LazySeries())
    written = time.monotonic() - started
    server = PrometheusServer(tmp_path)
    started = time.monotonic()
    server.backfill(tmp_path / "dcgm.om")
    backfilled = time.monotonic() - started
    server.start()
    try:
        pool = Pool.objects.create(slug="bench", name="Bench", route=Route.SHARED_POOL,
                                   gpu_model="H100", capacity_devices=100_000)
        rate_card_create(pool=pool, rate=Decimal("2.50"))
        tenants = Tenant.objects.bulk_create([Tenant(slug=f"b{i:03d}", name=f"B {i:03d}")
                                              for i in range(TENANTS)])
        month_start = DAY_END - dt.timedelta(days=30)
        Allocation.objects.bulk_create([Allocation(
            tenant=t, pool=pool, route=Route.SHARED_POOL, whole_devices=GPUS,
            device_equivalents=Decimal(GPUS), namespace=f"{t.slug}-r1", status="active",
            starts_at=month_start) for t in tenants])
        started = time.monotonic()
        day = rollup_usage(start=DAY_START, end=DAY_END, prometheus_url=server.url)
        day_s = time.monotonic() - started
        assert day.pending_hours == [] and day.rows == TENANTS * 24
        used = sum(UsageHour.objects.filter(hour__gte=DAY_START).values_list("used_s",
                                                                            flat=True))
        assert used > 0
        started = time.monotonic()
        month = rollup_usage(start=month_start, end=DAY_END, prometheus_url=server.url)
        month_s = time.monotonic() - started
        assert month.rows == TENANTS * 24 * 30
        assert UsageMonth.objects.count() >= TENANTS
    finally:
        server.stop()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nBENCHMARK rollup ({TENANTS} tenants × {GPUS} GPUs, a sample a minute: "
          f"{TENANTS * GPUS * 1440} samples; written {written:.1f}s, promtool backfill "
          f"{backfilled:.1f}s): a day {day_s:.1f}s ({day.rows} allocation-hours), a month "
          f"{month_s:.1f}s ({month.rows} allocation-hours); peak RSS of the test process "
          f"{peak_mib:.0f} MiB")
