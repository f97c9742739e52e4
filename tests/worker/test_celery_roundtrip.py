"""A real Celery worker process consumes from the real Redis and writes to PostgreSQL."""

import pytest

from tenants.models import WorkerHeartbeat
from tests.harness.procs import celery_worker
from tests.harness.waiting import eventually


@pytest.fixture
def worker(transactional_db, tmp_path):
    """A worker on the test database (pytest-django's test_ name) and the run's Redis."""
    proc = celery_worker(tmp_path / "worker.log")
    yield proc
    proc.stop()


def test_enqueued_task_runs_in_the_worker_and_writes_to_postgresql(worker):
    from portal.celery import app
    from portal.tasks import record_worker_heartbeat

    app.conf.task_always_eager = False
    try:
        record_worker_heartbeat.delay()
        eventually(WorkerHeartbeat.objects.exists, timeout=60, interval=0.3, retry_on=(),
                   what="the worker's heartbeat row", between=worker.raise_if_dead)
    finally:
        app.conf.task_always_eager = True
    beat = WorkerHeartbeat.objects.get()
    # Written by the worker process, not by this one: the worker logs the task it ran.
    assert "record_worker_heartbeat" in worker.log_path.read_text()
    assert beat.hostname
