"""One OpenTelemetry trace per allocation (intake.trace), through the SDK's own exporter
interface: due once the first workload runs, sent once, kept due while the collector refuses,
shown on the request page and in the API. A real OpenTelemetry Collector receives it in
tests/k8s/test_placement.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fleet.queues.placement import Placement
from fleet.queues.sync import record_workloads
from fleet.queues.truth import ADMITTED, WorkloadFacts
from intake import trace
from intake.models import AllocationTrace
from tests.factories import make_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def active(tenant, lead, admin_user, pools, django_capture_on_commit_callbacks, settings):
    from intake import services

    settings.PORTAL_OTLP_ENDPOINT = "http://collector.invalid:4318"
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="Fits now.")
    req.refresh_from_db()
    assert req.allocation.status == "active"
    return req


def run_first_job(alloc, *, running: bool = True, t0: dt.datetime | None = None):
    # Called twice by a test (not running yet, then running), it must pass the same t0: a
    # second boundary between the calls moved "submitted" (seen in CI).
    t0 = t0 or timezone.now().replace(microsecond=0) + dt.timedelta(seconds=5)

    def at(s):
        return t0 + dt.timedelta(seconds=s)

    f = WorkloadFacts(uid="wl-1", namespace=alloc.namespace, name="job-train-x", job="train",
                      local_queue="gpu", cluster_queue=alloc.namespace, priority=0,
                      submitted_at=at(0), devices=Decimal(2), state=ADMITTED,
                      admitted_at=at(30), resource_version="1")
    placement = Placement(pods_at=at(31), scheduled_at=at(32), node="shr-0",
                          running_at=at(34) if running else None)
    record_workloads([f], queues={}, positions={}, allocations={alloc.namespace: alloc},
                     now=at(40), placements={f.uid: placement})
    return at


class Refusing(InMemorySpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE


def test_sent_once_when_the_first_workload_runs(active):
    alloc = active.allocation
    sink = InMemorySpanExporter()
    t0 = timezone.now().replace(microsecond=0) + dt.timedelta(seconds=5)
    run_first_job(alloc, running=False, t0=t0)
    assert trace.export_due_traces(exporter=sink) == 0  # admitted, not running: not due
    at = run_first_job(alloc, t0=t0)
    assert trace.export_due_traces(exporter=sink) == 1
    assert trace.export_due_traces(exporter=sink) == 0  # sent once
    spans = {s.name: s for s in sink.get_finished_spans()}
    assert set(spans) == {f"allocation {alloc.namespace}", "review", "provisioning",
                          "until the first workload", "queue wait", "placement"}
    root = spans[f"allocation {alloc.namespace}"]
    stored = AllocationTrace.objects.get(allocation=alloc)
    assert stored.trace_id == f"{root.context.trace_id:032x}" and stored.spans == 6
    assert all(s.context.trace_id == root.context.trace_id for s in spans.values())
    assert all(s.parent.span_id == root.context.span_id for n, s in spans.items()
               if s is not root)
    # The ledger's own times, to the nanosecond the SDK keeps.
    ns = int(at(34).timestamp()) * 10**9
    assert root.end_time == ns and spans["placement"].end_time == ns
    assert spans["queue wait"].start_time == int(at(0).timestamp()) * 10**9
    assert [e.name for e in spans["placement"].events] == ["Pods created", "Scheduled",
                                                           "Running"]
    assert root.attributes["portal.tenant"] == alloc.tenant.slug
    assert root.resource.attributes["service.name"] == "aifactory-portal"


def test_a_collector_that_refuses_leaves_it_due(active):
    run_first_job(active.allocation)
    assert trace.export_due_traces(exporter=Refusing()) == 0
    assert not AllocationTrace.objects.exists()
    assert trace.export_due_traces(exporter=InMemorySpanExporter()) == 1


def test_nothing_is_sent_without_an_endpoint(active, settings):
    settings.PORTAL_OTLP_ENDPOINT = ""
    run_first_job(active.allocation)
    sink = InMemorySpanExporter()
    assert trace.export_due_traces(exporter=sink) == 0 and not sink.get_finished_spans()


def test_the_page_and_the_api_give_the_trace(client, lead, active, settings):
    run_first_job(active.allocation)
    trace.export_due_traces(exporter=InMemorySpanExporter())
    trace_id = AllocationTrace.objects.get().trace_id
    client.force_login(lead)
    assert client.get(f"/api/requests/{active.pk}/").json()["trace_id"] == trace_id
    assert client.get("/api/requests/").json()["results"][0]["trace_id"] == trace_id
    page = client.get(f"/requests/{active.pk}/").content.decode()
    assert f"<code>{trace_id}</code>" in page
    settings.PORTAL_TRACE_URL = "https://jaeger.example/trace/{trace_id}"
    page = client.get(f"/requests/{active.pk}/").content.decode()
    assert f'href="https://jaeger.example/trace/{trace_id}"' in page


def test_the_api_says_null_before_it_is_sent(client, lead, active):
    client.force_login(lead)
    assert client.get(f"/api/requests/{active.pk}/").json()["trace_id"] is None
