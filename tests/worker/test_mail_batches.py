"""With a real worker and Redis, a person's e-mails of a few seconds go as one message: five
events in quick succession (each its own transaction, as five approvals are) are one e-mail,
sent by the worker (its console backend writes it to its log), every row marked sent."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import transaction

from portal.celery import app
from tenants.models import Notification, NotificationKind
from tenants.notifications import notify
from tests.harness.procs import celery_worker
from tests.harness.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)


def test_five_events_for_one_person_are_one_email(lead, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "PORTAL_NOTIFICATION_BATCH_SECONDS", 3)
    worker = celery_worker(tmp_path / "worker.log")
    app.conf.task_always_eager = False
    try:
        for i in range(5):
            with transaction.atomic():
                notify([lead], NotificationKind.PROVISIONING_DONE, f"acme-r{i} is ready",
                       f"Ready {i}.")
        eventually(lambda: not Notification.objects.filter(sent_at__isnull=True).exists(),
                   timeout=60, interval=0.3, retry_on=(), between=worker.raise_if_dead,
                   what="every e-mail sent")
    finally:
        app.conf.task_always_eager = True
        worker.stop()
    log = worker.log_path.read_text()
    assert log.count("Subject: [AI Factory]") == 1, log[-3000:]
    assert "Subject: [AI Factory] 5 updates: acme-r0 is ready" in log
    assert len(set(Notification.objects.values_list("sent_at", flat=True))) == 1
    # One task for the five (without a shared cache each would queue its own).
    received = [line for line in log.splitlines()
                if "Task tenants.tasks.send_batch[" in line and line.endswith("received")]
    assert len(received) == (1 if settings.SHARED_CACHE else 5), log[-3000:]
