"""Benchmark, not a timed assertion: every page of every role and the main API lists, next to
a bare HttpResponse and the floor page (the base layout, signed in, no data), measured in the
same run on PostgreSQL.

Default size: 50 tenants, 2,000 requests, 6,000 audit rows, 90 days of hourly usage.
PORTAL_BENCH_FULL=1: 500 tenants, 20,000 requests, 60,000 audit rows, a year of hourly usage
(4.38 million rows).
PORTAL_BENCH_SIZES=1,3,10: a sweep of multiples of the full size in one run (10x: 5,000
tenants, 200,000 requests, 600,000 audit rows, 12 million usage rows — 100 days each, so the
10x load stays within this machine's disk and an hour), printing each page per size and the
growth of its p95 from the first size to the last. Not in CI: it loads for many minutes.
Rerun alone:
    make test ARGS="tests/db/test_page_benchmark.py"
PORTAL_BENCH_PROFILE=1: also where the heaviest pages' time goes (tests/db/page_profile.py:
template, ORM compile, SQL, the rest of Python; and the project's heaviest functions).
Lines start with BENCHMARK.
"""

from __future__ import annotations

import datetime as dt
import gc
import io
import os
import statistics
import time
from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from billing.domain import month_start
from billing.models import UsageHour
from billing.services import refresh_months
from fleet.models import Allocation, GpuNode, Route
from intake.models import CapacityRequest
from intake.tally import compact_request_tally
from tenants.kept_reads import renew_every_mark
from tenants.models import AuditEvent, Tenant
from tests.db.page_profile import print_profiles
from tests.factories import make_lead, make_pools

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.db.bench_urls")]

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
SIZES = [float(x) for x in os.environ.get("PORTAL_BENCH_SIZES", "").split(",") if x.strip()]
RUNS = 30 if FULL or SIZES else 15
PROFILE = os.environ.get("PORTAL_BENCH_PROFILE") == "1"
# The heaviest pages, profiled with PORTAL_BENCH_PROFILE=1.
PROFILED = ["finance: overview 6 months", "finance: overview 12 months", "admin: fleet",
            "admin: review queue", "admin: review detail", "admin: overview", "lead: requests",
            "lead: overview", "lead: request", "lead: cost", "lead: new request form",
            "lead: statement", "finance: budgets", "admin: API requests",
            "admin: API allocations", "Prometheus scrape: /metrics"]


@dataclass(frozen=True)
class Size:
    label: str
    tenants: int
    requests: int
    audit: int
    hours: int  # of usage per tenant's allocation


def size_of(scale: float | None) -> Size:
    """None: the small default; else a multiple of the full size."""
    if scale is None:
        return Size("small", 50, 2_000, 6_000, 90 * 24)
    days = 365 if scale <= 3 else 100  # 10x: 12 M usage rows, not 44 M
    return Size(f"{scale:g}x full", int(500 * scale), int(20_000 * scale),
                int(60_000 * scale), days * 24)


STATUSES = ["draft", "submitted", "denied", "changes_requested", "retired", "approved"]


def load_world(lead_user, admin_user, size: Size):
    TENANTS, REQUESTS, AUDIT, HOURS = size.tenants, size.requests, size.audit, size.hours  # noqa: N806
    pools = make_pools()
    shared = pools[Route.SHARED_POOL]
    tenants = Tenant.objects.bulk_create([Tenant(slug=f"t{i:03d}", name=f"Tenant {i:03d}",
                                                 cost_centre=f"CC-{i}") for i in range(TENANTS)])
    make_lead(tenants[0], lead_user)
    # Up to this hour: the running month has usage, as on a live platform.
    end = timezone.now().astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
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
    # Streamed to COPY a hundred allocations at a time (10x is 12 M rows).
    with connection.cursor() as cursor, cursor.connection.cursor().copy(
            f"COPY {UsageHour._meta.db_table} (allocation_id, tenant_id, pool_id, hour, "
            "allocated_s, used_s, credit_s, borrowed_s, charged_s, rate, amount) FROM STDIN"
    ) as copy:
        for first in range(0, len(allocs), 100):
            buf = io.StringIO()
            for a in allocs[first:first + 100]:
                for h in range(HOURS):
                    hour = start + dt.timedelta(hours=h)
                    buf.write(f"{a.pk}\t{a.tenant_id}\t{shared.pk}\t{hour.isoformat()}\t"
                              f"14400\t{(h * 37 + a.pk) % 14400}\t0\t0\t14400\t2.5\t10\n")
            copy.write(buf.getvalue())
    months, m = set(), month_start(start)
    while m <= end.date():
        months.add(m)
        m = month_start(m + dt.timedelta(days=32))
    refresh_months({(a.pk, mo) for a in allocs for mo in months})
    # As the beat does every minute: the request tally's delta rows (one per request bulk
    # created) folded into one per tenant and status.
    compact_request_tally()
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
    plans = {"finance: tenants of one page, sorted, counted and limited in SQL": explain(
        lambda: overview_page(None, months, sort="amount", page=1), "COUNT(*) OVER")}
    newest = CapacityRequest.objects.select_related("tenant", "requester", "pool")
    plans["admin: all requests, newest first, one page"] = newest[:25].explain(analyze=True)
    plans["lead: one tenant's requests, newest first"] = newest.filter(
        tenant=world["tenant"])[:25].explain(analyze=True)
    queue = queued_requests(ReviewQueueFilter(status="submitted"), now=timezone.now())
    plans["admin: review queue, oldest first"] = queue[:25].explain(analyze=True)
    # The month totals of every tenant (billing.figures.month_totals): the kept totals'
    # sum (billing.totals), and /metrics' all-time sums (billing.figures.metric_sums).
    from billing.figures import metric_sums, month_totals

    plans["finance: month totals of every tenant, from the kept totals"] = explain(
        lambda: month_totals(months=months), "billing_tenantmonthtotal")
    plans["/metrics: every tenant and pool, from the all-time totals"] = explain(
        metric_sums, "billing_tenantpooltotal")
    return plans


