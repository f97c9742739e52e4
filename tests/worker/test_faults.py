"""Faults with the real services: the task queue away at approval, a worker lost in the
middle of provisioning, the database unreachable. Nothing approved is lost, nothing is
done twice, and people are told plainly what is going on."""

from __future__ import annotations

import datetime as dt
import os
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
from tests.harness.procs import ManagedProcess
from tests.harness.services import RedisServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def _worker(broker_url: str, log_path: Path) -> ManagedProcess:
    db = settings.DATABASES["default"]
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/"
           f"{db['NAME']}", "CELERY_TASK_ALWAYS_EAGER": "false",
           "CELERY_BROKER_URL": broker_url}
    return ManagedProcess(
        "celery-worker",
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo",
         "--concurrency=1", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
        log_path=log_path, env=env, cwd=ROOT).start()


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.raise_if_dead()
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"not reached in {timeout}s:\n{worker.log_path.read_text()[-3000:]}")


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
        time.sleep(1)  # let the duplicate run too
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
