"""Bad input gets a clear answer, never a server error, and nothing out of range is stored:
months in URLs and query strings, amounts and rates (NaN, Infinity, too large, other
scripts' digits), and refusals in the right order (role before anything else)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from billing.models import Adjustment, RateCard, Statement
from fleet.models import Route
from tests.factories import LAST_MONTH

pytestmark = pytest.mark.django_db
MONTH = f"{LAST_MONTH:%Y-%m}"
NOT_NUMBERS = ["NaN", "nan", "Infinity", "-Infinity", "sNaN", "1e20", "99999999999999",
               "٣", "²", "", "   ", "12,50", "0x10"]


@pytest.mark.parametrize("month", ["9999-12", "0000-01", "2026-13", "2026-1", "２０２６-０１",
                                   "2026-00", "10000-01", "-2026-01"])
def test_a_month_out_of_range_is_not_found(client, finance_user, billed, month):
    client.force_login(finance_user)
    assert client.get(f"/billing/acme/{month}/").status_code == 404


@pytest.mark.parametrize("months", ["²", "٣", "99999999999999999999", "-1", "x", "1.5"])
def test_odd_month_counts_fall_back_to_the_default(client, finance_user, billed, months):
    client.force_login(finance_user)
    assert client.get(reverse("billing:overview"), {"months": months}).status_code == 200


@pytest.mark.parametrize("amount", NOT_NUMBERS)
def test_an_adjustment_that_is_no_number_is_refused_and_not_stored(client, finance_user,
                                                                    billed, amount):
    client.force_login(finance_user)
    client.post(reverse("billing:close", args=["acme", MONTH]))
    assert Statement.objects.get(tenant__slug="acme").closed
    response = client.post(reverse("billing:adjust", args=["acme", MONTH]),
                           {"amount": amount, "reason": "typo"}, follow=True)
    # Refused on the statement page itself (400), the typed reason kept for the retry.
    assert response.status_code == 400 and b"must be" in response.content
    assert b'value="typo"' in response.content
    assert not Adjustment.objects.exists()
    assert client.get(reverse("billing:statement", args=["acme", MONTH])).status_code == 200


def test_a_lead_adjusting_an_open_month_is_refused_for_the_role(client, lead, billed):
    client.force_login(lead)
    response = client.post(reverse("billing:adjust", args=["acme", MONTH]),
                           {"amount": "5", "reason": "mine"})
    assert response.status_code == 403


@pytest.mark.parametrize("rate", NOT_NUMBERS)
def test_a_rate_that_is_no_number_is_refused(client, admin_user, pools, rate):
    client.force_login(admin_user)
    response = client.post(reverse("billing:rates"), {
        "pool": pools[Route.SHARED_POOL].slug, "rate": rate,
        "effective_from": (dt.date.today() + dt.timedelta(days=40)).isoformat()})
    assert response.status_code == 200
    assert RateCard.objects.count() == len(pools)  # each pool's first card, nothing more


@pytest.mark.parametrize("starts", ["9999-12-31T00:00", "0001-01-01T00:00", "1970-01-01"])
def test_a_rate_starting_out_of_any_sane_window_is_refused(client, admin_user, pools, starts):
    client.force_login(admin_user)
    response = client.post(reverse("billing:rates"), {
        "pool": pools[Route.SHARED_POOL].slug, "rate": "2.45", "effective_from": starts})
    assert response.status_code == 200 and b"ten years" in response.content
    assert RateCard.objects.count() == len(pools)


# -- requests: the API, the form and the service share one set of limits ------------------

def _api_payload(tenant, **kw):
    from tests.factories import request_body

    return request_body(tenant.slug, **kw)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("starts_on", dt.date.today() - dt.timedelta(days=900), "in the past"),
    ("starts_on", dt.date.today() + dt.timedelta(days=800), "days ahead"),
    ("ends_on", dt.date(9999, 12, 31), "three years"),
    ("memory_gb", 2**62, ""),
    ("memory_gb", 5000, "GB per replica"),
])
def test_the_api_refuses_what_the_form_refuses(client, tenant, lead, pools, field, value,
                                               message):
    from rest_framework.test import APIClient

    from intake.models import CapacityRequest

    api = APIClient()
    api.force_authenticate(lead)
    extra = {"device_fill": "small", "replicas": 1, "whole_devices": 0} \
        if field == "memory_gb" else {}
    response = api.post("/api/requests/", _api_payload(tenant, **{field: value, **extra}),
                        format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"]["fields"]
    assert message in str(response.json())
    # ... and the form, given the same answers, says the same.
    client.force_login(lead)
    form = {k: v for k, v in _api_payload(tenant, **{field: value, **extra}).items()}
    page = client.post(reverse("intake:new"), {**form, "tenant": tenant.pk, "intent": "draft"})
    assert page.status_code == 200 and message in page.content.decode()
    assert not CapacityRequest.objects.exists()


def test_memory_beyond_the_pools_device_is_refused_clearly(tenant, lead, pools):
    """120 GB per replica on 80 GB devices: refused with the reason, not counted as one
    whole device (which it cannot be)."""
    from intake import services
    from tests.factories import make_request

    req = make_request(tenant, lead, device_fill="small", replicas=2, whole_devices=0,
                       memory_gb=120)
    with pytest.raises(services.IntakeError, match="more than one device holds"):
        services.request_submit(request=req, by=lead)


def test_json_nested_thousands_deep_is_a_400(client, lead, pools):
    client.force_login(lead)
    body = "[" * 50000 + "]" * 50000
    response = client.post("/api/requests/preview/", body, content_type="application/json")
    assert response.status_code == 400 and "nested too deeply" in response.json()["message"]


@pytest.mark.parametrize("query", ["offset=99999999999999999999999", "limit=99999999999",
                                   "offset=-5", "limit=٣", "offset=x"])
def test_odd_pagination_is_not_a_server_error(client, lead, pools, query):
    client.force_login(lead)
    for path in ("/api/requests/", "/api/allocations/"):
        response = client.get(f"{path}?{query}")
        assert response.status_code == 200, (path, query)


def test_a_nul_byte_in_the_tenant_filter_is_no_server_error(client, finance_user, billed):
    client.force_login(finance_user)
    assert client.get(reverse("billing:overview"), {"q": "ac\x00me"}).status_code == 200


def test_the_api_accepts_only_the_mig_profiles_the_form_offers(client, tenant, lead, pools):
    from rest_framework.test import APIClient

    from fleet.models import Pool

    Pool.objects.filter(route=Route.MIG_VCLUSTER).update(mig_profiles=["2g.20gb"])
    api = APIClient()
    api.force_authenticate(lead)
    body = _api_payload(tenant, device_fill="small", replicas=1, whole_devices=0,
                        mig_profile="1g.10gb")
    refused = api.post("/api/requests/", body, format="json")
    assert refused.status_code == 400 and "mig_profile" in refused.json()["extra"]["fields"]
    assert api.post("/api/requests/", {**body, "mig_profile": "2g.20gb"},
                    format="json").status_code == 201


@pytest.mark.parametrize("field", ["whole_devices", "replicas", "memory_gb",
                                   "expected_utilisation"])
def test_the_form_takes_ascii_digits_only_like_the_api(client, lead, tenant, pools, field):
    from intake.models import CapacityRequest
    from tests.factories import request_fields

    client.force_login(lead)
    data = {k: ("" if v is None else v) for k, v in request_fields().items()}
    data.update({"tenant": tenant.pk, "intent": "draft", field: "١٠"})
    response = client.post(reverse("intake:new"), data)
    assert response.status_code == 200
    assert "A whole number in digits 0-9 is required." in response.content.decode()
    assert not CapacityRequest.objects.exists()


def test_the_review_queue_page_takes_ascii_digits_only(client, admin_user):
    client.force_login(admin_user)
    assert client.get(reverse("intake:review_queue"), {"page": "١"}).status_code == 400
    assert client.get(reverse("intake:review_queue"), {"page": "1"}).status_code == 200
