"""A person's unsent e-mails go as one message, each row marked sent; moot ones are dropped,
other people's are left alone, and a mail server's error is kept on every row of the batch
for the retry (PostgreSQL, Django's in-memory outbox)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from tenants.models import Notification, NotificationKind
from tenants.notifications import notify
from tenants.tasks import deliver_to
from tests.factories import make_lead

pytestmark = pytest.mark.django_db


def _events(user, n: int) -> list[Notification]:
    return [row for i in range(n) for row in notify(
        [user], NotificationKind.PROVISIONING_DONE, f"acme-r{i} is ready", f"Ready {i}.",
        link=f"/requests/{i}/")]


def test_a_persons_mails_go_as_one_message(lead, tenant, settings):
    # (the test's transaction never commits: nothing is queued, the batch below sends)
    other = make_lead(tenant, "other")
    mine, theirs = _events(lead, 3), _events(other, 1)
    moot = Notification.objects.create(user=lead, kind=NotificationKind.ALLOCATION_EXPIRING,
                                       subject="acme-r9 expires soon", body="…",
                                       moot_at=timezone.now() - dt.timedelta(minutes=1))
    mail.outbox.clear()
    assert deliver_to(lead.pk) is True
    (message,) = mail.outbox
    assert message.to == [lead.email] and message.subject.startswith("[AI Factory] 3 updates")
    for i in range(3):
        assert f"acme-r{i} is ready" in message.body and f"/requests/{i}/" in message.body
    assert "expires soon" not in message.body
    assert all(n.sent_at for n in Notification.objects.filter(pk__in=[n.pk for n in mine]))
    moot.refresh_from_db()
    assert moot.sent_at is None and moot.last_error.startswith("Not sent: moot")
    assert Notification.objects.get(pk=theirs[0].pk).sent_at is None  # not theirs
    assert deliver_to(lead.pk) is None  # and nothing twice
    assert len(mail.outbox) == 1


def test_a_mail_server_error_is_kept_on_every_row_of_the_batch(lead, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    rows = _events(lead, 2)
    assert deliver_to(lead.pk) is False
    for n in Notification.objects.filter(pk__in=[n.pk for n in rows]):
        assert n.sent_at is None and n.attempts == 1 and n.last_error
