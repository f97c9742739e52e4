"""Follow GPU nodes as they change, from a watch that resumes where the last read ended.

The periodic fleet sync stays (it also reads ResourceSlices and catches anything missed); the
watch makes a change show in the portal within about a second and costs nothing while the
fleet is quiet. Run it as its own process: `manage.py watch_fleet`."""

from __future__ import annotations

import logging
import threading
import time

from ..kube import DryRunBackend, KubeBackend, KubeError
from .sync import GPU_NODES, fleet_sync, record_node_events

log = logging.getLogger(__name__)


def watch_fleet(backend: KubeBackend, *, stop: threading.Event | None = None,
                timeout_seconds: int = 300, on_change=None, cluster=None) -> None:
    """Full sync of one cluster (the home cluster unless named), then apply its node events
    from that read's resourceVersion on; back to a full sync when the server says the
    version is too old (410) or the connection fails."""
    if isinstance(backend, DryRunBackend):
        raise KubeError("The dry-run backend has no cluster to watch.", retriable=False)
    stop = stop or threading.Event()
    failures = 0
    while not stop.is_set():
        try:
            version = fleet_sync(cluster, backend=backend).resource_version
            failures = 0
            while not stop.is_set():
                version = _follow(backend, version, stop, timeout_seconds, on_change,
                                  cluster)
                if not version:
                    break  # expired: read everything again
        except KubeError as exc:
            failures += 1
            delay = min(60, 2 ** failures)
            log.warning("fleet watch: %s; again in %ss", exc.message, delay)
            stop.wait(delay)


def _follow(backend, version: str, stop: threading.Event, timeout_seconds: int,
            on_change, cluster) -> str:
    """One watch request; the version to resume from, or '' to start over."""
    for event in backend.watch_path("/api/v1/nodes", resource_version=version,
                                    label_selector=GPU_NODES,
                                    timeout_seconds=timeout_seconds):
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            log.info("fleet watch: %s; reading the fleet again", obj.get("message", obj))
            return ""
        version = (obj.get("metadata") or {}).get("resourceVersion", version)
        if kind == "BOOKMARK":
            continue
        started = time.monotonic()
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            report = record_node_events([], gone=[name], backend=backend, cluster=cluster)
        else:
            report = record_node_events([obj], backend=backend, cluster=cluster)
        if on_change is not None:
            on_change(kind, name, report, time.monotonic() - started)
        if stop.is_set():
            break
    return version
