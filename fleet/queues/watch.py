"""Follow Kueue by watch: a change in the cluster reaches the tenant's page in well under a
second, where the periodic list takes up to PORTAL_QUEUE_SYNC_SECONDS.

One list of each kind the queue truth reads (ClusterQueues and LocalQueues the portal made,
every Workload, the Pods of Jobs, ResourceClaims), recorded as the periodic sync records it;
then one watch per kind from that list's resourceVersion keeps the objects in memory, and
each burst of events is recorded for just the workloads it touched
(`sync.record_view(..., only=...)`). Back to a full list when the server says a version is
too old (410), a watch fails, or every `resync_seconds` — the list is the safety net, and the
beat's `queue_sync` may keep running beside this process (see sync.py on why the two readers
cannot undo each other). Run it as its own process: `manage.py watch_queues`.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from ..kube import DryRunBackend, KubeBackend, KubeError
from .afterwards import CLAIMS_PATH, PODS_PATH, KueueView, marks
from .placement import JOB_LABELS
from .sync import (
    KUEUE_BASE,
    KUEUE_LISTS,
    QueueSyncReport,
    list_at_once,
    record_view,
)
from .timing import RECORDED_BY, watch_lag
from .truth import parse_time

log = logging.getLogger(__name__)

EVENTS_PATH = "/apis/events.k8s.io/v1/events"
# kind → (path, label selector). Pods, claims and Events are optional: a cluster without DRA
# (or an identity without pods or events) still has its queues followed.
FOLLOWED = {**{kind: (f"{KUEUE_BASE}/{kind}", selector)
               for kind, selector in KUEUE_LISTS.items()},
            "pods": (PODS_PATH, JOB_LABELS[0]), "claims": (CLAIMS_PATH, ""),
            "events": (EVENTS_PATH, "")}
OPTIONAL = {"pods", "claims", "events"}
# The Events kept: about the objects whose steps they time, with a MicroTime (the core/v1
# recorder's Events have none and time nothing finer than the object's own stamp).
TIMED_KINDS = {about for about, _reasons in RECORDED_BY.values()}
TIMED_REASONS = {r for _about, reasons in RECORDED_BY.values() for r in reasons}
LAGS_KEPT = 200  # the latest watch delays the error bar is taken from


def event_time(obj: dict) -> tuple[tuple[str, str, str], str, dt.datetime] | None:
    """(namespace, kind, name) of what an Event is about, its reason and eventTime; None
    for an Event that times no step."""
    regarding = obj.get("regarding") or {}
    reason, at = obj.get("reason"), parse_time(obj.get("eventTime"))
    if at is None or regarding.get("kind") not in TIMED_KINDS or reason not in TIMED_REASONS:
        return None
    return (regarding.get("namespace", ""), regarding["kind"], regarding.get("name", "")), \
        reason, at


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


@dataclass
class Mirror:
    """The objects of each followed kind as last seen, keyed by (namespace, name)."""

    objects: dict[str, dict[tuple[str, str], dict]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    cohorts: int = 0
    listed_at: object = None
    parsed: dict = field(default_factory=dict)
    # kind → key → mark → when the watch received the first version showing it (None: it
    # was there when listed): fleet.queues.afterwards.marks
    arrivals: dict[str, dict[tuple[str, str], dict[tuple[str, str], dt.datetime | None]]] = \
        field(default_factory=dict)
    # (namespace, kind, name) → {Event key: (reason, eventTime)}
    timed: dict[tuple[str, str, str], dict[tuple[str, str], tuple[str, dt.datetime]]] = \
        field(default_factory=dict)
    lags: deque = field(default_factory=lambda: deque(maxlen=LAGS_KEPT))

    @classmethod
    def read(cls, backend: KubeBackend) -> Mirror:
        mirror = cls(listed_at=timezone.now())
        items, mirror.versions, mirror.cohorts = list_at_once(backend, FOLLOWED,
                                                              optional=OPTIONAL)
        events = items.pop("events", None)
        mirror.objects = {kind: {_key(o): o for o in found} for kind, found in items.items()}
        for kind in ("workloads", "pods", "claims"):
            # What a list shows was there before the watch: no arrival times it.
            mirror.arrivals[kind] = {key: dict.fromkeys(marks(kind, o))
                                     for key, o in mirror.objects.get(kind, {}).items()}
        if events is not None:
            mirror.objects["events"] = {}
            for o in events:
                mirror.apply("events", "ADDED", o)
        return mirror

    def view(self) -> KueueView:
        def items(kind):
            found = self.objects.get(kind)
            return None if found is None else list(found.values())

        if len(self.parsed) > 2 * len(self.objects["workloads"]) + 1000:
            self.parsed.clear()  # older versions of Workloads read before
        return KueueView(parsed=self.parsed, cluster_queues=items("clusterqueues"),
                         local_queues=items("localqueues"), workloads=items("workloads"),
                         cohorts=self.cohorts, listed_at=self.listed_at, pods=items("pods"),
                         claims=items("claims"), versions=dict(self.versions),
                         arrivals=self.arrivals,
                         events={k: list(v.values()) for k, v in self.timed.items()},
                         lag=watch_lag(list(self.lags)))

    def loses_facts(self, kind: str, event: str, obj: dict) -> bool:
        """Whether applying the event erases a step the ledger reads: a pod or claim
        deleted, or a claim's allocation cleared."""
        if kind not in OPTIONAL:
            return False
        before = self.objects[kind].get(_key(obj))
        if before is None:
            return False
        if event == "DELETED":
            return True
        return kind == "claims" and bool((before.get("status") or {}).get("allocation")) \
            and not (obj.get("status") or {}).get("allocation")

    def apply(self, kind: str, event: str, obj: dict,
              seen: dt.datetime | None = None) -> None:
        """The event applied; `seen`: when the watch received it (None: listed)."""
        key = _key(obj)
        if kind == "events":
            return self._apply_event(event, obj, seen)
        if event == "DELETED":
            self.objects[kind].pop(key, None)
            self.arrivals.get(kind, {}).pop(key, None)
            return
        self.objects[kind][key] = obj
        if kind in ("clusterqueues", "localqueues"):
            return  # no step is read from a queue
        first = self.arrivals.setdefault(kind, {}).setdefault(key, {})
        for mark in marks(kind, obj):
            first.setdefault(mark, seen)

    def _apply_event(self, event: str, obj: dict, seen: dt.datetime | None) -> None:
        """Only what an Event times is kept (the cluster's other Events cost no memory);
        a new one's arrival after its eventTime is the watch's lag."""
        found = event_time(obj)
        if found is None:
            return
        about, reason, at = found
        if event == "DELETED":
            self.timed.get(about, {}).pop(_key(obj), None)
            if not self.timed.get(about, True):
                del self.timed[about]
            return
        self.timed.setdefault(about, {})[_key(obj)] = (reason, at)
        if event == "ADDED" and seen is not None:
            self.lags.append((seen - at).total_seconds())


