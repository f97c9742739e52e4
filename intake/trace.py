"""One OpenTelemetry trace per allocation: request filed → approved → provisioned → first
workload queued → admitted → placed → running, from the times the portal already keeps (the
audit trail and the queue ledger), sent over OTLP/HTTP to PORTAL_OTLP_ENDPOINT.

Sent once, when the allocation's first workload is running: every span is then complete, so
the trace is written with the moments things happened rather than the moment it was sent.
`trace_plan` is pure (facts in, spans out); `export_allocation_trace` talks to the
collector; the beat task `intake.tasks.export_allocation_traces` finds what is due.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone
from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from fleet.models import Allocation, QueueEvent

from .models import AllocationTrace, CapacityRequest
from .selectors import request_events

log = logging.getLogger(__name__)
K = QueueEvent.Kind
_STATUS_WORDS = dict(Allocation.Status.choices)


@dataclasses.dataclass(frozen=True)
class Mark:
    """Something that happened at one moment: a span event."""

    name: str
    at: dt.datetime
    attributes: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SpanPlan:
    name: str
    start: dt.datetime
    end: dt.datetime
    attributes: dict = dataclasses.field(default_factory=dict)
    events: tuple[Mark, ...] = ()
    children: tuple[SpanPlan, ...] = ()


@dataclasses.dataclass(frozen=True)
class TraceFacts:
    """What the trace is drawn from, as plain data."""

    request_id: int
    allocation_id: int
    tenant: str
    namespace: str
    route: str
    pool: str
    size: str
    submitted_at: dt.datetime
    approved_at: dt.datetime
    approval_reason: str
    # Audit rows of the allocation from approval to active (started, failed, retried, active).
    provisioning: tuple[Mark, ...]
    active_at: dt.datetime
    # The first workload that ran: its ledger up to that first "running".
    workload: str
    local_queue: str
    priority: int
    devices: str
    ledger: tuple[Mark, ...]


def _span(name: str, start: dt.datetime, end: dt.datetime, **kw) -> SpanPlan:
    return SpanPlan(name, start, max(start, end), **kw)  # clocks of two sources may disagree


def trace_plan(f: TraceFacts) -> SpanPlan:
    """The spans of one allocation's trace: a root from filing to running work, a child per
    stage, the ledger's steps as events on the stage they belong to."""
    queued = next((m.at for m in f.ledger if m.name == K.SUBMITTED.label), f.active_at)
    last = max((i for i, m in enumerate(f.ledger) if m.name == K.ADMITTED.label), default=-1)
    admitted = f.ledger[last].at if last >= 0 else queued
    running = f.ledger[-1].at if f.ledger else admitted
    waiting, placing = f.ledger[:last + 1], f.ledger[last + 1:]
    work = {"portal.workload": f.workload, "kueue.local_queue": f.local_queue,
            "kueue.priority": f.priority, "portal.devices": f.devices}
    children = (
        _span("review", f.submitted_at, f.approved_at,
              attributes={"portal.decision_reason": f.approval_reason}),
        _span("provisioning", f.approved_at, f.active_at, events=f.provisioning),
        _span("until the first workload", f.active_at, queued),
        _span("queue wait", queued, admitted, attributes=work, events=waiting),
        _span("placement", admitted, running, attributes=work, events=placing),
    )
    return _span(
        f"allocation {f.namespace}", f.submitted_at, max(running, f.active_at),
        attributes={"portal.request.id": f.request_id, "portal.allocation.id": f.allocation_id,
                    "portal.tenant": f.tenant, "portal.route": f.route, "portal.pool": f.pool,
                    "portal.size": f.size, "k8s.namespace.name": f.namespace},
        children=children)


def _ledger_to_first_run(events: list[QueueEvent]) -> tuple[QueueEvent, ...]:
    """The first workload that ran, from its submission to that first running."""
    first = next((e for e in events if e.kind == K.RUNNING), None)
    if first is None:
        return ()
    return tuple(e for e in events if e.workload_uid == first.workload_uid and
                 (e.at, e.pk) <= (first.at, first.pk))


def _mark(e: QueueEvent) -> Mark:
    attrs = {"portal.reason": e.reason}
    if e.seam_seconds is not None:
        attrs["portal.seam_seconds"] = e.seam_seconds
    if e.borrowed:
        attrs["portal.borrowed_devices"] = str(e.borrowed)
    return Mark(e.get_kind_display(), e.at, attrs)


