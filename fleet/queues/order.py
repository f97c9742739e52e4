"""One order for a queue: where each waiting workload stands, pure.

The position shown, the order of the rows and "ahead of it" in a reason are all read from
`line_up`, so they cannot disagree. Its source, per ClusterQueue (one per allocation):

1. Kueue's visibility API (`positionInClusterQueue` of `pendingworkloads`), where it
   answered for the workload: Kueue's own snapshot of its queue.
2. Otherwise Kueue's ordering rule, computed here (`kueue_order`): higher priority first,
   then the earlier queue-order time, then the uid — as Kueue's `baseCompareFunc` without
   fair sharing. The queue-order time is the creation time, except for a workload still
   evicted by an admission check or by its pods-ready timeout, which Kueue orders by that
   eviction's time. A preempted workload keeps its creation time: it goes back to where it
   stood, not to the end.

Workloads Kueue answered for come first, in its order; the rest (not in Kueue's snapshot —
in a requeue back-off, past the answer's limit — or not asked yet) follow in the computed
order. Positions are the ranks in that line-up (0 is next), so they are contiguous even
while a stored answer is older than the set of waiting workloads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .truth import WorkloadFacts

VISIBILITY, COMPUTED = "visibility", "computed"
# Evictions after which Kueue orders a workload by the eviction's time, not its creation
# (`Ordering.GetQueueOrderTimestamp`; the pods-ready one under Kueue's default
# `requeuingStrategy.timestamp: Eviction`).
ORDERED_BY_EVICTION = ("AdmissionCheck", "PodsReadyTimeout")
_LAST = dt.datetime.max.replace(tzinfo=dt.UTC)


def queue_order_time(w: WorkloadFacts) -> dt.datetime:
    """The time Kueue orders a waiting workload by (after its priority)."""
    if w.stop and w.stop.at and w.stop.reason in ORDERED_BY_EVICTION:
        return w.stop.at
    return w.submitted_at or _LAST


def kueue_order(w: WorkloadFacts) -> tuple:
    """Kueue's order of waiting workloads: priority (higher first), queue-order time, uid."""
    return (-w.priority, queue_order_time(w), w.uid)


@dataclass(frozen=True)
class Placed:
    """One waiting workload in its queue's line-up."""

    facts: WorkloadFacts
    position: int  # 0 is next
    source: str  # visibility | computed


def line_up(waiting: Sequence[WorkloadFacts],
            answered: Mapping[str, int]) -> list[Placed]:
    """The waiting workloads of one ClusterQueue in the one order: those Kueue's visibility
    API placed (`answered`: uid → positionInClusterQueue) in its order, then the others in
    Kueue's computed order; each with its rank and where its place came from."""
    def key(w: WorkloadFacts) -> tuple:
        pos = answered.get(w.uid)
        return (0, pos, kueue_order(w)) if pos is not None else (1, 0, kueue_order(w))

    return [Placed(w, i, VISIBILITY if w.uid in answered else COMPUTED)
            for i, w in enumerate(sorted(waiting, key=key))]


def ahead_of(lined: Sequence[Placed], fits) -> dict[str, list[WorkloadFacts]]:
    """uid → the workloads before it in the line-up that hold it back: under Kueue's
    BestEffortFIFO one that can never fit (`fits` false) does not."""
    out: dict[str, list[WorkloadFacts]] = {}
    before: list[WorkloadFacts] = []
    for p in lined:
        out[p.facts.uid] = list(before)
        if fits(p.facts):
            before.append(p.facts)
    return out
