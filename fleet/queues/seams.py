"""The ledger's seams as Prometheus histograms for /metrics: per tenant, queue, cluster and
seam, over the whole (append-only) ledger."""

from __future__ import annotations

from django.db.models import Count, Q, Sum

from tenants.compiled import compiled_once

from ..models import QueueEvent

# Bucket bounds (seconds) of the seam histograms on /metrics: steps after admission from
# 10 ms (the ledger's steps are timed to the millisecond where Kubernetes or the watch says
# so: fleet/queues/timing.py) up to queue waits of days (Kueue's own wait histograms stop
# near 2.8 h).
SEAM_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
                4 * 3600, 12 * 3600, 24 * 3600, 3 * 86400)


@compiled_once
def _seam_rows():
    buckets = {f"le{i}": Count("id", filter=Q(seam_seconds__lte=b))
               for i, b in enumerate(SEAM_BUCKETS)}
    return (QueueEvent.objects.filter(seam_seconds__isnull=False)
            .values("allocation__tenant__slug", "allocation__namespace", "local_queue", "kind",
                    "allocation__pool__cluster__slug")
            .annotate(n=Count("id"), total=Sum("seam_seconds"), **buckets)
            .order_by("allocation__tenant__slug", "allocation__namespace", "local_queue",
                      "kind"))


def seam_histograms() -> list[dict]:
    """Per tenant, queue (namespace/LocalQueue), the cluster it is queued in, and seam:
    cumulative bucket counts, count and
    sum over the whole ledger. The ledger is append-only, so these only grow, as a
    Prometheus histogram must. One aggregate query (compiled once: tenants.compiled)."""
    return [{"tenant": r["allocation__tenant__slug"],
             "cluster": r["allocation__pool__cluster__slug"],
             "queue": f"{r['allocation__namespace']}/{r['local_queue']}", "seam": r["kind"],
             "buckets": [(b, r[f"le{i}"]) for i, b in enumerate(SEAM_BUCKETS)],
             "count": r["n"], "sum": r["total"] or 0.0} for r in _seam_rows()]
