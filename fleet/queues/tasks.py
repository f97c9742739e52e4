"""Background work of the queues room: reading Kueue back."""

from celery import shared_task

from ..kube import KubeError
from .sync import queue_sync_all
from .utilisation import measure_utilisation


@shared_task(name="fleet.tasks.sync_queues", autoretry_for=(KubeError,), retry_backoff=True,
             max_retries=2)
def sync_queues() -> str:
    """Read Kueue's Workloads and queues back (beat, every PORTAL_QUEUE_SYNC_SECONDS)."""
    return " ".join(f"{cluster.slug}: {said}" for cluster, said in queue_sync_all())


@shared_task(name="fleet.tasks.measure_workload_utilisation", ignore_result=True)
def measure_workload_utilisation() -> int:
    """Join DCGM's GPU activity and memory to the workloads that ran (beat, every
    PORTAL_UTILISATION_SECONDS)."""
    return measure_utilisation()
