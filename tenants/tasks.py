"""Background work of the tenants app. Tasks take ids and are safe to run twice."""

import socket

from celery import shared_task
from django.utils import timezone

from .kube import KubeError
from .models import WorkerHeartbeat


@shared_task(name="tenants.tasks.record_worker_heartbeat")
def record_worker_heartbeat() -> int:
    """Record that a worker is alive; keep a day of rows so the table stays small."""
    beat = WorkerHeartbeat.objects.create(hostname=socket.gethostname())
    WorkerHeartbeat.objects.filter(at__lt=timezone.now() - timezone.timedelta(days=1)).delete()
    return beat.pk


@shared_task(name="tenants.tasks.sync_fleet", autoretry_for=(KubeError,), retry_backoff=True,
             max_retries=5)
def sync_fleet() -> str:
    """Periodic fleet sync (beat) and the admin's "sync now" button."""
    from .fleet import fleet_sync

    return fleet_sync().summary()
