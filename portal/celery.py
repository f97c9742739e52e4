"""The Celery app. Tasks are eager in the embedded default and on Redis in production."""

import logging
import os
import threading
import time

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# A worker pays for imports and API discovery once per process, before any task: the
# Kubernetes client library is loaded in the main process (its pool processes are forked from
# it), and each pool process discovers the API on a thread of its own (the pool kills a
# process whose start takes over 4 s; a task that needs the backend before discovery is done
# waits for its lock). Measured: the first provisioning task of each
# process took 1.6–1.9 s against 0.2 s for the next.
@worker_init.connect
def _load_before_fork(**_) -> None:
    # Libraries only: the models may not be loaded yet when this signal is sent.
    import kubernetes.client  # noqa: F401
    import kubernetes.dynamic  # noqa: F401


@worker_process_init.connect
def _discover_in_each_process(**_) -> None:
    threading.Thread(target=_discover, name="kube-warm", daemon=True).start()


def _discover() -> None:
    # Not at the top: this module is imported with the settings (portal/__init__), before
    # the app registry, and a web process never runs this.
    from fleet.allocations.manifests import OWNED_KINDS
    from fleet.inventory.connections import backend_of, live_clusters
    from fleet.kube import KubernetesBackend

    log = logging.getLogger("portal.celery")
    try:
        clusters = live_clusters()
    except Exception as exc:  # no database yet: the first task reports it properly
        log.warning("Kubernetes API discovery at worker start skipped: %s", exc)
        return
    for cluster in clusters:
        started = time.monotonic()
        try:
            backend = backend_of(cluster)
            if not isinstance(backend, KubernetesBackend):
                continue  # the dry-run record discovers nothing
            missing = backend.warm([("v1", "Node"), *OWNED_KINDS])
        except Exception as exc:  # the API server away: the first task reports it properly
            log.warning("Kubernetes API discovery of %s at worker start failed: %s",
                        cluster.slug, exc)
            continue
        log.info("Kubernetes API discovered at worker start in %.2f s (cluster %s)%s",
                 time.monotonic() - started, cluster.slug,
                 f" (not served: {', '.join(missing)})" if missing else "")