@dataclass
class Touched:
    """What one burst of events touched: workload uids to record, uids deleted."""

    only: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    events: int = 0
    _by_namespace: dict[str, set[str]] | None = None  # built once per burst, when needed

    def add(self, mirror: Mirror, kind: str, event: str, obj: dict) -> None:
        self.events += 1
        namespace = _key(obj)[0]
        if kind == "events":
            # An Event times a step of its object: the namespace's workloads are read again
            # (a step already recorded keeps its time: the ledger is append-only).
            namespace = (obj.get("regarding") or {}).get("namespace", namespace) \
                if event_time(obj) else None
            if namespace is None:
                return
            kind = "pods"
        if kind == "workloads":
            uid = (obj.get("metadata") or {}).get("uid", "")
            (self.gone if event == "DELETED" else self.only).add(uid)
            return
        if kind in ("pods", "claims", "localqueues"):
            # A pod's or claim's step, or a queue's link, belongs to the namespace's workloads.
            if self._by_namespace is None:
                self._by_namespace = {}
                for (ns, _n), w in mirror.objects["workloads"].items():
                    self._by_namespace.setdefault(ns, set()).add(
                        (w.get("metadata") or {}).get("uid", ""))
            self.only |= self._by_namespace.get(namespace, set())
        # A ClusterQueue's own change moves no workload: queues are recomputed every time.


class _Restart(Exception):
    """A watch cannot go on from its version: list everything again."""


def _follow_kind(backend: KubeBackend, kind: str, version: str, out: queue.Queue,
                 stop: threading.Event, timeout_seconds: int) -> None:
    """Put (kind, event type, object) for each change of one kind, resuming the watch from
    the last version seen each time the server ends it; ("restart", reason) when it can't."""
    path, selector = FOLLOWED[kind]
    try:
        while not stop.is_set():
            for event in backend.watch_path(path, resource_version=version,
                                            label_selector=selector,
                                            timeout_seconds=timeout_seconds):
                if stop.is_set():
                    return
                seen = dt.datetime.now(dt.UTC)  # the moment it arrived: the watch's clock
                kind_of, obj = event.get("type"), event.get("object") or {}
                if kind_of == "ERROR":
                    out.put(("restart", f"{kind}: {obj.get('message', obj)}", None, None))
                    return
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if kind_of != "BOOKMARK":
                    out.put((kind, kind_of, obj, seen))
    except KubeError as exc:
        out.put(("restart", f"{kind}: {exc.message}", None, None))


