"""Faults with the real services: the task queue away at approval, a worker lost in the
middle of provisioning, the database unreachable. Nothing approved is lost, nothing is
done twice, and people are told plainly what is going on."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from fleet.models import Allocation
from intake import services
from tenants.models import AuditEvent
from tests.factories import make_request
from tests.harness.procs import ManagedProcess, celery_worker
from tests.harness.services import RedisServer
from tests.harness.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def _worker(broker_url: str, log_path: Path) -> ManagedProcess:
    return celery_worker(log_path, CELERY_BROKER_URL=broker_url)


def _point_celery_at(url: str) -> None:
    from kombu import pools

    from portal.celery import app

    app.conf.broker_url = app.conf.broker_write_url = app.conf.broker_read_url = url
    app.conf.task_always_eager = False
    # Producer pools are built from broker_url on first use and cached: start afresh.
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


def _until(condition, timeout: float, worker: ManagedProcess):
    try:
        eventually(lambda: bool(condition()), timeout=timeout, interval=0.3, retry_on=(),
                   between=worker.raise_if_dead)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}:\n{worker.log_path.read_text()[-3000:]}") from None


@pytest.fixture
def own_redis(tmp_path):
    from portal.celery import app

    redis = RedisServer(tmp_path / "redis").start()
    before = app.conf.broker_url
    _point_celery_at(redis.url)
    yield redis
    redis.stop()
    _point_celery_at(before)
    app.conf.task_always_eager = True


def test_redis_down_at_approval_keeps_the_approval_and_provisions_when_it_is_back(
        own_redis, tmp_path, tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=4)
    port = own_redis.port
    own_redis.stop()  # the task queue is away
    req = services.request_approve(request=req, by=admin_user, reason="ok")  # no exception
    alloc = Allocation.objects.get(pk=req.allocation_id)
    assert req.status == "approved" and alloc.status == "pending"
    assert "waiting for the task queue" in alloc.status_message
    # The queue comes back on the same address; a worker runs; the stall check (beat, each
    # minute) finds the allocation that has waited longer than the stall time.
    own_redis.start(port=port)
    worker = _worker(own_redis.url, tmp_path / "worker.log")
    try:
        Allocation.objects.filter(pk=alloc.pk).update(
            created_at=timezone.now() - dt.timedelta(
                seconds=settings.PORTAL_PROVISION_STALL_SECONDS + 1))
        from fleet.tasks import requeue_stalled

        assert requeue_stalled() == "1 stalled allocation(s) queued again"
        _until(lambda: Allocation.objects.get(pk=alloc.pk).status == "active", 60, worker)
    finally:
        worker.stop()
    events = AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk)
    assert events.filter(action="allocation.requeued").count() == 1
    assert events.filter(to_state="active").count() == 1  # provisioned once
    # The "approved" e-mail queued while Redis was away is not lost: the sweep sends it.
    from tenants.models import Notification
    from tenants.tasks import resend_unsent

    waiting = Notification.objects.filter(user=lead, kind="request_decided")
    assert waiting.count() == 1 and waiting.get().sent_at is None
    waiting.update(created_at=timezone.now() - dt.timedelta(minutes=10))
    worker = _worker(own_redis.url, tmp_path / "worker2.log")
    try:
        assert resend_unsent() == 1
        _until(lambda: waiting.get().sent_at is not None, 60, worker)
    finally:
        worker.stop()


def test_a_worker_lost_mid_provision_is_finished_by_the_stall_check(
        own_redis, tmp_path, tenant, lead, admin_user, pools):
    """The state a killed worker leaves: provisioning, 3 of 14 objects applied, silent since.
    (acks_late would redeliver its message only after Redis's visibility timeout, an hour.)"""
    own_redis.stop()
    req = make_request(tenant, lead, submit=True, whole_devices=4)
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    silent_since = timezone.now() - dt.timedelta(
        seconds=settings.PORTAL_PROVISION_STALL_SECONDS + 60)
    Allocation.objects.filter(pk=req.allocation_id).update(
        status="provisioning", progress_done=3, progress_total=14, progress_at=silent_since)
    own_redis.start(port=own_redis.port)
    worker = _worker(own_redis.url, tmp_path / "worker.log")
    try:
        from fleet.tasks import requeue_stalled

        requeue_stalled()
        requeue_stalled()  # a second beat before the worker got to it: harmless
        _until(lambda: Allocation.objects.get(pk=req.allocation_id).status == "active", 60,
               worker)
        # Wait for the duplicate itself, not for a while: both runs must have finished.
        def both_ran() -> bool:
            return len(re.findall(r"fleet\.tasks\.provision_allocation\[[^\]]+\] succeeded",
                                  worker.log_path.read_text())) >= 2

        _until(both_ran, 60, worker)
    finally:
        worker.stop()
    alloc = Allocation.objects.get(pk=req.allocation_id)
    assert alloc.progress_done == alloc.progress_total > 3
    events = AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk)
    assert events.filter(to_state="active").count() == 1  # the duplicate changed nothing


