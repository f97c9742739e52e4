"""The workload ledger's decision: from the rows stored and the Workloads read, what to
create, what to update, what to mark gone and which events to record. Pure, over plain
values (snapshot → decision), as `diff_fleet` is for nodes; `queues.sync` reads the snapshot
and writes the result in one transaction.

The list and the watch are two readers of one ledger: each says what vanished its own way (a
list: followed rows it lacks that were last seen before it began; the watch: DELETED events)
and both hand it here. Rules that keep the two from undoing each other live here too: a row
only moves forward in resourceVersion, and a Workload seen deleted at the version read is not
brought back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from decimal import Decimal

from ..domain import devices_text
from ..vocabulary import LedgerEvent
from .dispatched import dispatch_words
from .placement import NOTHING, Placement, placement_events, step_reason
from .timing import NO_CLUE, Clue, Recorded, best_time, timed_steps
from .truth import (
    DEACTIVATED,
    FINISHED,
    GONE,
    HOLDING,
    PENDING,
    STOPPING,
    WorkloadFacts,
    explain_stop,
)

# The ledger columns a Workload's facts write, and those its steps after admission write.
APPLIED = ("devices", "state", "admitted_at", "finished_at", "requeued_at", "max_seconds",
           "pending_reason", "pending_detail", "stop_reason", "stop_preemption", "stopped_at",
           "stop_detail", "local_queue", "cluster_queue", "priority", "resource_version",
           "job", "ran_on", "nominated", "dispatch_state", "dispatch_message", "worker_views")
PLACED = ("pods_at", "scheduled_at", "node", "claimed_at", "devices_allocated", "running_at")
UPDATED = (*APPLIED, *PLACED, "position", "position_source", "observed_at")


@dataclass(frozen=True)
class StoredWorkload:
    """A ledger row as the decision sees it."""

    pk: int
    allocation_id: int
    facts: WorkloadFacts
    placement: Placement  # the steps recorded for the admission in `facts.admitted_at`
    position: int | None = None
    position_source: str = ""

    @property
    def gone(self) -> bool:
        return self.facts.state == GONE


@dataclass(frozen=True)
class LedgerChanges:
    create: list[dict] = field(default_factory=list)  # new rows, as column values
    update: list[tuple[int, dict]] = field(default_factory=list)  # (pk, UPDATED values)
    gone: list[int] = field(default_factory=list)  # pks of rows to mark gone
    events: list[dict] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # uids whose row changes


REQUEUED_WORDS = ("Requeued: its pods stopped and its devices were given back; it waits in "
                  "the queue again, in its place by priority and submission time.")


def requeue_time(old: WorkloadFacts | None, new: WorkloadFacts, now: dt.datetime
                 ) -> dt.datetime | None:
    """When a stopped workload went back in the queue, if this reading is the first to show
    it (None: not requeued now). Its quota released after the stop: `requeued_at` as
    parse_workload reads it; a readmission seen straight after "stopping" was requeued in
    between (at the Requeued time Kueue wrote, if that falls there)."""
    stop = new.stop if new.stop and new.stop.at else None
    if new.state == PENDING and stop:
        if old is None:
            return new.requeued_at
        if old.state in HOLDING:
            return new.requeued_at or now
        return None
    if old is not None and old.state == STOPPING and new.state in (*HOLDING, FINISHED) and \
            new.admitted_at and new.admitted_at != old.admitted_at:
        stopped = old.stop.at if old.stop and old.stop.at else old.admitted_at
        r = new.requeued_at
        return r if r and stopped and stopped <= r <= new.admitted_at else new.admitted_at
    return None


def transition_events(old: WorkloadFacts | None, new: WorkloadFacts, *, now: dt.datetime,
                      borrowed: Decimal) -> list[dict]:
    """The events that take a workload from what was stored (None: never seen) to what is
    read now: submitted, admitted, preempted or stopped (its pods stopping), requeued,
    admitted again, finished. Pure; times come from Kueue's conditions where it gives
    them."""
    events: list[dict] = []
    base = {"workload_uid": new.uid, "workload": new.display_name,
            "local_queue": new.local_queue, "priority": new.priority, "devices": new.devices}
    if old is None:
        events.append({**base, "kind": LedgerEvent.SUBMITTED,
                       "at": new.submitted_at or now, "reason": "Submitted to the queue."})
    new_stop = new.stop if new.stop and new.stop.at else None
    old_stop_at = old.stop.at if old and old.stop else None
    if new_stop and new_stop.at != old_stop_at and (old is None or old.state in HOLDING
                                                    or new_stop.at > (old.admitted_at or now)):
        kind = LedgerEvent.PREEMPTED if new_stop.reason == "Preempted" or \
            new_stop.preemption else LedgerEvent.EVICTED
        if old is not None or new.state in (PENDING, DEACTIVATED, STOPPING):
            events.append({**base, "kind": kind, "at": new_stop.at,
                           "reason": explain_stop(new_stop), "detail": new_stop.raw})
    requeued = requeue_time(old, new, now)
    if requeued is not None:
        events.append({**base, "kind": LedgerEvent.REQUEUED, "at": requeued,
                       "reason": REQUEUED_WORDS})
    # The same admission already recorded (a finished workload Kueue writes to again is
    # not admitted again).
    was_admitted = old is not None and old.state in (*HOLDING, FINISHED) and \
        old.admitted_at == new.admitted_at
    if new.state in (*HOLDING, FINISHED) and new.admitted_at and not was_admitted:
        # Waiting since its latest requeue as the pending row recorded it (Kueue's Requeued
        # time may be an earlier requeue's), else since it was submitted.
        back = old.requeued_at if old is not None and old.state == PENDING and \
            old.requeued_at else (requeued or new.requeued_at)
        since = back if back and back < new.admitted_at else new.submitted_at
        wait = (new.admitted_at - since).total_seconds() if since else None
        again = old is not None and (old.stop is not None or old.state == STOPPING)
        reason = "Admitted again" if again else "Admitted"
        reason += ": its devices were reserved and its pods released."
        if borrowed > 0:
            reason = (f"{'Admitted again' if again else 'Admitted'} while the queue borrows "
                      f"{devices_text(borrowed)} device(s) from the cohort beyond its quota.")
        events.append({**base, "kind": LedgerEvent.ADMITTED, "at": new.admitted_at,
                       "wait_seconds": max(0.0, wait) if wait is not None else None,
                       "seam_seconds": max(0.0, wait) if wait is not None else None,
                       "borrowed": borrowed, "reason": reason})
    if new.ran_on and (old is None or old.ran_on != new.ran_on):
        events.append({**base, "kind": LedgerEvent.DISPATCHED,
                       "at": new.dispatched_at or new.admitted_at or now,
                       "reason": dispatch_words(new), "detail": new.ran_on})
    if new.state == FINISHED and (old is None or old.state != FINISHED):
        events.append({**base, "kind": LedgerEvent.FINISHED,
                       "at": new.finished_at or now, "reason": "Finished; its devices were "
                       "given back to the queue."})
    return events


def older(version: str, than: str) -> bool:
    """Whether a Workload read at `version` is older than one stored at `than`. Kubernetes
    calls resourceVersions opaque, but every etcd-backed server gives integers that grow;
    anything else is never judged older (the newest reader then simply wins)."""
    return version.isdigit() and than.isdigit() and int(version) < int(than)


def stale(read: WorkloadFacts, stored: StoredWorkload | None) -> bool:
    """A reader older than what is stored (a list begun before the watch's last event) must
    not take a workload back, nor bring back one seen deleted at the version it read."""
    if stored is None:
        return False
    version = stored.facts.resource_version
    return older(read.resource_version, version) or (
        stored.gone and read.resource_version == version)


def fact_values(f: WorkloadFacts) -> dict:
    """The APPLIED columns of a Workload's facts (texts cut to their columns)."""
    stop = f.stop
    return {"devices": f.devices, "state": f.state, "admitted_at": f.admitted_at,
            "finished_at": f.finished_at, "requeued_at": f.requeued_at,
            "max_seconds": f.max_seconds if f.max_seconds and f.max_seconds > 0 else None,
            "pending_reason": f.pending_reason[:80], "pending_detail": f.pending_raw,
            "stop_reason": stop.reason[:80] if stop else "",
            "stop_preemption": stop.preemption[:80] if stop else "",
            "stopped_at": stop.at if stop else None, "stop_detail": stop.raw if stop else "",
            "local_queue": f.local_queue, "cluster_queue": f.cluster_queue,
            "priority": f.priority, "resource_version": f.resource_version, "job": f.job,
            "ran_on": f.ran_on[:63], "nominated": list(f.nominated),
            "dispatch_state": f.dispatch_state[:12], "dispatch_message": f.dispatch_message,
            "worker_views": dict(f.worker_views)}


def placement_values(p: Placement) -> dict:
    return {"pods_at": p.pods_at, "scheduled_at": p.scheduled_at, "node": p.node[:253],
            "claimed_at": p.claimed_at, "devices_allocated": "\n".join(p.devices),
            "running_at": p.running_at}


def _kept_steps(stored: Placement, read: Placement) -> Placement:
    """A step once recorded for this admission stays (its pods may be gone by now)."""
    return Placement(*(getattr(read, k.name) or getattr(stored, k.name)
                       for k in fields(Placement)))


AFTER_ADMISSION = (LedgerEvent.PODS, LedgerEvent.CLAIMED, LedgerEvent.SCHEDULED,
                   LedgerEvent.RUNNING)


def _stamps(f: WorkloadFacts, placed: Placement, events: list[dict], now: dt.datetime
            ) -> dict[str, dt.datetime | None]:
    """Each step's stamp in the workload's current run (what its successors follow)."""
    stop = f.stop.at if f.stop else None
    stamps = {LedgerEvent.SUBMITTED: f.submitted_at, LedgerEvent.ADMITTED: f.admitted_at,
              LedgerEvent.PREEMPTED: stop, LedgerEvent.EVICTED: stop,
              LedgerEvent.REQUEUED: f.requeued_at, LedgerEvent.PODS: placed.pods_at,
              LedgerEvent.CLAIMED: placed.claimed_at,
              LedgerEvent.SCHEDULED: placed.scheduled_at,
              LedgerEvent.RUNNING: placed.running_at}
    stamps.update({e["kind"]: e["at"] for e in events if e["at"] is not now})
    return stamps


def ledger_changes(stored: dict[str, StoredWorkload], read: Iterable[WorkloadFacts],
                   vanished: Iterable[str], *, positions: dict[str, tuple[int, str]],
                   placements: dict[str, Placement], allocation_of: dict[str, int],
                   borrowed: dict[str, Decimal], now: dt.datetime,
                   clues: dict[str, dict[str, Clue]] | None = None,
                   recorded: dict[str, Recorded] | None = None,
                   lag: float | None = None) -> LedgerChanges:
    """What the ledger records of the Workloads `read` (each in a followed namespace:
    `allocation_of` maps it to its allocation) and of the uids that `vanished`.

    `positions`: uid → (place in its queue, where that came from) for waiting workloads;
    `placements`: uid → the steps read after its current admission (absent: none read);
    `borrowed`: ClusterQueue → devices it borrows now (said in the admission's reason);
    each step timed by fleet.queues.timing from `clues` (uid → step → what the watch saw),
    `recorded` (uid → the times of its steps recorded before) and the watch's `lag`."""
    clues, recorded = clues or {}, recorded or {}
    out = LedgerChanges()
    for f in read:
        row = stored.get(f.uid)
        if stale(f, row):
            continue
        allocation_id = allocation_of[f.namespace]
        base = {"workload_uid": f.uid, "workload": f.display_name,
                "local_queue": f.local_queue, "priority": f.priority, "devices": f.devices}
        old = row.facts if row else None
        steps = transition_events(old, f, now=now,
                                  borrowed=borrowed.get(f.cluster_queue, Decimal(0)))
        was = row.placement if row and row.facts.admitted_at == f.admitted_at else NOTHING
        placed = _kept_steps(was, placements.get(f.uid, was))
        if f.admitted_at:
            steps += placement_events(was, placed, admitted_at=f.admitted_at, base=base)
        if steps:
            def retell(e: dict, placed: Placement = placed) -> str:
                return step_reason(e["kind"], e["seam_seconds"], placed) \
                    if e["kind"] in AFTER_ADMISSION else e["reason"]

            out.events.extend({"allocation_id": allocation_id, **e} for e in timed_steps(
                steps, stamps=_stamps(f, placed, steps, now), clues=clues.get(f.uid, {}),
                recorded=recorded.get(f.uid, {}), lag=lag, now=now, retell=retell))
        position, source = positions.get(f.uid, (None, "")) if f.state == PENDING else \
            (None, "")
        values = {**fact_values(f), **placement_values(placed)}
        if row is None:
            out.written.add(f.uid)
            out.create.append({
                "allocation_id": allocation_id, "uid": f.uid, "namespace": f.namespace,
                "name": f.name, "submitted_at": f.submitted_at, "observed_at": now,
                "position": position, "position_source": source, **values})
        elif (row.facts.resource_version != f.resource_version or row.position != position
              or row.position_source != source or placed != was):
            out.written.add(f.uid)
            out.update.append((row.pk, {**values, "position": position,
                                        "position_source": source, "observed_at": now}))
    for uid in vanished:
        row = stored.get(uid)
        if row is None or row.gone:
            continue
        out.written.add(uid)
        out.gone.append(row.pk)
        if row.facts.state != FINISHED:
            f = row.facts
            out.events.append({
                "allocation_id": row.allocation_id, "workload_uid": uid,
                "workload": f.display_name, "local_queue": f.local_queue,
                "priority": f.priority, "kind": LedgerEvent.GONE, "devices": f.devices,
                **best_time(None, NO_CLUE, lag=lag, now=now).columns(),
                "reason": "Deleted (its job was removed)."})
    return out
