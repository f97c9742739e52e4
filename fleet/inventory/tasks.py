"""Background work of the inventory: following the fleet."""

from celery import shared_task

from .services import clusters_check
from .sync import fleet_sync_all


@shared_task(name="fleet.tasks.sync_fleet")
def sync_fleet() -> str:
    """Periodic fleet sync of every live cluster (beat). A cluster that does not answer is
    said so and read again next time; the others are synced meanwhile."""
    return " ".join(f"{cluster.slug}: {said}" for cluster, said in fleet_sync_all())


@shared_task(name="fleet.tasks.check_clusters")
def check_clusters() -> str:
    """Whether each cluster answers, its versions and MultiKueue's view (beat)."""
    return " ".join(f"{c.slug}: {c.health_message}" for c in clusters_check())
