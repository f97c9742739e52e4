"""Pools and rate cards: admins change them (validated, audited); others cannot."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import RateCard, Statement
from fleet.forms import label_errors
from fleet.inventory.pricing import pool_rate
from fleet.models import Pool, Route
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db


def pool_post(pool, **kw):
    data = {"name": pool.name, "gpu_model": pool.gpu_model, "gpu_memory_gb": 80,
            "devices_per_node": 8, "capacity_devices": 32,
            "node_selector": '{"aifactory.io/pool": "shared"}', "device_class": "gpu.nvidia.com",
            "mig_profiles": "", "cohort": "shared-h100",
            "borrowing_limit_devices": 8, "rate_per_device_hour": "2.50", "active": "on"}
    data.update(kw)
    return data


@pytest.mark.parametrize("who", ["lead", "member", "finance"])
def test_pools_are_for_admins(client, request, pools, who):
    user = request.getfixturevalue({"lead": "lead", "member": "member",
                                    "finance": "finance_user"}[who])
    client.force_login(user)
    assert client.get(reverse("fleet:pools")).status_code == 403
    assert client.post(reverse("fleet:pool_edit", args=["shared"]),
                       pool_post(pools[Route.SHARED_POOL])).status_code == 403


def test_admin_edits_a_pool_with_validation_and_audit(client, admin_user, pools):
    client.force_login(admin_user)
    shared = pools[Route.SHARED_POOL]
    url = reverse("fleet:pool_edit", args=["shared"])
    bad = client.post(url, pool_post(shared, node_selector='{"not a key!": "x"}'))
    assert bad.status_code == 200 and b"is not a valid label key" in bad.content
    bad = client.post(url, pool_post(shared, cohort="", borrowing_limit_devices=4))
    assert b"needs a cohort" in bad.content
    ok = client.post(url, pool_post(shared, capacity_devices=48))
    assert ok.status_code == 302
    assert Pool.objects.get(pk=shared.pk).capacity_devices == 48
    assert "capacity_devices" in AuditEvent.objects.get(action="pool.updated").reason


def test_label_syntax():
    assert label_errors({"aifactory.io/pool": "shared-h100", "nvidia.com/gpu.product":
                         "NVIDIA-H100-80GB-HBM3"}) == []
    assert label_errors({"a b": "x"}) and label_errors({"k": "bad value!"})


def test_admin_adds_a_rate_and_the_pool_rate_follows_when_it_is_in_force(client, admin_user,
                                                                          finance_user, pools):
    client.force_login(finance_user)
    assert client.get(reverse("billing:rates")).status_code == 200
    assert client.post(reverse("billing:rates"), {}).status_code == 403
    client.force_login(admin_user)
    past = (timezone.now() - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    shared = Pool.objects.get(slug="shared")
    cards = RateCard.objects.filter(pool=shared).count()
    # A back-dated rate re-prices hours already billed: asked first, nothing recorded yet.
    asked = client.post(reverse("billing:rates"), {"pool": "shared", "rate": "3.10",
                                                   "effective_from": past})
    assert asked.status_code == 200
    assert b"It starts in the past" in asked.content and b"Record it anyway?" in asked.content
    assert b'name="reprice_confirmed" value="yes"' in asked.content
    assert b'value="3.10"' in asked.content  # what was typed is kept
    assert RateCard.objects.filter(pool=shared).count() == cards
    # A bad rate is refused for itself, not asked about.
    bad_past = client.post(reverse("billing:rates"), {"pool": "shared", "rate": "-1",
                                                      "effective_from": past})
    assert b"cannot be negative" in bad_past.content and b"Record it anyway" not in \
        bad_past.content
    back = client.post(reverse("billing:rates"), {"pool": "shared", "rate": "3.10",
                                                  "effective_from": past,
                                                  "reprice_confirmed": "yes"}, follow=True)
    assert b"It starts in the past" in back.content and b"re-priced" in back.content
    assert b"1970" not in back.content  # the first card holds from the start
    assert RateCard.objects.filter(pool=shared).count() == cards + 1
    assert pool_rate(shared.pk) == Decimal("3.10")  # the one price, in force now
    future_at = timezone.now() + dt.timedelta(days=30)
    future = future_at.strftime("%Y-%m-%dT%H:%M")
    client.post(reverse("billing:rates"), {"pool": "shared", "rate": "4.00",
                                           "effective_from": future})
    assert pool_rate(shared.pk) == Decimal("3.10")
    assert pool_rate(shared.pk, future_at + dt.timedelta(minutes=1)) == Decimal("4.00")
    bad = client.post(reverse("billing:rates"), {"pool": "shared", "rate": "abc",
                                                 "effective_from": future})
    assert b"must be a number" in bad.content and b'value="abc"' in bad.content


def test_a_rate_cannot_start_inside_a_closed_month(client, admin_user, tenant, pools):
    Statement.objects.create(tenant=tenant, month=dt.date(2026, 1, 1),
                             closed_at=timezone.now())
    client.force_login(admin_user)
    response = client.post(reverse("billing:rates"), {
        "pool": "shared", "rate": "1.00", "effective_from": "2026-01-15T00:00"})
    # the closed month named, with the first day a rate may start (it said "… or a later
    # month is closed already" of a month that was open)
    assert b"January 2026 is closed, and a rate from 2026-01-15 00:00 UTC would re-price it" \
        in response.content and b"2026-02-01 or later" in response.content
    assert not RateCard.objects.filter(rate_per_device_hour=Decimal("1.00")).exists()


def test_the_pool_rate_has_one_owner_the_rate_card(client, admin_user, pools):
    """The pool form cannot set a rate (a card would silently put it back); the pool page
    shows the card's rate, read-only, with the way to change it."""
    client.force_login(admin_user)
    shared = pools[Route.SHARED_POOL]
    before = pool_rate(shared.pk)
    url = reverse("fleet:pool_edit", args=["shared"])
    assert client.post(url, pool_post(shared, rate_per_device_hour="99.00")).status_code == 302
    assert pool_rate(shared.pk) == before
    page = client.get(url).content.decode()
    assert 'name="rate_per_device_hour"' not in page
    assert reverse("billing:rates") in page and "rate card in force" in page
    client.post(reverse("billing:rates"), {"pool": "shared", "rate": "3.30",
                                           "effective_from": "2020-01-01T00:00",
                                           "reprice_confirmed": "yes"})
    assert pool_rate(shared.pk) == Decimal("3.30")
    assert "3.30" in client.get(url).content.decode()


