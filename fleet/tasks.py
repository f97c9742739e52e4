"""The fleet's Celery tasks, registered from each room (Celery finds them here; their names
stay `fleet.tasks.*`, so queued messages and the beat schedule keep working)."""

from .allocations.tasks import (  # noqa: F401 - registered with Celery by importing
    expire_allocations,
    follow_gitops,
    provision_allocation,
    reconcile_allocations,
    requeue_stalled,
)
from .inventory.tasks import check_clusters, sync_fleet  # noqa: F401
from .queues.tasks import measure_workload_utilisation, sync_queues  # noqa: F401
