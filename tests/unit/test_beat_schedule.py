"""Every entry of the beat's schedule names a task a worker has: a misspelt or unregistered
name would be sent every period and never run, silently."""

import pytest
from django.conf import settings

from fleet.allocations import tasks
from portal.celery import app

pytestmark = pytest.mark.unit


def test_every_scheduled_task_is_registered():
    app.loader.import_default_modules()  # what a worker imports at start
    scheduled = {name: entry["task"] for name, entry in settings.CELERY_BEAT_SCHEDULE.items()}
    assert "intake.tasks.compact_request_tally" in scheduled.values()
    missing = {name: task for name, task in scheduled.items() if task not in app.tasks}
    assert missing == {}
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert float(entry["schedule"]) > 0, name


def test_a_guarded_allocations_resume_goes_to_a_queue_every_worker_consumes(monkeypatch):
    """A worker started without -Q (compose, the chart, the tests) consumes every declared
    queue; a resume is sent to the resume queue, not behind the approvals queued before."""
    declared = set(app.amqp.queues)
    assert declared == {settings.CELERY_TASK_DEFAULT_QUEUE, settings.PROVISIONING_RESUME_QUEUE}
    sent = []

    class Pending:
        def as_task_kwargs(self):
            return {"wave": 2}

        def pause(self):
            return 0.05

    def provision(allocation_id, *, resume, defer):
        defer(Pending())
        return type("Done", (), {"status": "provisioning"})()

    monkeypatch.setattr(tasks, "allocation_provision", provision)
    monkeypatch.setattr(tasks.provision_allocation, "apply_async",
                        lambda *a, **kw: sent.append(kw))
    tasks.provision_allocation.push_request(is_eager=False, retries=0)
    try:
        assert tasks.provision_allocation.run(7) == "provisioning"
    finally:
        tasks.provision_allocation.pop_request()
    (kwargs,) = sent
    assert kwargs["queue"] == settings.PROVISIONING_RESUME_QUEUE
    assert kwargs["countdown"] == 0.05 and kwargs["retries"] == 0
