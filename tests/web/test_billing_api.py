"""Billing in the API: the same figures as the statement page, the overview, the CSV and
/metrics, scoped exactly like the pages."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from billing.domain import month_start
from billing.models import Adjustment, Statement, UsageHour
from billing.services import refresh_months, statement_close
from tests.factories import make_request

pytestmark = pytest.mark.django_db
LAST_MONTH = month_start(month_start(timezone.now()) - dt.timedelta(days=1))


@pytest.fixture
def billed(tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    """Two allocations of acme with hours whose amounts round differently per line."""
    from intake import services

    allocs = []
    for devices in (1, 3):
        req = make_request(tenant, lead, submit=True, whole_devices=devices)
        with django_capture_on_commit_callbacks(execute=True):
            services.request_approve(request=req, by=admin_user, reason="ok")
        req.refresh_from_db()
        allocs.append(req.allocation)
    for i, alloc in enumerate(allocs):
        for h in range(3):
            hour = dt.datetime.combine(LAST_MONTH, dt.time(h), tzinfo=dt.UTC)
            UsageHour.objects.create(
                allocation=alloc, tenant=tenant, pool=alloc.pool, hour=hour,
                allocated_s=Decimal(3600), used_s=Decimal(1000 + i), credit_s=0,
                charged_s=Decimal(3600), rate=Decimal("2.5"), amount=Decimal("1.0035"))
        refresh_months({(alloc.pk, LAST_MONTH)})
    return allocs


def _api(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_statement_api_overview_csv_and_metrics_agree(client, finance_user, tenant, lead,
                                                      billed):
    month = f"{LAST_MONTH:%Y-%m}"
    stmt = _api(finance_user).get(f"/api/billing/{tenant.slug}:{month}/").json()
    listed = [f for f in _api(finance_user).get("/api/billing/").json()
              if f["tenant"] == tenant.slug and f["month"] == str(LAST_MONTH)]
    assert len(listed) == 1 and listed[0] == stmt["figures"]
    # Each line to the cent, then summed: 2 × 3.01 (not 6.021 rounded once).
    assert stmt["figures"]["usage_amount"] == "6.02" == stmt["figures"]["final"]
    assert sum(Decimal(line["amount"]) for line in stmt["lines"]) == Decimal("6.02")
    client.force_login(finance_user)
    page = client.get(reverse("billing:statement", args=[tenant.slug, month])).content.decode()
    assert "6.02" in page
    rows = list(csv.DictReader(io.StringIO(client.get(
        reverse("billing:overview") + "?format=csv&months=3").content.decode())))
    mine = [r for r in rows if r["tenant"] == tenant.slug and r["month"] == month]
    assert [r["amount"] for r in mine] == ["6.02"]
    metrics = client.get("/metrics").content.decode()
    assert f'aifactory_statement_amount{{tenant="{tenant.slug}"}} 6.02' in metrics


def test_an_adjustment_reaches_every_number(client, finance_user, tenant, billed):
    month = f"{LAST_MONTH:%Y-%m}"
    statement_close(tenant=tenant, month=LAST_MONTH, by=finance_user)
    Adjustment.objects.create(statement=Statement.objects.get(tenant=tenant, month=LAST_MONTH),
                              amount=Decimal("-1.00"), reason="goodwill", by=finance_user)
    figures = _api(finance_user).get(f"/api/billing/{tenant.slug}:{month}/").json()["figures"]
    assert (figures["usage_amount"], figures["adjustments"], figures["final"]) == (
        "6.02", "-1.00", "5.02")
    assert figures["closed"] is True
    client.force_login(finance_user)
    rows = list(csv.DictReader(io.StringIO(client.get(
        reverse("billing:overview") + "?format=csv&months=3").content.decode())))
    assert [r["amount"] for r in rows if r["tenant"] == tenant.slug and r["month"] == month] \
        == ["5.02"]
    assert f'aifactory_statement_amount{{tenant="{tenant.slug}"}} 5.02' in client.get(
        "/metrics").content.decode()
    page = client.get(reverse("billing:statement", args=[tenant.slug, month])).content.decode()
    assert "5.02" in page


def test_a_lead_reads_only_its_own_tenant(other_lead, lead, tenant, billed):
    assert all(f["tenant"] == tenant.slug for f in _api(lead).get("/api/billing/").json())
    assert _api(other_lead).get("/api/billing/").json() == []
    month = f"{LAST_MONTH:%Y-%m}"
    assert _api(other_lead).get(f"/api/billing/{tenant.slug}:{month}/").status_code == 404
    assert _api(other_lead).get(f"/api/billing/?tenant={tenant.slug}").json() == []


@pytest.mark.parametrize("bad", ["2026-13", "26-01", "x", "2026-1", "١٠٠٠-01", "9999-01"])
def test_a_bad_month_is_a_400(finance_user, tenant, bad):
    answer = _api(finance_user).get(f"/api/billing/{tenant.slug}:{bad}/")
    assert answer.status_code == 400 and "YYYY-MM" in answer.json()["message"] + str(
        answer.json()["extra"])


def test_finance_closes_adjusts_and_reopens_through_the_api(client, finance_user, lead,
                                                            tenant, billed):
    """The page's actions, for machines: the same services, the same refusals."""
    key = f"{tenant.slug}:{LAST_MONTH:%Y-%m}"
    client.force_login(lead)
    assert client.post(f"/api/billing/{key}/close/").status_code == 403
    client.force_login(finance_user)
    closed = client.post(f"/api/billing/{key}/close/")
    assert closed.status_code == 200 and closed.json()["figures"]["closed"] is True
    again = client.post(f"/api/billing/{key}/close/")
    assert again.status_code == 400 and "closed already" in again.json()["message"]
    bad = client.post(f"/api/billing/{key}/adjust/", {"amount": "١٠", "reason": "x"},
                      content_type="application/json")
    assert bad.status_code == 400
    adjusted = client.post(f"/api/billing/{key}/adjust/",
                           {"amount": "-1.00", "reason": "Goodwill"},
                           content_type="application/json")
    assert adjusted.status_code == 200
    final = adjusted.json()["figures"]
    assert float(final["final"]) == float(final["usage_amount"]) - 1.00
    refused = client.post(f"/api/billing/{key}/reopen/", {"reason": "wrong"},
                          content_type="application/json")
    assert refused.status_code == 400 and "adjustments" in refused.json()["message"]


