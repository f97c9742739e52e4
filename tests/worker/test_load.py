"""Load run (a benchmark: printed figures; only correctness fails it): gunicorn on the real
PostgreSQL, fifty team leads filing and submitting requests through the API while five
platform admins approve them, for a while. Any 5xx, or any pool promised past its capacity,
fails the test; throughput and latency are printed.

Small by default (20 s); PORTAL_BENCH_FULL=1 runs 3 minutes:
    make test ARGS="tests/worker/test_load.py"
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db.models import Sum

from fleet.inventory.selectors import pool_capacity
from fleet.models import Allocation, Pool
from tests.factories import (
    TenantFactory,
    make_lead,
    make_platform_user,
    request_body,
    session_cookie,
)
from tests.harness.procs import ManagedProcess, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)
FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
SECONDS = 180 if FULL else 20
LEADS, ADMINS = 50, 5
CSRF = "c" * 32


@pytest.fixture
def gunicorn(tmp_path):
    db = settings.DATABASES["default"]
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/"
           f"{db['NAME']}", "CELERY_TASK_ALWAYS_EAGER": "true", "DEBUG": "false",
           "ALLOWED_HOSTS": "127.0.0.1,localhost"}
    proc = ManagedProcess(
        "gunicorn",
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind",
         f"127.0.0.1:{port}", "--workers", "3", "--threads", "4", "--timeout", "60",
         "--access-logfile", "-"],
        log_path=tmp_path / "gunicorn.log", env=env, cwd=ROOT).start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        proc.raise_if_dead()
        try:
            return requests.get(f"{url}/healthz", timeout=5).status_code in (200, 503)
        except (requests.ConnectionError, requests.Timeout):
            return False  # workers still booting (a busy machine): ask again

    wait_until(up, timeout=60, what="gunicorn")
    yield url
    proc.stop()


def _session(user, base: str) -> requests.Session:
    s = requests.Session()
    s.cookies.set("sessionid", session_cookie(user))
    s.cookies.set("csrftoken", CSRF)
    s.headers.update({"X-CSRFToken": CSRF, "Referer": base})
    return s


def test_fifty_leads_and_five_admins(gunicorn, pools):
    # Tight pools (the shared pool's validated nodes hold 32 devices), so approvals compete
    # for the last devices and some must be refused.
    leads = []
    for i in range(LEADS):
        tenant = TenantFactory(slug=f"load-{i:02d}", name=f"Load {i}")
        leads.append((tenant, make_lead(tenant, f"load-lead-{i:02d}")))
    admins = [make_platform_user(f"load-admin-{i}", "platform_admin") for i in range(ADMINS)]
    latencies: dict[str, list[float]] = defaultdict(list)
    statuses: dict[int, int] = defaultdict(int)
    errors: list[str] = []
    lock = threading.Lock()
    # A span, not a wait: the load runs for SECONDS on purpose, whatever it achieves.
    stop_at = time.monotonic() + SECONDS

    def call(s: requests.Session, kind: str, method: str, path: str, **kw):
        t0 = time.monotonic()
        r = s.request(method, f"{gunicorn}{path}", timeout=60, **kw)
        with lock:
            latencies[kind].append(time.monotonic() - t0)
            statuses[r.status_code] += 1
            if r.status_code >= 500:
                errors.append(f"{method} {path} → {r.status_code}: {r.text[:300]}")
        return r

    def lead_loop(tenant, s: requests.Session, seed: int):
        rng = random.Random(seed)
        while time.monotonic() < stop_at:
            body = request_body(tenant.slug, whole_devices=rng.choice([1, 2, 4]))
            r = call(s, "file", "POST", "/api/requests/", json=body)
            if r.status_code == 201:
                call(s, "submit", "POST", f"/api/requests/{r.json()['id']}/submit/")
            call(s, "list", "GET", "/api/requests/?limit=20")

    def admin_loop(s: requests.Session, seed: int):
        rng = random.Random(seed)
        while time.monotonic() < stop_at:
            r = call(s, "queue", "GET", "/api/requests/?status=submitted&limit=20")
            if r.status_code != 200:
                continue
            for row in rng.sample(r.json()["results"], k=min(3, len(r.json()["results"]))):
                call(s, "approve", "POST", f"/api/requests/{row['id']}/approve/",
                     json={"reason": "load"})
            time.sleep(0.05)

    # Sessions are made here, on this thread's database connection: a Django connection
    # opened in each client thread would outlive it.
    threads = [threading.Thread(target=lead_loop, args=(t, _session(u, gunicorn), i))
               for i, (t, u) in enumerate(leads)]
    threads += [threading.Thread(target=admin_loop, args=(_session(u, gunicorn), 1000 + i))
                for i, u in enumerate(admins)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started

    # What is held against what the validated fleet can promise (not the configured ceiling).
    promised = {p.slug: (Allocation.objects.filter(pool=p, status__in=Allocation.HOLDING)
                         .aggregate(n=Sum("device_equivalents"))["n"] or Decimal(0),
                         pool_capacity(p).capacity_devices) for p in Pool.objects.all()}
    total = sum(len(v) for v in latencies.values())

    def pct(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else 0

    print(f"\nBENCHMARK load ({LEADS} leads, {ADMINS} admins, gunicorn 3×4, "
          f"{elapsed:.0f}s{'' if FULL else '; PORTAL_BENCH_FULL=1 for 3 min'}): "
          f"{total} requests, {total / elapsed:.1f}/s; statuses "
          f"{dict(sorted(statuses.items()))}")
    for kind, values in sorted(latencies.items()):
        print(f"  {kind:8s} n={len(values):5d} p50 {pct(values, .5):6.0f} ms  "
              f"p95 {pct(values, .95):6.0f} ms")
    print("  promised/capacity: " + ", ".join(
        f"{k} {v[0]:f}/{v[1]}" for k, v in promised.items()))
    assert not errors, "\n".join(errors[:10])
    for slug, (held, capacity) in promised.items():
        assert held <= capacity, f"{slug} promised {held} of {capacity}"
    assert statuses.get(201, 0) > 0 and latencies["approve"], "the load did not run"
