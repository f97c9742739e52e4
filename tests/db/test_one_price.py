"""One price: the preview, the approval, the request and review pages, the queue page's
borrowed price and billing all read the rate of a pool at an instant from fleet.inventory.pricing —
before and after a rate change, and after an admin's route override."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import UsageHour
from billing.services import ratecard_create, rollup_usage
from fleet.inventory.pricing import money, pool_rate
from fleet.models import Allocation, ClusterQueueState, Route
from fleet.queues.explain import allocation_queue
from intake import services
from intake.selectors import approval_plan, plan_for_request
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def _approve(req, admin_user, capture, **kw):
    with capture(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok", **kw)
    req.refresh_from_db()
    return req, Allocation.objects.get(pk=req.allocation_id)


def test_preview_approval_and_bill_use_the_same_rate_through_a_change(
        settings, tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    settings.PORTAL_USAGE_SOURCE = "portal.demo_usage.used_device_seconds"
    shared = pools[Route.SHARED_POOL]
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    _, before = plan_for_request(req)
    assert before.pool.rate_per_device_hour == pool_rate(shared.pk) == Decimal("2.50")
    # A new rate in force from an hour ago: the preview and the approval see it at once
    # (no copy of the rate to bring in step).
    changed_at = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(
        hours=1)
    ratecard_create(pool=shared, rate=Decimal("2.75"), effective_from=changed_at,
                    by=admin_user, reprice_confirmed=True)
    _, after = plan_for_request(req)
    assert after.pool.rate_per_device_hour == Decimal("2.75")
    assert approval_plan(req).plan.monthly_price == after.monthly_price
    req, alloc = _approve(req, admin_user, django_capture_on_commit_callbacks)
    # Billing prices each hour at the rate in force in that hour, from the same cards.
    Allocation.objects.filter(pk=alloc.pk).update(starts_at=changed_at - dt.timedelta(hours=1))
    rollup_usage(start=changed_at - dt.timedelta(hours=1), end=changed_at + dt.timedelta(hours=1))
    rates = dict(UsageHour.objects.filter(allocation=alloc).values_list("hour", "rate"))
    assert rates[changed_at - dt.timedelta(hours=1)] == pool_rate(
        shared.pk, changed_at - dt.timedelta(hours=1)) == Decimal("2.50")
    assert rates[changed_at] == pool_rate(shared.pk, changed_at) == Decimal("2.75")


def test_an_override_is_priced_where_the_allocation_runs(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    confidential = pools[Route.CONFIDENTIAL_POOL]
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    _, asked = plan_for_request(req)
    assert asked.decision.route == Route.SHARED_POOL
    req, alloc = _approve(req, admin_user, django_capture_on_commit_callbacks,
                          override_route=Route.CONFIDENTIAL_POOL,
                          override_reason="Customer data after all")
    assert alloc.pool_id == confidential.pk
    decision, plan = plan_for_request(req)  # what the request and review pages show
    assert decision.route == Route.CONFIDENTIAL_POOL
    assert plan.pool.pool_id == confidential.pk
    assert plan.pool.rate_per_device_hour == pool_rate(confidential.pk) == Decimal("3.00")


def test_the_queue_page_prices_borrowing_at_billings_rate_and_only_where_billed(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    from fleet.models import Pool

    Pool.objects.filter(pk=pools[Route.SHARED_POOL].pk).update(cohort="c",
                                                                 borrowing_limit_devices=4)
    req = make_request(tenant, lead, submit=True, whole_devices=2)
    _, alloc = _approve(req, admin_user, django_capture_on_commit_callbacks)
    now = timezone.now()
    ClusterQueueState.objects.create(
        allocation=alloc, name=alloc.namespace, cohort="c", resource="nvidia.com/gpu",
        nominal=2, borrowing_limit=4, usage=5, borrowed=3, observed_at=now)
    view = allocation_queue(alloc, now=now, history=False)
    assert view.borrowed_price_per_hour == money(3 * pool_rate(alloc.pool_id, now))
    # A dedicated block never borrows, so nothing is priced as borrowing there.
    Allocation.objects.filter(pk=alloc.pk).update(route=Route.DEDICATED_BLOCK)
    alloc.refresh_from_db()
    assert allocation_queue(alloc, now=now, history=False).borrowed_price_per_hour == 0
