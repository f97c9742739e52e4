import datetime as dt

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from .idempotency import forget_old_keys
from .models import Notification

BUSY = "busy"


def deliver(notification_id: int) -> bool | str | None:
    """Send one stored notification under its row lock: two workers never send it twice,
    and a sent one is not sent again. True sent, False failed (error kept), BUSY another
    delivery holds its lock right now, None nothing to send.

    Only the notification's own row is locked (`of=("self",)`): locking the joined user row
    too made a second e-mail to the same person skip its own, unlocked row."""
    with transaction.atomic():
        n = (Notification.objects.select_for_update(skip_locked=True, of=("self",))
             .select_related("user").filter(pk=notification_id, sent_at__isnull=True).first())
        if n is None:
            unsent = Notification.objects.filter(pk=notification_id,
                                                 sent_at__isnull=True).exists()
            return BUSY if unsent else None
        live = _without_moot([n])
        return _send(live) if live else None


def _without_moot(rows: list[Notification]) -> list[Notification]:
    """The rows still worth sending; the moot ones say why they were not (once)."""
    live = []
    for n in rows:
        if not n.dropped:
            live.append(n)
        elif not n.last_error.startswith("Not sent"):
            n.last_error = (f"Not sent: moot since {n.moot_at:%Y-%m-%d %H:%M} UTC, before "
                            "it could be delivered.")
            n.save(update_fields=["last_error"])
    return live


def _send(rows: list[Notification]) -> bool:
    """One person's locked rows as one message (one row: as it is); every row marked sent,
    or every row keeps the transport's error for the retry."""
    subject, body = combined_mail([(n.subject, n.body) for n in rows])
    for n in rows:
        n.attempts += 1
    try:
        send_mail(f"[AI Factory] {subject}", body, settings.DEFAULT_FROM_EMAIL,
                  [rows[0].user.email])
    except Exception as exc:  # any transport error: keep it, the task retries
        for n in rows:
            n.last_error = f"{exc.__class__.__name__}: {exc}"[:2000]
        Notification.objects.bulk_update(rows, ["attempts", "last_error"])
        return False
    now = timezone.now()
    for n in rows:
        n.sent_at, n.last_error = now, ""
    Notification.objects.bulk_update(rows, ["attempts", "last_error", "sent_at"])
    return True


def _backoff(retries: int) -> int:
    """Seconds before a delivery that failed tries again."""
    return min(600, 10 * 2 ** retries)


SIGNATURE = "\n\n-- \n"  # where a notification's body ends and the portal's footer begins


def combined_mail(notes: list[tuple[str, str]]) -> tuple[str, str]:
    """One person's e-mails of a moment as one message: (subject, body). One stays as it
    is; several are counted in the subject and follow each other in the body, each under
    its own subject, with the footer once."""
    if len(notes) == 1:
        return notes[0]
    subject = f"{len(notes)} updates: " + "; ".join(s for s, _ in notes)
    if len(subject) > 180:
        subject = subject[:179] + "…"
    parts, footer = [], ""
    for title, body in notes:
        text, _, tail = body.rpartition(SIGNATURE) if SIGNATURE in body else (body, "", "")
        footer = footer or (SIGNATURE + tail if tail else "")
        parts.append(f"{title}\n{'-' * min(len(title), 72)}\n{text.strip()}")
    return subject, "\n\n\n".join(parts) + footer


def deliver_to(user_id: int) -> bool | None:
    """Send every unsent e-mail of one person as one message, under their rows' locks (rows
    another delivery holds are its to send). True sent, False failed (errors kept), None
    nothing to send."""
    with transaction.atomic():
        live = _without_moot(list(
            Notification.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("user").filter(user_id=user_id, sent_at__isnull=True)
            .order_by("created_at", "pk")))
        return _send(live) if live else None


@shared_task(name="tenants.tasks.send_batch", bind=True, max_retries=8, acks_late=True)
def send_batch(self, user_id: int) -> bool:
    """One person's e-mails of the last PORTAL_NOTIFICATION_BATCH_SECONDS, as one message;
    a mail server error is retried with back-off, and the sweep takes what outlives it."""
    if deliver_to(user_id) is False and not self.app.conf.task_always_eager:
        raise self.retry(args=[user_id], countdown=_backoff(self.request.retries))
    return True


@shared_task(name="tenants.tasks.send_notifications", bind=True, max_retries=8,
             acks_late=True)
def send_notifications(self, ids: list[int]) -> int:
    """Send queued e-mails. A mail server error is retried with back-off (the rows keep the
    error); a row another delivery holds is looked at again within seconds (if that delivery
    sent it, there is nothing left to do); the beat's sweep picks up whatever outlives the
    retries. Returns how many this call sent."""
    results = {pk: deliver(pk) for pk in ids}
    failed = [pk for pk, ok in results.items() if ok is False]
    busy = [pk for pk, ok in results.items() if ok == BUSY]
    if (failed or busy) and not settings.CELERY_TASK_ALWAYS_EAGER:  # eager: no broker
        countdown = _backoff(self.request.retries) if failed else \
            settings.PORTAL_NOTIFICATION_BUSY_RETRY_SECONDS
        raise self.retry(args=[failed + busy], countdown=countdown)
    return sum(1 for ok in results.values() if ok is True)


@shared_task(name="tenants.tasks.resend_unsent")
def resend_unsent() -> int:
    """Beat: anything still unsent after its retries (or queued while no worker ran)."""
    stale = timezone.now() - dt.timedelta(seconds=settings.PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS)
    ids = list(Notification.objects.filter(sent_at__isnull=True, created_at__lt=stale,
                                           attempts__lt=20)
               .exclude(moot_at__lte=timezone.now()).values_list("pk", flat=True)[:500])
    if ids:
        send_notifications.delay(ids)
    return len(ids)


@shared_task(name="tenants.tasks.forget_idempotency_keys")
def forget_idempotency_keys() -> int:
    return forget_old_keys(timezone.now())
