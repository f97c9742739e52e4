"""The embedded run without Prometheus or a beat process: synthetic use reaches billing for
an allocation approved today, and the in-process beat runs what is due."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour, month_start
from billing.models import UsageHour, UsageMonth
from billing.services import rollup_recent
from intake import services as intake
from portal.embedded_beat import due_tasks, start_if_wanted
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def test_an_allocation_approved_today_is_billed_from_demo_use(settings, tenant, lead,
                                                              admin_user, pools):
    settings.PORTAL_USAGE_SOURCE = "portal.demo_usage.used_device_seconds"
    request = make_request(tenant, lead, submit=True, expected_utilisation=80)
    request = intake.request_approve(request=request, by=admin_user, reason="Fits.")
    alloc = request.allocation
    # Approved two hours ago, as far as billing can tell: two whole hours have finished.
    type(alloc).objects.filter(pk=alloc.pk).update(
        starts_at=floor_hour(timezone.now()) - dt.timedelta(hours=2), status="active")
    report = rollup_recent()
    assert report.pending_hours == []  # nothing waits for a Prometheus that is not there
    hours = UsageHour.objects.filter(allocation=alloc)
    assert hours.count() == 2
    assert all(Decimal(0) < h.used_s <= h.allocated_s for h in hours)
    month = UsageMonth.objects.get(allocation=alloc, month=month_start(min(h.hour for h in hours)))
    assert month.amount > 0


def test_without_a_source_the_rollup_asks_prometheus(settings, tenant, lead, admin_user, pools):
    settings.PORTAL_USAGE_SOURCE = ""
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing there: hours stay pending
    request = make_request(tenant, lead, submit=True)
    alloc = intake.request_approve(request=request, by=admin_user, reason="Fits.").allocation
    type(alloc).objects.filter(pk=alloc.pk).update(
        starts_at=floor_hour(timezone.now()) - dt.timedelta(hours=1), status="active")
    assert rollup_recent().pending_hours  # honest: unknown, not zero


def test_the_embedded_beat_runs_what_is_due():
    schedule = {"a": {"task": "x", "schedule": 60.0}, "b": {"task": "y", "schedule": 900.0}}
    assert due_tasks(schedule, {}, 1000.0) == ["a", "b"]  # everything at start
    assert due_tasks(schedule, {"a": 950.0, "b": 950.0}, 1000.0) == []
    assert due_tasks(schedule, {"a": 940.0, "b": 950.0}, 1000.0) == ["a"]
    assert due_tasks(schedule, {"a": 1000.0, "b": 100.0}, 1000.0) == ["b"]


def test_the_embedded_beat_stays_out_of_tests_and_commands(settings):
    settings.PORTAL_EMBEDDED_BEAT = True
    assert start_if_wanted() is False  # not runserver


def test_reconcile_does_not_invent_drift_on_the_dry_run(tenant, lead, admin_user, pools):
    """A fresh process's dry-run record is empty: reconciling against it would call every
    object deleted and append a false drift repair to each allocation's trail."""
    from fleet.kube import set_backend
    from fleet.tasks import reconcile_allocations
    from tenants.models import AuditEvent

    set_backend(None)  # the configured default: dry-run
    request = make_request(tenant, lead, submit=True)
    intake.request_approve(request=request, by=admin_user, reason="Fits.")
    set_backend(None)  # as after a restart
    said = reconcile_allocations()
    assert said.startswith("0 allocation(s) drifted")
    assert "reconcile skipped for local (a dry run: no cluster to drift from)" in said
    assert not AuditEvent.objects.filter(action="allocation.drift").exists()