def explain(run, marker: str) -> str:
    """EXPLAIN ANALYZE of the first statement `run` sends that contains `marker`."""
    statements = []

    def keep(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        run()
    sql, params = next((q, p) for q, p in statements if marker in q)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN ANALYZE " + sql, params)
        return "\n".join(r[0] for r in cursor.fetchall())


def measure(client, url: str, before=None) -> dict:
    return measure_together(client, [url], before)[url]


def measure_together(client, urls: list[str], before=None) -> dict[str, dict]:
    """Each URL's p50/p95 and queries, the URLs taken in turn run after run: a drift of the
    machine's speed during the measurement then weighs on all of them alike (the floor and
    its parts are fractions of a millisecond apart; measured one after the other, a drift
    of that size decided their differences)."""
    out, times = {}, {url: [] for url in urls}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        executed = []

        def count(execute, sql, params, many, context, executed=executed):  # every statement
            executed.append(sql)
            return execute(sql, params, many, context)

        if before:
            before()
        with connection.execute_wrapper(count):
            client.get(url)
        out[url] = {"queries": len(executed)}
    # The floor and its parts take a millisecond or two: many more runs, or noise decides.
    for _ in range(RUNS * 10 if urls[0].startswith("/bench/") else RUNS):
        for url in urls:
            if before:
                before()
            started = time.perf_counter()
            client.get(url)
            times[url].append((time.perf_counter() - started) * 1000)
    for url, taken in times.items():
        taken.sort()
        out[url].update(p50=statistics.median(taken), p95=taken[int(0.95 * (len(taken) - 1))])
    return out


PAGES = [  # (label, who, url); {tenant}, {request}, {month}, {submitted} from the world
    ("bare HttpResponse", "lead", "/bench/bare/"),
    ("floor part: session", "lead", "/bench/session/"),
    ("floor part: + user", "lead", "/bench/user/"),
    ("floor part: + roles", "lead", "/bench/roles/"),
    ("floor: base layout, no data", "lead", "/bench/floor/"),
    ("lead: overview", "lead", "/"),
    ("lead: requests", "lead", "/requests/"),
    ("lead: request", "lead", "/requests/{request}/"),
    ("lead: new request form", "lead", "/requests/new/"),
    ("lead: cost", "lead", "/billing/"),
    ("lead: statement", "lead", "/billing/{tenant}/{month}/"),
    ("lead: API requests", "lead", "/api/requests/"),
    ("admin: overview", "admin", "/"),
    ("admin: review queue", "admin", "/review/"),
    ("admin: review detail", "admin", "/review/{submitted}/"),
    ("admin: all requests", "admin", "/requests/"),
    ("admin: fleet", "admin", "/fleet/"),
    ("admin: pools", "admin", "/pools/"),
    ("admin: API requests", "admin", "/api/requests/"),
    ("admin: API allocations", "admin", "/api/allocations/"),
    ("finance: overview 6 months", "finance", "/billing/?months=6"),
    ("finance: overview 12 months", "finance", "/billing/?months=12"),
    ("finance: budgets", "finance", "/billing/budgets/"),
    ("Prometheus scrape: /metrics", "finance", "/metrics"),
]


# Pages whose reads are kept across requests, measured also with them retired before each run.
AFTER_A_WRITE = ("lead: overview", "admin: review detail", "finance: overview 12 months",
                 "Prometheus scrape: /metrics")


def measure_world(client, users: dict, world: dict) -> dict[str, dict]:
    names = {"tenant": world["tenant"].slug, "request": world["alloc_request"].pk,
             "month": world["month"], "submitted": world["submitted"].pk}
    # The bare response and the floor's parts together, signed in (the bare view reads no
    # session: signed in or not, it does the same work).
    floor = [(label, url) for label, _, url in PAGES if url.startswith("/bench/")]
    client.force_login(users["lead"])
    measured = measure_together(client, [url for _, url in floor])
    results = {label: measured[url] for label, url in floor}
    current = "lead"
    for label, who, url in PAGES:
        if url.startswith("/bench/"):
            continue
        if who != current:
            client.logout()
            if who is not None:
                client.force_login(users[who])
            current = who
        results[label] = measure(client, url.format(**names))
        if label in AFTER_A_WRITE:
            # What a page costs when what it keeps (tenants.kept_reads) was just retired:
            # as after a write to every table it reads.
            results[f"{label} (after a write)"] = measure(client, url.format(**names),
                                                          before=renew_every_mark)
    return results


def print_size(size: Size, results: dict, loaded: float, explains: dict) -> None:
    floor = results["floor: base layout, no data"]["p95"]
    bare = results["bare HttpResponse"]["p95"]
    print(f"\nBENCHMARK pages ({size.label}: {size.tenants} tenants, "
          f"{CapacityRequest.objects.count()} requests, {AuditEvent.objects.count()} audit "
          f"rows, {UsageHour.objects.count()} usage hours; loaded in {loaded:.0f}s; "
          f"{RUNS} runs each)")
    print(f"BENCHMARK floor p95 = {floor / bare:.1f}x bare; goal 5x")
    parts = ["bare HttpResponse", "floor part: session", "floor part: + user",
             "floor part: + roles", "floor: base layout, no data"]
    steps = [f"{b.split(': ')[-1]} +{results[b]['p50'] - results[a]['p50']:.2f} ms "
             f"({results[b]['queries'] - results[a]['queries']:+d} q)"
             for a, b in zip(parts, parts[1:], strict=False)]
    print("BENCHMARK floor in parts (p50 over the step before): " + "; ".join(steps))
    for label, r in results.items():
        print(f"BENCHMARK {label:32s} p50 {r['p50']:7.1f} ms  p95 {r['p95']:7.1f} ms  "
              f"{r['queries']:3d} queries  p95/floor {r['p95'] / floor:5.1f}")
    for label, plan in explains.items():
        print(f"BENCHMARK plan: {label}\n" + "\n".join(
            f"BENCHMARK plan:   {line}" for line in plan.splitlines()))


def test_benchmark_every_page_against_the_floor(client, admin_user, finance_user,
                                                monkeypatch):
    # Render templates as production does: the test environment wraps every template render
    # to record it for assertions, which costs per template and would tilt the figures.
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.template import Template
    from django.test.utils import _TestState

    monkeypatch.setattr(Template, "_render", _TestState.saved_data.template_render)
    sizes = [size_of(x) for x in SIZES] or [size_of(1 if FULL else None)]
    sweep = {}
    for size in sizes:
        # Each size in a savepoint, rolled back before the next: one run, one machine.
        point = transaction.savepoint()
        started = time.monotonic()
        world = load_world("bench-lead", admin_user, size)
        loaded = time.monotonic() - started
        users = {"lead": get_user_model().objects.get(username="bench-lead"),
                 "admin": admin_user, "finance": finance_user}
        # As portal/wsgi.py does in each web process: what is loaded is frozen out of the
        # collector (here also the test run's own heap, which no web process carries).
        gc.collect()
        gc.freeze()
        try:
            results = measure_world(client, users, world)
        finally:
            gc.unfreeze()
        explains = heavy_query_plans(world)
        # Constant, not per tenant: the overview's queries do not grow with the tenants.
        assert results["finance: overview 12 months"]["queries"] < 40
        print_size(size, results, loaded, explains)
        if PROFILE:
            names = {"tenant": world["tenant"].slug, "request": world["alloc_request"].pk,
                     "month": world["month"], "submitted": world["submitted"].pk}
            print_profiles(client, users, [(label, who, url.format(**names))
                                           for label, who, url in PAGES if label in PROFILED])
        sweep[size.label] = results
        transaction.savepoint_rollback(point)
        renew_every_mark()  # a rolled-back world moves no mark back
    if len(sizes) > 1:
        first, last = sizes[0].label, sizes[-1].label
        print(f"\nBENCHMARK growth of p95, {first} -> {last} (goal <= 1.5x):")
        for label in sweep[first]:
            a, b = sweep[first][label]["p95"], sweep[last][label]["p95"]
            row = "  ".join(f"{sweep[s.label][label]['p95']:7.1f}" for s in sizes)
            print(f"BENCHMARK growth {label:32s} {row} ms  x{b / a:4.2f}")
