"""Background work of the inventory: following the fleet."""

from celery import shared_task

from .sync import fleet_sync_all


@shared_task(name="fleet.tasks.sync_fleet")
def sync_fleet() -> str:
    """Periodic fleet sync of every live cluster (beat). A cluster that does not answer is
    said so and read again next time; the others are synced meanwhile."""
    return " ".join(f"{cluster.slug}: {said}" for cluster, said in fleet_sync_all())
