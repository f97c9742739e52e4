"""The admins' view across clusters: every waiting workload of every cluster the portal
follows, where it is queued and why, and what each MultiKueue worker says of it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from ..models import Cluster, QueueWorkload
from .reading import row_facts
from .truth import DISPATCHING, explain_dispatching


@dataclass
class PendingAcross:
    """One waiting workload in the admins' view across clusters."""

    row: QueueWorkload
    cluster: str  # where it is queued (its allocation's cluster), in words
    why: str
    workers: list[tuple[str, str]]  # (worker in words, why it waits there)
    waited_seconds: float


def pending_across_clusters(*, now: dt.datetime | None = None, limit: int = 500
                            ) -> tuple[list[PendingAcross], list[tuple[str, int]]]:
    """Every waiting workload of every cluster, longest wait first (at most `limit`), and
    how many wait per cluster: the view Kueue itself does not give across clusters. A
    dispatched one says what each worker's copy says."""
    now = now or timezone.now()
    waiting = QueueWorkload.objects.filter(state=QueueWorkload.State.PENDING)
    per_cluster = list(waiting.values_list("allocation__pool__cluster__name")
                       .annotate(n=Count("pk")).order_by("-n"))
    workers = {c.multikueue_cluster: c.described for c in Cluster.objects.filter(
        role=Cluster.Role.WORKER)}
    rows = []
    for w in waiting.select_related("allocation__tenant", "allocation__pool__cluster") \
            .order_by("submitted_at", "pk")[:limit]:
        facts = row_facts(w)
        why = explain_dispatching(facts) if w.pending_reason == DISPATCHING else \
            (w.pending_detail or w.pending_reason or "Not read from Kueue yet.")
        rows.append(PendingAcross(
            row=w, cluster=w.allocation.pool.cluster.described, why=why,
            workers=[(workers.get(k, k), v) for k, v in sorted((w.worker_views or {}).items())],
            waited_seconds=max(0.0, (now - (w.submitted_at or now)).total_seconds())))
    return rows, per_cluster