def test_one_writer_of_rate_cards_for_a_new_pool_and_a_new_price(admin_user, pools):
    """A pool's first price and a later one go through the same writer and its checks."""
    from billing.services import BillingError, ratecard_create
    from fleet.domain import FleetError
    from fleet.inventory.pricing import BEGINNING
    from fleet.inventory.services import rate_card_create

    shared = pools[Route.SHARED_POOL]
    with pytest.raises(FleetError, match="has a price already"):
        rate_card_create(pool=shared, rate=Decimal("9"), by=admin_user)  # a second "first"
    later = timezone.now() + dt.timedelta(days=3)
    for bad, words in [("-1", "cannot be negative"), ("1.23456", "4 decimal places"),
                       ("abc", "The rate")]:
        with pytest.raises(FleetError, match=words):
            rate_card_create(pool=shared, rate=bad, by=admin_user, effective_from=later)
        with pytest.raises(BillingError, match=words):  # the rate page: the same checks
            ratecard_create(pool=shared, rate=bad, by=admin_user, effective_from=later)
    with pytest.raises(BillingError, match="within ten years"):
        ratecard_create(pool=shared, rate="3", by=admin_user,
                        effective_from=timezone.now() + dt.timedelta(days=4000))
    fresh = Pool.objects.create(slug="fresh", name="Fresh", route=Route.SHARED_POOL,
                                gpu_model=shared.gpu_model)
    card = rate_card_create(pool=fresh, rate="1.10", by=admin_user)
    assert card.effective_from == BEGINNING and pool_rate(fresh.pk) == Decimal("1.10")
    assert AuditEvent.objects.filter(action="rate.created").latest("pk").reason == \
        "Fresh: 1.1000 per device-hour from the beginning."
