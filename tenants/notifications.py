"""E-mail notifications: who hears about what, and the one way they are sent.

`notify` is called inside the transaction of the event it reports; the e-mail leaves after
commit (a task that retries), so a rolled-back decision never mails and a mail outage never
undoes a decision."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from .models import (
    Membership,
    Notification,
    NotificationKind,
    NotificationOptOut,
    PlatformRole,
    Tenant,
)
from .tasks import SIGNATURE, send_batch, send_notifications

Kind = NotificationKind
log = logging.getLogger(__name__)


def tenant_leads(tenant: Tenant) -> list:
    return list(get_user_model().objects.filter(
        memberships__tenant=tenant, memberships__role=Membership.Role.LEAD, is_active=True))


def finance_people() -> list:
    return list(get_user_model().objects.filter(
        platform_roles__role=PlatformRole.Role.FINANCE, is_active=True).distinct())


def absolute_url(path: str) -> str:
    return settings.PORTAL_BASE_URL.rstrip("/") + path


def notify(users: Iterable, kind: str, subject: str, body: str, *, link: str = "",
           moot_at: dt.datetime | None = None) -> list:
    """Queue one e-mail per person who has an address and has not turned `kind` off. It is
    dropped unsent once moot: after `moot_at` (if given) or the longest delay allowed."""
    wanted = {u.pk: u for u in users if u is not None and u.pk and u.email and u.is_active}
    if not wanted:
        return []
    off = set(NotificationOptOut.objects.filter(user_id__in=wanted, kind=kind)
              .values_list("user_id", flat=True))
    text = body.strip() + (f"\n\n{absolute_url(link)}" if link else "") + (
        SIGNATURE + "AI Factory Portal. Choose what you hear about: "
        + absolute_url("/settings/notifications/"))
    latest = timezone.now() + dt.timedelta(seconds=settings.PORTAL_NOTIFICATION_MAX_DELAY_SECONDS)
    moot = min(latest, moot_at) if moot_at else latest
    rows = Notification.objects.bulk_create([
        Notification(user=u, kind=kind, subject=subject[:200], body=text, moot_at=moot)
        for pk, u in wanted.items() if pk not in off])
    if rows:
        transaction.on_commit(lambda: _queue(rows))
    return rows


def _queue(rows: list[Notification]) -> None:
    """Hand the e-mails to the task queue; if it is away, they wait as unsent rows and the
    sweep (tenants.tasks.resend_unsent) sends them once it is back. Never fail the event.

    With a worker, a person's e-mails of PORTAL_NOTIFICATION_BATCH_SECONDS go as one message
    (a hundred allocations approved together are one e-mail, and one task, not a hundred):
    the first event of a window queues that person's batch, the events until it runs join
    it. The mark that a batch is queued lives half the window, so an event the queued batch
    might no longer see queues its own; without a shared cache every event queues one (the
    later ones find nothing left to send)."""
    window = settings.PORTAL_NOTIFICATION_BATCH_SECONDS
    if window < 2 or send_batch.app.conf.task_always_eager:
        try:
            send_notifications.delay([n.pk for n in rows])
        except Exception as exc:  # kombu's OperationalError and kin: the broker is down
            log.warning("could not queue %d notification(s): %s", len(rows), exc)
        return
    for user_id in sorted({n.user_id for n in rows}):
        key, marked = f"notify-batch:{user_id}", False
        try:
            if settings.SHARED_CACHE:
                marked = cache.add(key, 1, timeout=window // 2)
                if not marked:
                    continue  # a batch is queued and will see this one
        except Exception as exc:  # the cache away: queue without the mark
            log.warning("no batch mark for user %s (%s); queued alone", user_id, exc)
        try:
            send_batch.apply_async((user_id,), countdown=window)
        except Exception as exc:  # the broker away: the sweep sends them once it is back
            log.warning("could not queue the e-mails of user %s: %s", user_id, exc)
            if marked:
                try:  # so that the next event tries again instead of trusting the mark
                    cache.delete(key)
                except Exception:  # noqa: S110 - the cache away too: the mark expires
                    pass


def set_preferences(user, enabled: set[str]) -> None:
    """The kinds this user hears about; the rest are turned off."""
    with transaction.atomic():
        NotificationOptOut.objects.filter(user=user).exclude(
            kind__in=set(Kind.values) - enabled).delete()
        NotificationOptOut.objects.bulk_create(
            [NotificationOptOut(user=user, kind=k) for k in Kind.values if k not in enabled],
            ignore_conflicts=True)


def enabled_kinds(user) -> set[str]:
    return set(Kind.values) - set(NotificationOptOut.objects.filter(user=user)
                                  .values_list("kind", flat=True))