class QueueFollower:
    """The watch, in steps a caller can drive: `start` lists and records everything and
    opens the watches; each `drain` records the events that arrived since. The watches run
    in threads that only read the API server; every database write happens in the caller's
    thread (so a test can follow inside its own transaction)."""

    def __init__(self, backend: KubeBackend, *, timeout_seconds: int = 300,
                 batch_seconds: float = 0.05, cluster=None):
        if isinstance(backend, DryRunBackend):
            raise KubeError("The dry-run backend has no cluster to watch.", retriable=False)
        self.backend, self.timeout_seconds = backend, timeout_seconds
        self.batch_seconds, self.cluster = batch_seconds, cluster
        self.mirror: Mirror | None = None
        self.events: queue.Queue = queue.Queue()
        self._round = threading.Event()

    def start(self) -> QueueSyncReport:
        self.close()
        self._round, self.events = threading.Event(), queue.Queue()
        self.mirror = Mirror.read(self.backend)
        report = record_view(self.backend, self.mirror.view(), cluster=self.cluster)
        for kind in self.mirror.objects:
            threading.Thread(target=_follow_kind, daemon=True, name=f"watch-{kind}",
                             args=(self.backend, kind, self.mirror.versions[kind],
                                   self.events, self._round, self.timeout_seconds)).start()
        return report

    def close(self) -> None:
        self._round.set()

    def drain(self, wait: float = 0.0) -> list[QueueSyncReport]:
        """Record what arrived (waiting up to `wait` seconds for a first event). When a
        watch cannot go on (its version expired, the stream broke) everything is listed
        and recorded again, and the watches reopened from there."""
        try:
            return self._drain(wait)
        except _Restart as why:
            log.info("queue watch: %s; listing again", why)
            return [self.start()]

    def _drain(self, wait: float) -> list[QueueSyncReport]:
        try:
            burst = [self.events.get(timeout=wait) if wait > 0 else self.events.get_nowait()]
        except queue.Empty:
            return []
        # Events come in bursts (an admission writes the Workload, then pods, then claims):
        # a few milliseconds of waiting records them in one pass.
        ends = time.monotonic() + self.batch_seconds
        while True:
            try:
                left = ends - time.monotonic()
                burst.append(self.events.get(timeout=left) if left > 0
                             else self.events.get_nowait())
            except queue.Empty:
                break
        reports, touched = [], Touched()
        for kind, event, obj, seen in burst:
            if kind == "restart":
                raise _Restart(event)
            if touched.events and self.mirror.loses_facts(kind, event, obj):
                # A claim is deallocated, then deleted, when its pod ends: record what the
                # burst said before that, or a pod shorter than a burst leaves no device.
                reports.append(self._record(touched))
                touched = Touched()
            self.mirror.apply(kind, event, obj, seen)
            touched.add(self.mirror, kind, event, obj)
        reports.append(self._record(touched))
        return reports

    def _record(self, touched: Touched) -> QueueSyncReport:
        touched.only.discard("")
        report = record_view(self.backend, self.mirror.view(), only=touched.only,
                             gone=touched.gone, cluster=self.cluster)
        report.timings["events"] = touched.events
        return report


def watch_queues(backend: KubeBackend, *, stop: threading.Event | None = None,
                 timeout_seconds: int = 300, batch_seconds: float = 0.05,
                 resync_seconds: float | None = None, on_change=None, cluster=None) -> None:
    """List and record, then follow by watch until `stop`; `on_change(what, report)` after
    each record ("listed" for a full one, "events" for a burst)."""
    follower = QueueFollower(backend, timeout_seconds=timeout_seconds,
                             batch_seconds=batch_seconds, cluster=cluster)
    stop = stop or threading.Event()
    resync = resync_seconds or settings.PORTAL_QUEUE_RESYNC_SECONDS
    failures = 0
    try:
        while not stop.is_set():
            try:
                report = follower.start()
                failures = 0
                if on_change is not None:
                    on_change("listed", report)
                until = time.monotonic() + resync
                while not stop.is_set() and time.monotonic() < until:
                    for report in follower.drain(wait=0.25):
                        if on_change is not None:
                            on_change("events", report)
            except KubeError as exc:
                failures += 1
                delay = min(60, 2 ** failures)
                log.warning("queue watch: %s; again in %ss", exc.message, delay)
                stop.wait(delay)
    finally:
        follower.close()