def test_an_unreachable_database_is_a_503_that_says_so(lead, tenant, pools):
    """The real PostgreSQL connection pointed at a port where nothing listens, then back."""
    from django.test import Client

    client = Client(raise_request_exception=False)  # answer as a server would
    client.force_login(lead)
    real = dict(connection.settings_dict)
    from tests.harness.procs import free_port

    connection.close()
    connection.settings_dict["PORT"] = str(free_port())
    try:
        page = client.get("/requests/")
        api = client.get("/api/requests/")
    finally:
        connection.close()
        connection.settings_dict.update(real)
    assert page.status_code == 503 and page["Retry-After"] == "5"
    assert b"database is unavailable" in page.content
    assert api.status_code == 503 and "unavailable" in api.json()["message"]
    assert client.get("/requests/").status_code == 200  # and back


def test_a_frozen_database_answers_503_in_seconds(lead, tenant, pools):
    """PostgreSQL paused (SIGSTOP: it accepts TCP connections and never answers), as a
    hung server or a stalled disk would leave it. Before: every web worker hung as long as
    the pause lasted, /healthz included. Now connecting gives up after DB_CONNECT_TIMEOUT
    and the page is the plain 503; and statements carry the server-side timeout."""
    import signal

    from django.test import Client

    from tests.harness.services import PostgresServer, make_run_dir

    with connection.cursor() as cursor:  # what every statement of the portal runs under
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == f"{settings.DB_STATEMENT_TIMEOUT_MS // 1000}s"
    run_dir = make_run_dir()  # readable by the postgres user, unlike pytest's tmp_path
    frozen = PostgresServer(run_dir / "pg").start()
    client = Client(raise_request_exception=False)
    client.force_login(lead)
    real = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update({"HOST": "127.0.0.1", "PORT": str(frozen.port)})
    os.killpg(frozen.proc.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        page = client.get("/requests/")
        page_s = time.monotonic() - started
        started = time.monotonic()
        health = client.get("/healthz")
        health_s = time.monotonic() - started
    finally:
        os.killpg(frozen.proc.proc.pid, signal.SIGCONT)
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(real)
        frozen.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    timeout = settings.DATABASES["default"]["OPTIONS"]["connect_timeout"]
    print(f"\nBENCHMARK frozen-database page 503 after {page_s:.1f}s, /healthz 503 after "
          f"{health_s:.1f}s (connect timeout {timeout}s)")
    assert page.status_code == 503 and health.status_code == 503
    limit = timeout * 2 + 5
    assert page_s < limit and health_s < limit
    assert client.get("/requests/").status_code == 200  # and back on the real database


SETUP = """
from tests.factories import TenantFactory, make_lead, make_pools, session_cookie
make_pools()
print("SESSION", session_cookie(make_lead(TenantFactory(slug="burst", name="Burst"),
                                          "burst-lead")))
"""
CHECK = """
from intake.models import CapacityRequest
from tenants.models import AuditEvent
created = set(AuditEvent.objects.filter(action="request.created").values_list("subject_id",
                                                                               flat=True))
print("IDS", sorted(CapacityRequest.objects.values_list("id", flat=True)))
print("AUDITED", sorted(created))
"""


def test_postgresql_restarted_during_a_burst_of_filings(tmp_path):
    """gunicorn on a PostgreSQL of its own; eight clients file requests while the database
    goes down for a few seconds and comes back. While it is down: 503s that say so, never a
    500; after: filings succeed again; and every filing answered 201 is stored with its
    audit row, and nothing else is (no half-written request)."""
    import threading

    import requests

    from tests.factories import request_body
    from tests.harness.procs import free_port, wait_until
    from tests.harness.services import PostgresServer, make_run_dir

    run_dir = make_run_dir()  # readable by the postgres user, unlike pytest's tmp_path
    pg = PostgresServer(run_dir / "pg", durable=True).start()
    env = {**os.environ, "DATABASE_URL": pg.url, "CELERY_TASK_ALWAYS_EAGER": "true",
           "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1"}

    def manage(*argv: str) -> str:
        out = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    manage("migrate", "--noinput", "-v0")
    session = next(line.split()[1] for line in manage("shell", "-c", SETUP).splitlines()
                   if line.startswith("SESSION"))
    port = free_port()
    server = ManagedProcess(
        "gunicorn", [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind",
                     f"127.0.0.1:{port}", "--workers", "2", "--threads", "4"],
        log_path=tmp_path / "gunicorn.log", env=env, cwd=ROOT).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base), timeout=60, what="gunicorn")
        body = request_body("burst")
        results: list[tuple[int, object]] = []
        # A span, not a wait: the clients file for 14 s, before, during and after the outage.
        stop = time.monotonic() + 14
        lock = threading.Lock()

        def client():
            s = requests.Session()
            s.cookies.set("sessionid", session)
            s.cookies.set("csrftoken", "b" * 32)
            s.headers.update({"X-CSRFToken": "b" * 32})
            while time.monotonic() < stop:
                try:
                    r = s.post(f"{base}/api/requests/", json=body, timeout=30)
                    answer = (r.status_code, r.json().get("id") if r.status_code == 201
                              else r.text[:200])
                except requests.RequestException as exc:
                    answer = (0, str(exc))
                with lock:
                    results.append(answer)
                time.sleep(0.05)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()

        def filed() -> bool:
            with lock:
                return any(code == 201 for code, _ in results)

        # The burst is under way (a filing was answered) before the database goes away.
        eventually(filed, timeout=10, interval=0.05, retry_on=(), what="a first filing",
                   between=server.raise_if_dead)
        pg.stop()  # the outage
        # A span, not a wait: the database stays down for a few seconds on purpose (the
        # scenario above), while the clients keep filing against it.
        time.sleep(4)
        pg.start_again()
        for t in threads:
            t.join()
    finally:
        server.stop()
    statuses = [code for code, _ in results]
    answered = {value for code, value in results if code == 201}
    assert 500 not in statuses and 0 not in statuses, [r for r in results if r[0] in (0, 500)]
    assert statuses.count(503) > 0, "the outage was not noticed"
    unavailable = next(v for c, v in results if c == 503)
    assert "database is unavailable" in unavailable
    after_outage = statuses[max(i for i, c in enumerate(statuses) if c == 503) + 1:]
    assert 201 in after_outage, "filing did not recover after the restart"
    out = manage("shell", "-c", CHECK).splitlines()
    stored = eval(next(x for x in out if x.startswith("IDS")).split(" ", 1)[1])  # noqa: S307
    audited = eval(next(x for x in out if x.startswith("AUDITED")).split(" ", 1)[1])  # noqa: S307
    assert set(stored) == answered == set(audited)
    pg.stop()
    shutil.rmtree(run_dir, ignore_errors=True)


def _answers(base: str) -> bool:
    import requests

    try:
        return requests.get(f"{base}/healthz", timeout=2).status_code in (200, 503)
    except requests.RequestException:
        return False
