"""Background work of the inventory: following the fleet."""

from celery import shared_task

from ..kube import KubeError
from .sync import fleet_sync


@shared_task(name="fleet.tasks.sync_fleet", autoretry_for=(KubeError,), retry_backoff=True,
             max_retries=5)
def sync_fleet() -> str:
    """Periodic fleet sync (beat) and the admin's "sync now" button."""
    return fleet_sync().summary()
