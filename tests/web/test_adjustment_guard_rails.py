"""Finance's guard rails on adjustments (issue #46): a credit beyond the bill is refused on
its amount until confirmed with the new final in view, and an adjustment is withdrawn by a
new entry (never an edit or a delete) that the statement, its CSV and PDF, the FOCUS export
and the API all count alike."""

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse
from pypdf import PdfReader

from billing.models import Adjustment
from billing.services import BillingError, adjustment_withdraw, statement_close
from tenants.models import AuditEvent
from tests.factories import LAST_MONTH

pytestmark = [pytest.mark.django_db, pytest.mark.web]
MONTH = f"{LAST_MONTH:%Y-%m}"


@pytest.fixture
def closed(billed, finance_user):
    """Acme's last month closed at EUR 10.00."""
    return statement_close(tenant=billed[0].tenant, month=LAST_MONTH, by=finance_user)


def _final(client) -> Decimal:
    return client.get(reverse("billing:statement", args=["acme", MONTH])).context["final"]


def test_a_credit_beyond_the_bill_is_refused_on_its_field_until_confirmed(client, closed,
                                                                          finance_user):
    client.force_login(finance_user)
    url = reverse("billing:adjust", args=["acme", MONTH])
    refused = client.post(url, {"amount": "-50000", "reason": "Refund of the prepayment"})
    assert refused.status_code == 400 and not Adjustment.objects.exists()
    body = refused.content.decode()
    # On the amount's field, with the new final; what was typed kept; the checkbox offered,
    # carrying the amount it confirms.
    assert 'id="id_amount_error"' in body and "EUR\u00a0-49,990.00" in body
    assert "below zero" in body and 'value="Refund of the prepayment"' in body
    assert 'name="confirm" value="-50000.00"' in body
    # A confirmation of another amount is no confirmation.
    stale = client.post(url, {"amount": "-60000", "reason": "Refund", "confirm": "-50000.00"})
    assert stale.status_code == 400 and not Adjustment.objects.exists()
    taken = client.post(url, {"amount": "-50000", "reason": "Refund of the prepayment",
                              "confirm": "-50000.00"}, follow=True)
    assert taken.status_code == 200 and "EUR\u00a0-49,990.00" in taken.content.decode()
    event = AuditEvent.objects.get(action="statement.adjusted")
    assert "(confirmed)" in event.reason and "10.00 → -49990.00" in event.reason
    assert event.data["confirmed"] is True


def test_the_api_asks_the_same_confirmation(client, closed, finance_user):
    client.force_login(finance_user)
    key = f"acme:{MONTH}"
    refused = client.post(f"/api/billing/{key}/adjust/", {"amount": "-6", "reason": "Goodwill"},
                          content_type="application/json")
    assert refused.status_code == 400
    assert "EUR\u00a04.00" in refused.json()["extra"]["fields"]["amount"][0]
    taken = client.post(f"/api/billing/{key}/adjust/",
                        {"amount": "-6", "reason": "Goodwill", "confirm": "-6.00"},
                        content_type="application/json")
    assert taken.status_code == 200 and taken.json()["figures"]["final"] == "4.00"