def test_the_list_narrows_to_a_range_of_months(finance_user, tenant, billed):
    last = f"{LAST_MONTH:%Y-%m}"
    before = month_start(LAST_MONTH - dt.timedelta(days=1))
    api = _api(finance_user)
    assert [f["month"] for f in api.get(f"/api/billing/?from={last}&to={last}").json()] \
        == [str(LAST_MONTH)]
    assert api.get(f"/api/billing/?to={before:%Y-%m}").json() == []
    assert api.get(f"/api/billing/?from={month_start(timezone.now()):%Y-%m}").json() == []
    assert api.get(f"/api/billing/?from={last}").json() == \
        api.get(f"/api/billing/?tenant={tenant.slug}").json()


@pytest.mark.parametrize("month", ["٢٠٢٦-١٢", "2026-13", "1999-12", "3000-01"])
def test_the_api_and_the_pages_read_a_month_one_way(finance_user, tenant, client, month):
    """Refused alike: a 400 on the field from the API, a 404 from the statement page."""
    answer = _api(finance_user).get(f"/api/billing/?from={month}")
    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"]["from"] == [
        "A month as YYYY-MM, between 2000-01 and 2999-12."]
    client.force_login(finance_user)
    assert client.get(f"/billing/{tenant.slug}/{month}/").status_code == 404


def test_a_month_past_2100_is_a_month_for_the_api_too(finance_user, tenant):
    assert _api(finance_user).get("/api/billing/?from=2150-01").json() == []
