"""The cohorts page and API for platform admins: every cohort (and every stand-alone queue, as
its own group) with each queue's tenant, quota, oldest wait and who holds it back."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from django.utils import timezone

from ..models import Allocation, ClusterQueueState, QueueWorkload
from .reading import queue_facts_of, row_facts
from .truth import PENDING, CohortRow, amount, cohort_board, duration


@dataclass
class CohortView:
    name: str
    rows: list[CohortRow]
    tenants: dict[str, str]  # queue → tenant slug (admins see who)
    resources: dict[str, str] = field(default_factory=dict)  # queue → its quota's unit


def followed_allocations():
    """The allocations whose queue the portal follows (a ClusterQueue read back)."""
    return Allocation.objects.filter(pk__in=ClusterQueueState.objects.filter(
        allocation__isnull=False).values("allocation_id"))


def cohort_views(*, now: dt.datetime | None = None) -> list[CohortView]:
    """Every cohort (and every stand-alone queue, as its own group) for platform admins."""
    now = now or timezone.now()
    states = list(ClusterQueueState.objects.filter(allocation__isnull=False)
                  .select_related("allocation__tenant"))
    pending = [row_facts(r) for r in QueueWorkload.objects.filter(
        state=PENDING, allocation__in=[s.allocation_id for s in states])]
    groups: dict[str, list[ClusterQueueState]] = defaultdict(list)
    for s in states:
        groups[s.cohort or ""].append(s)
    out = []
    for cohort in sorted(groups, key=lambda c: (c == "", c)):
        members = groups[cohort]
        names = {s.name for s in members}
        rows = cohort_board([queue_facts_of(s) for s in members],
                            [w for w in pending if w.cluster_queue in names], now)
        out.append(CohortView(cohort or "(stand-alone queues)", rows,
                              {s.name: s.allocation.tenant.slug for s in members},
                              {s.name: s.resource for s in members}))
    return out


def oldest_wait_text(seconds: float | None) -> str:
    return "—" if seconds is None else duration(seconds)


def cohort_lines(view: CohortView) -> list[dict]:
    """A cohort's rows as the cohorts page words them: each queue's tenant, its quota in its
    own unit (devices, or slices of one MIG profile: `amount`, as everywhere), the oldest
    wait, and the queues holding it back as "tenant (queue)"."""
    return [{"r": r, "tenant": view.tenants.get(r.queue, ""),
             "quota": amount(r.nominal, view.resources.get(r.queue, "")),
             "oldest": oldest_wait_text(r.oldest_wait_seconds),
             "blocked_by": [f"{view.tenants.get(b, '?')} ({b})" for b in r.blocked_by]}
            for r in view.rows]


def cohort_groups(*, now: dt.datetime | None = None) -> list[dict]:
    """Every cohort (cohort_views) with its rows worded (cohort_lines): the cohorts page."""
    return [{"name": g.name, "rows": cohort_lines(g)} for g in cohort_views(now=now)]
