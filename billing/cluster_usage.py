"""A dispatched allocation's hours per cluster: written by the rollup beside its UsageHours
(the split is billing.clusters'), read by the statement and the invariants."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum

from fleet.allocations.desired import decided_shares
from fleet.inventory.pricing import money
from fleet.models import Cluster

from .clusters import cluster_parts, split_exactly
from .domain import month_bounds
from .figures import hours
from .models import ClusterUsageHour, UsageHour


def record_cluster_parts(start: dt.datetime, end: dt.datetime,
                         per_cluster: dict[dt.datetime, dict[str, dict[str, Decimal]]] | None
                         ) -> int:
    """The hours of dispatched allocations in [start, end) split over their clusters
    (billing.clusters), replacing what an earlier run wrote; an hour still pending on
    Prometheus keeps its parts."""
    hours = [h for h in UsageHour.objects.filter(hour__gte=start, hour__lt=end)
             .exclude(allocation__cluster_shares={}).select_related("allocation")
             # an hour Prometheus did not answer this time keeps the parts it had
             if h.used_s is not None and (per_cluster is None or h.hour in per_cluster)]
    rows = []
    for h in hours:
        shares = decided_shares(h.allocation)  # stored: rows without shares are excluded
        measured = None if per_cluster is None else \
            per_cluster[h.hour].get(h.allocation.namespace, {})
        rows += [ClusterUsageHour(allocation_id=h.allocation_id, hour=h.hour, cluster=p.cluster,
                                  allocated_s=p.allocated_s, used_s=p.used_s, amount=p.amount)
                 for p in cluster_parts(allocated_s=h.allocated_s, used_s=h.used_s,
                                        amount=h.amount, shares=shares, measured=measured)]
    with transaction.atomic():
        ClusterUsageHour.objects.filter(allocation_id__in={h.allocation_id for h in hours},
                                        hour__in={h.hour for h in hours}).delete()
        ClusterUsageHour.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


HOUR_PLACES, CENT = Decimal("0.0001"), Decimal("0.01")


@dataclass(frozen=True)
class WhereItRan:
    """One cluster's part of an allocation's month, in hours and money."""

    cluster: str  # the cluster in words (its name; the slug when it is no longer registered)
    allocated_h: Decimal
    used_h: Decimal | None
    amount: Decimal


def where_it_ran(allocation_ids, month: dt.date) -> dict[int, list[WhereItRan]]:
    """Per dispatched allocation of `allocation_ids`, its month per cluster (one query)."""
    start, end = month_bounds(month)
    rows = (ClusterUsageHour.objects.filter(allocation_id__in=list(allocation_ids),
                                            hour__gte=start, hour__lt=end)
            .values("allocation_id", "cluster")
            .annotate(allocated=Sum("allocated_s"), used=Sum("used_s"), amt=Sum("amount"))
            .order_by("allocation_id", "cluster"))
    names = dict(Cluster.objects.values_list("slug", "name"))
    by_alloc: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        by_alloc[r["allocation_id"]].append(r)
    out = {}
    for alloc_id, parts in by_alloc.items():
        # Each column split so the parts add up to the line's figure (the month's sum,
        # rounded once): hours to 4 places, money to the cent.
        def split(column, total_of, places, parts=parts):
            return split_exactly(total_of(sum((p[column] or Decimal(0) for p in parts),
                                              Decimal(0))),
                                 {p["cluster"]: p[column] or Decimal(0) for p in parts},
                                 places=places)
        allocated = split("allocated", hours, HOUR_PLACES)
        used = split("used", hours, HOUR_PLACES)
        cents = split("amt", money, CENT)
        out[alloc_id] = [WhereItRan(
            cluster=names.get(p["cluster"], p["cluster"] or "not labelled"),
            allocated_h=allocated.get(p["cluster"], Decimal(0)),
            used_h=None if p["used"] is None else used.get(p["cluster"], Decimal(0)),
            amount=cents.get(p["cluster"], Decimal("0.00"))) for p in parts]
    return out
