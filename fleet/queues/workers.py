"""Reading MultiKueue's workers for the manager's ledger: what each worker's copy of a
waiting dispatched workload says. A worker that does not answer is said so."""

from __future__ import annotations

from dataclasses import replace

from ..inventory.connections import backend_of
from ..kube import KubeError
from ..models import Cluster
from ..vocabulary import KUEUE
from .dispatched import worker_view_words
from .truth import DISPATCHING, WorkloadFacts, parse_workload

WORKLOADS_PATH = f"/apis/{KUEUE}/workloads"


def with_worker_views(facts: list[WorkloadFacts]) -> list[WorkloadFacts]:
    """Dispatched workloads still waiting, with what each worker's copy says (one list of
    Workloads per worker; a worker that does not answer is said so)."""
    waiting = [f for f in facts if f.pending_reason == DISPATCHING]
    if not waiting:
        return facts
    namespaces = {f.namespace for f in waiting}
    copies: dict[str, dict[tuple[str, str], WorkloadFacts] | None] = {}
    for worker in Cluster.objects.live().filter(role=Cluster.Role.WORKER).order_by("slug"):
        try:
            objs = backend_of(worker).list_path(WORKLOADS_PATH)
        except KubeError:
            copies[worker.multikueue_cluster] = None
            continue
        copies[worker.multikueue_cluster] = {
            (f.namespace, f.name): f for f in (parse_workload(o, cluster_queue_of={})
                                               for o in objs
                                               if (o.get("metadata") or {}).get("namespace")
                                               in namespaces)}
    out = []
    for f in facts:
        if f.pending_reason == DISPATCHING:
            views = tuple((name, "not answering" if found is None else
                           worker_view_words(found.get((f.namespace, f.name))))
                          for name, found in sorted(copies.items()))
            f = replace(f, worker_views=views)
        out.append(f)
    return out