def trace_facts(alloc: Allocation) -> TraceFacts | None:
    """The facts for an allocation's trace, or None while it has no running workload yet (or
    was not made by a request's approval)."""
    req = CapacityRequest.objects.filter(allocation=alloc).select_related("pool").first()
    if req is None:
        return None
    ledger = _ledger_to_first_run(list(
        alloc.queue_events.filter(kind__in=[K.SUBMITTED, K.ADMITTED, K.PREEMPTED, K.EVICTED,
                                            K.PODS, K.CLAIMED, K.SCHEDULED, K.RUNNING])
        .order_by("at", "id")))
    if not ledger:
        return None
    audit = list(request_events(req))
    submitted = [e.at for e in audit if e.action == "request.submitted"]
    approved = next((e for e in audit if e.action == "request.approved"), None)
    active = next((e.at for e in audit if e.subject_type == "allocation" and
                   e.to_state == Allocation.Status.ACTIVE), None)
    if approved is None or active is None:
        return None
    provisioning = tuple(
        Mark(_STATUS_WORDS.get(e.to_state, e.action), e.at,
             {"portal.reason": e.reason, "portal.action": e.action})
        for e in audit if e.subject_type == "allocation" and approved.at <= e.at <= active)
    run = ledger[-1]
    return TraceFacts(
        request_id=req.pk, allocation_id=alloc.pk, tenant=alloc.tenant.slug,
        namespace=alloc.namespace, route=alloc.route, pool=alloc.pool.slug, size=req.size_label,
        submitted_at=max((t for t in submitted if t <= approved.at), default=req.created_at),
        approved_at=approved.at, approval_reason=approved.reason,
        provisioning=provisioning, active_at=active, workload=run.workload,
        local_queue=run.local_queue, priority=run.priority, devices=str(run.devices),
        ledger=tuple(_mark(e) for e in ledger))


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ns(t: dt.datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float timestamp × 1e9 is off by hundreds)."""
    return (t - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def _spans(plan: SpanPlan):
    """The plan as SDK spans (one trace), collected rather than sent as they end."""
    class Collect(SpanProcessor):
        def __init__(self) -> None:
            self.spans = []

        def on_end(self, span) -> None:
            self.spans.append(span)

    collect = Collect()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": settings.PORTAL_OTEL_SERVICE_NAME}))
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("aifactory-portal.intake")

    def emit(p: SpanPlan, ctx) -> int:
        span = tracer.start_span(p.name, context=ctx, start_time=_ns(p.start),
                                 attributes=p.attributes)
        for m in p.events:
            span.add_event(m.name, m.attributes, timestamp=_ns(m.at))
        inner = trace.set_span_in_context(span, ctx)
        for c in p.children:
            emit(c, inner)
        span.end(end_time=_ns(p.end))
        return span.get_span_context().trace_id

    trace_id = emit(plan, context.Context())  # an empty context: a new trace
    return f"{trace_id:032x}", collect.spans


def span_exporter():
    return OTLPSpanExporter(endpoint=settings.PORTAL_OTLP_ENDPOINT.rstrip("/") + "/v1/traces",
                            timeout=10)


class TraceNotSent(Exception):
    """The collector did not take the trace (kept due: the next run sends it)."""


def export_allocation_trace(alloc: Allocation, *, exporter=None) -> AllocationTrace | None:
    """Send the allocation's trace once; None if it is not due (no running workload yet)."""
    facts = trace_facts(alloc)
    if facts is None:
        return None
    trace_id, spans = _spans(trace_plan(facts))
    exporter = exporter or span_exporter()
    if exporter.export(spans) is not SpanExportResult.SUCCESS:
        raise TraceNotSent(f"the collector at {settings.PORTAL_OTLP_ENDPOINT} refused or "
                           "did not answer")
    try:
        return AllocationTrace.objects.create(allocation=alloc, trace_id=trace_id,
                                              spans=len(spans), exported_at=timezone.now())
    except IntegrityError:  # another worker sent it at the same time: keep theirs
        return AllocationTrace.objects.get(allocation=alloc)


def allocations_due_a_trace(limit: int = 100):
    """Allocations whose first workload has run and whose trace was not sent yet."""
    return (Allocation.objects.filter(trace__isnull=True, request__isnull=False,
                                      queue_events__kind=K.RUNNING)
            .select_related("tenant", "pool").distinct().order_by("pk")[:limit])


def export_due_traces(*, exporter=None) -> int:
    """Send every due trace; stops at the first the collector refuses (it is down: the next
    run tries again)."""
    if not settings.PORTAL_OTLP_ENDPOINT:
        return 0
    sent = 0
    for alloc in allocations_due_a_trace():
        try:
            if export_allocation_trace(alloc, exporter=exporter) is not None:
                sent += 1
        except TraceNotSent as exc:
            log.warning("trace of allocation %s not sent: %s", alloc.pk, exc)
            break
    return sent
