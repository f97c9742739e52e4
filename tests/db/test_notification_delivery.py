"""Two deliveries at once on PostgreSQL: e-mails to the same person never wait on each other,
and one e-mail is never sent twice.

Before: the delivery locked its row with `select_related("user")`, so `FOR UPDATE` also
locked the user's row; a second delivery to the same person skipped its own, unlocked row and
left it to the five-minute sweep (e-mails waited for it under load)."""

from __future__ import annotations

import threading

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend
from django.db import connection

from tenants.models import Notification, NotificationKind
from tenants.tasks import BUSY, deliver

pytestmark = pytest.mark.django_db(transaction=True)

SENDING = threading.Event()
RELEASE = threading.Event()


class HeldBackend(EmailBackend):
    """Sends to the in-memory outbox, but the first message waits until the test lets it go:
    the delivery holds its row lock the whole time, as a slow mail server would make it."""

    def send_messages(self, messages):
        if "held" in messages[0].subject:
            SENDING.set()
            assert RELEASE.wait(20), "the test never released the held send"
        return super().send_messages(messages)


def _note(user, subject: str) -> Notification:
    return Notification.objects.create(user=user, kind=NotificationKind.REQUEST_DECIDED,
                                       subject=subject, body="…")


def test_a_second_email_to_the_same_person_is_not_held_up(settings, lead):
    settings.EMAIL_BACKEND = f"{__name__}.HeldBackend"
    SENDING.clear()
    RELEASE.clear()
    first, second = _note(lead, "held"), _note(lead, "second")
    outcome = {}

    def slow():
        try:
            outcome["first"] = deliver(first.pk)
        finally:
            connection.close()

    worker = threading.Thread(target=slow)
    worker.start()
    try:
        assert SENDING.wait(10), "the first delivery did not start"
        # The first delivery holds its row lock; the same person's other e-mail goes at once,
        assert deliver(second.pk) is True
        # and the held one is not sent twice: its lock says someone is on it.
        assert deliver(first.pk) == BUSY
    finally:
        RELEASE.set()
        worker.join(20)
    assert outcome["first"] is True
    assert deliver(first.pk) is None  # sent: nothing left to do
    subjects = sorted(m.subject for m in mail.outbox)
    assert subjects == ["[AI Factory] held", "[AI Factory] second"]
    assert Notification.objects.filter(sent_at__isnull=True).count() == 0
