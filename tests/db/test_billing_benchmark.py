"""Benchmark, not a timed assertion: 500 tenants and a year of hourly rows.

Prints how long the finance overview and one statement take, and their query counts.
"""

from __future__ import annotations

import datetime as dt
import io
import time
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.domain import month_start
from billing.models import UsageHour
from billing.services import refresh_months
from fleet.models import Allocation, Pool, Route
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

TENANTS = 500
HOURS = 365 * 24


def test_benchmark_finance_pages_over_a_year_of_hours(client, finance_user, capsys):
    pool = Pool.objects.create(slug="bench", name="Bench", route=Route.SHARED_POOL,
                               gpu_model="H100", capacity_devices=100000)
    tenants = Tenant.objects.bulk_create([Tenant(slug=f"t{i:03d}", name=f"Tenant {i:03d}")
                                          for i in range(TENANTS)])
    end = dt.datetime.combine(month_start(dt.date.today()), dt.time(), tzinfo=dt.UTC)
    start = end - dt.timedelta(hours=HOURS)
    allocs = Allocation.objects.bulk_create([Allocation(
        tenant=t, pool=pool, route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace=f"{t.slug}-r1", status="active",
        starts_at=start) for t in tenants])

    started = time.monotonic()
    buf = io.StringIO()
    for a in allocs:
        for h in range(HOURS):
            hour = start + dt.timedelta(hours=h)
            used = (h * 37 + a.pk) % 14400
            buf.write(f"{a.pk}\t{a.tenant_id}\t{pool.pk}\t{hour.isoformat()}\t14400\t{used}\t0"
                      f"\t14400\t2.5\t10\n")
    buf.seek(0)
    table = UsageHour._meta.db_table
    with connection.cursor() as cursor, cursor.connection.cursor().copy(
            f"COPY {table} (allocation_id, tenant_id, pool_id, hour, allocated_s, used_s, "
            "credit_s, charged_s, rate, amount) FROM STDIN") as copy:
        copy.write(buf.read())
    loaded = time.monotonic() - started
    started = time.monotonic()
    months = set()
    m = month_start(start)
    while m < end.date():
        months.add(m)
        m = month_start(m + dt.timedelta(days=32))
    refresh_months({(a.pk, mo) for a in allocs for mo in months})
    rolled = time.monotonic() - started

    client.force_login(finance_user)
    with CaptureQueriesContext(connection) as overview_q:
        started = time.monotonic()
        response = client.get(reverse("billing:overview"), {"months": "12"})
        overview_s = time.monotonic() - started
    assert response.status_code == 200 and b"of 500" in response.content
    page10 = client.get(reverse("billing:overview"), {"months": "12", "sort": "name",
                                                      "page": "10"})
    assert b"Tenant 499" in page10.content
    month = f"{max(months):%Y-%m}"
    with CaptureQueriesContext(connection) as statement_q:
        started = time.monotonic()
        response = client.get(reverse("billing:statement", args=["t042", month]))
        statement_s = time.monotonic() - started
    assert response.status_code == 200 and b"t042-r1" in response.content
    with capsys.disabled():
        print(f"\nBENCHMARK billing: {UsageHour.objects.count()} hourly rows for {TENANTS} "
              f"tenants loaded in {loaded:.1f}s, monthly totals in {rolled:.1f}s; finance "
              f"overview (12 months) {overview_s * 1000:.0f} ms in {len(overview_q)} queries; "
              f"one statement {statement_s * 1000:.0f} ms in {len(statement_q)} queries")
