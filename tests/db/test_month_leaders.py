"""Finance's month so far (billing.figures.month_spend): the tenants with the most spend,
ties by name in code-point order then id, the same whether few or thousands are tied; the
total over every tenant, and the spend of the tenants asked for — on PostgreSQL as the
reference sort over every tenant's figure_sums says."""

import datetime as dt
import random
from decimal import Decimal

import pytest

from billing.figures import figure_sums, month_spend
from billing.models import Adjustment, Statement, TenantMonthTotal
from tests.factories import TenantFactory, make_platform_user

pytestmark = pytest.mark.django_db
MONTH = dt.date(2026, 11, 1)


def reference(spent, names, top):
    return sorted(spent, key=lambda t: (-spent[t], names[t], t))[:top]


@pytest.mark.parametrize("tied", [0, 2, 150])
def test_the_leaders_are_the_top_by_spend_then_name(tied, bare_pools):
    rng = random.Random(tied)
    pools = list(bare_pools.values())[:2]
    # Names that collations order differently ("B" before "a" in code points; "a-1" and
    # "a1" apart from "-").
    tenants = [TenantFactory(slug=f"l{i}", name=f"{rng.choice(['a', 'B', 'a-', 'é'])}{i}")
               for i in range(tied + 12)]
    amounts = {t.pk: Decimal(rng.randint(1, 9) * 10) for t in tenants[:12]}
    amounts |= {t.pk: Decimal(50) for t in tenants[12:]}  # many alike in the middle
    for t in tenants:  # split over two pools, and a month that is not this one
        TenantMonthTotal.objects.create(tenant=t, pool=pools[0], month=MONTH,
                                        amount=amounts[t.pk] - 1)
        TenantMonthTotal.objects.create(tenant=t, pool=pools[1], month=MONTH, amount=1)
        TenantMonthTotal.objects.create(tenant=t, pool=pools[1], month=dt.date(2026, 10, 1),
                                        amount=999)
    # An adjustment moves a tenant up the ranking (and into the total).
    closed = Statement.objects.create(tenant=tenants[-1], month=MONTH)
    Adjustment.objects.create(statement=closed, amount=Decimal("1000.00"), reason="re-bill",
                              by=make_platform_user("fin", "finance"))
    spent = {k[0]: v["amount"] for k, v in figure_sums(("tenant_id",), months=[MONTH]).items()}
    names = {t.pk: t.name for t in tenants}
    for top in (1, 3, 5, 20):
        got = month_spend(None, MONTH, top=top, of=[tenants[0].pk, 10**9])
        assert [t for t, _, _ in got.leaders] == reference(spent, names, top), top
        assert all(names[t] == name and spent[t] == v for t, v, name in got.leaders)
        assert got.total == sum(spent.values()) == sum(amounts.values()) + 1000
        assert got.of == {tenants[0].pk: spent[tenants[0].pk]}
    some = [t.pk for t in tenants[::3]]
    got = month_spend(some, MONTH, top=3)
    assert [t for t, _, _ in got.leaders] == reference({t: spent[t] for t in some}, names, 3)
    assert got.total == sum(spent[t] for t in some)


def test_no_spend_no_leaders(bare_pools):
    TenantFactory(slug="quiet")
    assert month_spend(None, MONTH, top=3) == month_spend([], MONTH, top=3, of=[1])
    got = month_spend(None, MONTH, top=3)
    assert (got.total, got.leaders, got.of) == (0, [], {})