def test_a_withdrawn_adjustment_leaves_every_number_as_before(client, closed, finance_user,
                                                              lead):
    client.force_login(finance_user)
    client.post(reverse("billing:adjust", args=["acme", MONTH]),
                {"amount": "-2.50", "reason": "Credit for the outage"})
    adjustment = Adjustment.objects.get()
    assert _final(client) == Decimal("7.50")
    page = client.get(reverse("billing:statement", args=["acme", MONTH])).content.decode()
    withdraw = reverse("billing:withdraw", args=["acme", MONTH, adjustment.pk])
    assert f'action="{withdraw}"' in page and "the final becomes <strong>EUR\u00a010.00" in page

    # A reason is required; nothing is written without one.
    assert client.post(withdraw, {"reason": " "}).status_code == 400
    assert Adjustment.objects.count() == 1
    done = client.post(withdraw, {"reason": "The outage was on another tenant's node"},
                       follow=True)
    assert "withdrawn" in done.content.decode()
    original, withdrawal = Adjustment.objects.order_by("pk")
    assert (original.amount, withdrawal.amount) == (Decimal("-2.50"), Decimal("2.50"))
    assert withdrawal.withdraws == original and original.reason == "Credit for the outage"
    assert AuditEvent.objects.filter(action="statement.adjustment_withdrawn").count() == 1
    # Append-only: neither can be edited or deleted.
    with pytest.raises(TypeError):
        original.delete()
    with pytest.raises(TypeError):
        Adjustment.objects.filter(pk=original.pk).update(amount=0)
    # Once only, and a withdrawal is not itself withdrawn.
    assert client.post(withdraw, {"reason": "again"}).status_code == 400
    with pytest.raises(BillingError, match="itself a withdrawal"):
        adjustment_withdraw(adjustment=withdrawal, by=finance_user, reason="undo")
    assert Adjustment.objects.count() == 2

    # Every number agrees: the final is the total again, everywhere.
    assert _final(client) == Decimal("10.00")
    rows = list(csv.DictReader(io.StringIO(client.get(
        reverse("billing:statement", args=["acme", MONTH]) + "?format=csv").content.decode())))
    assert [r["kind"] for r in rows] == ["line", "total", "adjustment", "withdrawal", "final"]
    assert rows[-1]["amount"] == "10.00" and rows[3]["amount"] == "2.50"
    assert rows[3]["description"].startswith("Withdrawal of the EUR\u00a0-2.50 adjustment")
    pdf = client.get(reverse("billing:statement", args=["acme", MONTH]) + "?format=pdf")
    text = " ".join(" ".join(p.extract_text() for p in PdfReader(
        io.BytesIO(pdf.content)).pages).split())
    assert "Final: EUR 10.00" in text and "Withdrawal of the EUR" in text
    focus = list(csv.DictReader(io.StringIO(client.get(
        reverse("billing:overview"), {"months": 3, "format": "focus"}).content.decode())))
    acme = [r for r in focus if r["SubAccountId"] == "acme"]
    assert sum(Decimal(r["BilledCost"]) for r in acme) == Decimal("10.00")
    assert [r["BilledCost"] for r in acme if r["ChargeCategory"] == "Adjustment"] == \
        ["-2.50", "2.50"]
    api = client.get(f"/api/billing/acme:{MONTH}/").json()
    assert api["figures"]["final"] == "10.00" and api["figures"]["adjustments"] == "0.00"
    assert [(a["id"], a["kind"], a["withdraws"], a["withdrawn_by"])
            for a in api["adjustments"]] == [
        (original.pk, "adjustment", None, withdrawal.pk),
        (withdrawal.pk, "withdrawal", original.pk, None)]
    overview = list(csv.DictReader(io.StringIO(client.get(
        reverse("billing:overview"), {"months": 3, "format": "csv"}).content.decode())))
    assert [r["amount"] for r in overview if r["tenant"] == "acme" and r["month"] == MONTH] \
        == ["10.00"]
    # The lead reads it too, and cannot withdraw.
    client.force_login(lead)
    assert "withdrawn" in client.get(reverse("billing:statement", args=["acme", MONTH])
                                     ).content.decode()
    assert client.post(withdraw, {"reason": "mine"}).status_code == 403


def test_the_api_withdraws_an_adjustment(client, closed, finance_user):
    client.force_login(finance_user)
    key = f"acme:{MONTH}"
    client.post(f"/api/billing/{key}/adjust/", {"amount": "-1.00", "reason": "Goodwill"},
                content_type="application/json")
    adjustment = Adjustment.objects.get()
    missing = client.post(f"/api/billing/{key}/withdraw/", {"adjustment": adjustment.pk},
                          content_type="application/json")
    assert missing.status_code == 400 and "reason" in missing.json()["extra"]["fields"]
    done = client.post(f"/api/billing/{key}/withdraw/",
                       {"adjustment": adjustment.pk, "reason": "Entered twice"},
                       content_type="application/json")
    assert done.status_code == 200 and done.json()["figures"]["final"] == "10.00"
    again = client.post(f"/api/billing/{key}/withdraw/",
                        {"adjustment": adjustment.pk, "reason": "Entered twice"},
                        content_type="application/json")
    assert again.status_code == 400 and "withdrawn already" in again.json()["message"]
