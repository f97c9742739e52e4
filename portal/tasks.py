"""Background work of the composition root: the worker heartbeat behind /healthz."""

import socket

from celery import shared_task
from django.utils import timezone

from tenants.models import WorkerHeartbeat


@shared_task(name="portal.tasks.record_worker_heartbeat")
def record_worker_heartbeat() -> int:
    """Record that a worker is alive; keep a day of rows so the table stays small."""
    beat = WorkerHeartbeat.objects.create(hostname=socket.gethostname())
    WorkerHeartbeat.objects.filter(at__lt=timezone.now() - timezone.timedelta(days=1)).delete()
    return beat.pk
