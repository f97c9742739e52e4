"""Every entry of the beat's schedule names a task a worker has: a misspelt or unregistered
name would be sent every period and never run, silently."""

import pytest
from django.conf import settings

pytestmark = pytest.mark.unit


def test_every_scheduled_task_is_registered():
    from portal.celery import app

    app.loader.import_default_modules()  # what a worker imports at start
    scheduled = {name: entry["task"] for name, entry in settings.CELERY_BEAT_SCHEDULE.items()}
    assert "intake.tasks.compact_request_tally" in scheduled.values()
    missing = {name: task for name, task in scheduled.items() if task not in app.tasks}
    assert missing == {}
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert float(entry["schedule"]) > 0, name
