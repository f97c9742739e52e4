"""Benchmark, not a timed assertion: every page of every role and the main API lists, next to
a bare HttpResponse and the floor page (the base layout, signed in, no data), measured in the
same run on PostgreSQL.

Default size: 50 tenants, 2,000 requests, 6,000 audit rows, 90 days of hourly usage.
PORTAL_BENCH_FULL=1: 500 tenants, 20,000 requests, 60,000 audit rows, a year of hourly usage
(4.38 million rows). Rerun alone:
    make test ARGS="tests/db/test_page_benchmark.py -s"
Lines start with BENCHMARK.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import statistics
import time
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from billing.domain import month_start
from billing.models import UsageHour
from billing.services import refresh_months
from fleet.models import Allocation, GpuNode, Route
from intake.models import CapacityRequest
from tenants.models import AuditEvent, Tenant
from tests.factories import make_lead, make_pools

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.db.bench_urls")]

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
TENANTS = 500 if FULL else 50
REQUESTS = 20_000 if FULL else 2_000
AUDIT = 60_000 if FULL else 6_000
HOURS = (365 if FULL else 90) * 24
RUNS = 30 if FULL else 15
STATUSES = ["draft", "submitted", "denied", "changes_requested", "retired", "approved"]


def load_world(lead_user, admin_user):
    pools = make_pools()
    shared = pools[Route.SHARED_POOL]
    tenants = Tenant.objects.bulk_create([Tenant(slug=f"t{i:03d}", name=f"Tenant {i:03d}",
                                                 cost_centre=f"CC-{i}") for i in range(TENANTS)])
    make_lead(tenants[0], lead_user)
    end = dt.datetime.combine(month_start(timezone.now()), dt.time(), tzinfo=dt.UTC)
    start = end - dt.timedelta(hours=HOURS)
    allocs = Allocation.objects.bulk_create([Allocation(
        tenant=t, pool=shared, route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace=f"{t.slug}-r1", status="active",
        starts_at=start) for t in tenants])
    from django.contrib.auth import get_user_model

    requester = get_user_model().objects.get(username=lead_user)
    today = timezone.localdate()
    base = {"workload_kind": "training", "isolation_origin": "habitual",
            "device_fill": "full", "whole_devices": 4, "starts_on": today,
            "ends_on": today + dt.timedelta(days=30), "justification": "bench",
            "requester": requester}
    rows = [CapacityRequest(tenant=a.tenant, title=f"Active {a.namespace}", status="active",
                            route=Route.SHARED_POOL, pool=shared, allocation=a, **base)
            for a in allocs]
    rows += [CapacityRequest(tenant=tenants[i % TENANTS], title=f"Request {i}",
                             status=STATUSES[i % len(STATUSES)], route=Route.SHARED_POOL,
                             pool=shared, **base) for i in range(REQUESTS - len(rows))]
    reqs = CapacityRequest.objects.bulk_create(rows, batch_size=2000)
    AuditEvent.objects.bulk_create([AuditEvent(
        actor_name="bench", tenant_id=reqs[i % len(reqs)].tenant_id, subject_type="capacityrequest",
        subject_id=reqs[i % len(reqs)].pk, action="request.submitted", reason="Submitted.")
        for i in range(AUDIT)], batch_size=5000)
    GpuNode.objects.bulk_create([GpuNode(name=f"gpu-{i:04d}", gpu_count=8, validated=True,
                                         ready=True, state="schedulable", pool=shared)
                                 for i in range(min(TENANTS * 2, 1000))])
    buf = io.StringIO()
    for a in allocs:
        for h in range(HOURS):
            hour = start + dt.timedelta(hours=h)
            buf.write(f"{a.pk}\t{a.tenant_id}\t{shared.pk}\t{hour.isoformat()}\t14400\t"
                      f"{(h * 37 + a.pk) % 14400}\t0\t0\t14400\t2.5\t10\n")
    buf.seek(0)
    with connection.cursor() as cursor, cursor.connection.cursor().copy(
            f"COPY {UsageHour._meta.db_table} (allocation_id, tenant_id, pool_id, hour, "
            "allocated_s, used_s, credit_s, borrowed_s, charged_s, rate, amount) FROM STDIN"
    ) as copy:
        copy.write(buf.read())
    months, m = set(), month_start(start)
    while m < end.date():
        months.add(m)
        m = month_start(m + dt.timedelta(days=32))
    refresh_months({(a.pk, mo) for a in allocs for mo in months})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    submitted = CapacityRequest.objects.filter(status="submitted").order_by("pk").first()
    return {"tenant": tenants[0], "alloc_request": reqs[0], "submitted": submitted,
            "month": f"{max(months):%Y-%m}"}


def heavy_query_plans(world) -> dict[str, str]:
    """EXPLAIN ANALYZE of the queries behind the heaviest pages, as the pages run them."""
    from billing.selectors import last_months, overview_page
    from intake.selectors import ReviewQueueFilter, queued_requests

    months = last_months(12, timezone.localdate())
    page, _, _ = overview_page(None, months, sort="amount", page=1)
    plans = {"finance: tenants of one page, sorted and limited in SQL":
             page.object_list.explain(analyze=True)}
    newest = CapacityRequest.objects.select_related("tenant", "requester", "pool")
    plans["admin: all requests, newest first, one page"] = newest[:25].explain(analyze=True)
    plans["lead: one tenant's requests, newest first"] = newest.filter(
        tenant=world["tenant"])[:25].explain(analyze=True)
    queue = queued_requests(ReviewQueueFilter(status="submitted"), now=timezone.now())
    plans["admin: review queue, oldest first"] = queue[:25].explain(analyze=True)
    return plans


def measure(client, url: str) -> dict:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    executed = []

    def count(execute, sql, params, many, context):  # every statement, logged or not
        executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get(url)
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[int(0.95 * (len(times) - 1))],
            "queries": len(executed)}


def test_benchmark_every_page_against_the_floor(client, admin_user, finance_user, capsys,
                                                monkeypatch):
    # Render templates as production does: the test environment wraps every template render
    # to record it for assertions, which costs per template and would tilt the figures.
    from django.template import Template
    from django.test.utils import _TestState

    monkeypatch.setattr(Template, "_render", _TestState.saved_data.template_render)
    started = time.monotonic()
    world = load_world("bench-lead", admin_user)
    loaded = time.monotonic() - started
    t, req = world["tenant"], world["alloc_request"]
    from django.contrib.auth import get_user_model

    lead = get_user_model().objects.get(username="bench-lead")
    pages = [
        ("bare HttpResponse", None, "/bench/bare/"),
        ("floor: base layout, no data", lead, "/bench/floor/"),
        ("lead: overview", lead, "/"),
        ("lead: requests", lead, "/requests/"),
        ("lead: request", lead, f"/requests/{req.pk}/"),
        ("lead: new request form", lead, "/requests/new/"),
        ("lead: cost", lead, "/billing/"),
        ("lead: statement", lead, f"/billing/{t.slug}/{world['month']}/"),
        ("lead: API requests", lead, "/api/requests/"),
        ("admin: overview", admin_user, "/"),
        ("admin: review queue", admin_user, "/review/"),
        ("admin: review detail", admin_user, f"/review/{world['submitted'].pk}/"),
        ("admin: all requests", admin_user, "/requests/"),
        ("admin: fleet", admin_user, "/fleet/"),
        ("admin: pools", admin_user, "/pools/"),
        ("admin: API requests", admin_user, "/api/requests/"),
        ("admin: API allocations", admin_user, "/api/allocations/"),
        ("finance: overview 6 months", finance_user, "/billing/?months=6"),
        ("finance: overview 12 months", finance_user, "/billing/?months=12"),
        ("finance: budgets", finance_user, "/billing/budgets/"),
    ]
    results = {}
    current = None
    for label, user, url in pages:
        if user is not current:
            client.logout()
            if user is not None:
                client.force_login(user)
            current = user
        results[label] = measure(client, url)
    explains = heavy_query_plans(world)
    floor = results["floor: base layout, no data"]["p95"]
    bare = results["bare HttpResponse"]["p95"]
    assert results["finance: overview 12 months"]["queries"] < 40  # constant, not per tenant
    with capsys.disabled():
        print(f"\nBENCHMARK pages ({'full' if FULL else 'small'}: {TENANTS} tenants, "
              f"{CapacityRequest.objects.count()} requests, {AuditEvent.objects.count()} audit "
              f"rows, {UsageHour.objects.count()} usage hours; loaded in {loaded:.0f}s; "
              f"{RUNS} runs each)")
        print(f"BENCHMARK floor p95 = {floor / bare:.1f}x bare; goal 5x")
        for label, r in results.items():
            print(f"BENCHMARK {label:32s} p50 {r['p50']:7.1f} ms  p95 {r['p95']:7.1f} ms  "
                  f"{r['queries']:3d} queries  p95/floor {r['p95'] / floor:5.1f}")
        for label, plan in explains.items():
            print(f"BENCHMARK plan: {label}\n" + "\n".join(
                f"BENCHMARK plan:   {line}" for line in plan.splitlines()))
