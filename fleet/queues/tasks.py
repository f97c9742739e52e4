"""Background work of the queues room: reading Kueue back."""

from celery import shared_task

from ..kube import KubeError


@shared_task(name="fleet.tasks.sync_queues", autoretry_for=(KubeError,), retry_backoff=True,
             max_retries=2)
def sync_queues() -> str:
    """Read Kueue's Workloads and queues back (beat, every PORTAL_QUEUE_SYNC_SECONDS)."""
    from .sync import queue_sync

    return queue_sync().summary()
