"""The finance overview's "top this month": the tenants with the most spend, ties by name,
the same whether few or thousands are tied (names are then read in name order, not by id)."""

import random
from decimal import Decimal

import pytest

from billing.budgets import _leaders
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def reference(spent, names, top):
    return sorted(spent, key=lambda t: (-spent[t], names[t], t))[:top]


@pytest.mark.parametrize("tied", [0, 2, 150])
def test_the_leaders_are_the_top_by_spend_then_name(tied):
    rng = random.Random(tied)
    tenants = [TenantFactory(slug=f"l{i}", name=f"{rng.choice('abcxyz')}-{i}")
               for i in range(tied + 12)]
    spent = {t.pk: Decimal(rng.randint(1, 9) * 10) for t in tenants[:12]}
    spent |= {t.pk: Decimal(50) for t in tenants[12:]}  # many alike in the middle
    names = {t.pk: t.name for t in tenants}
    for top in (1, 3, 5, 20):
        got = _leaders(spent, top)
        assert [t for t, _, _ in got] == reference(spent, names, top), top
        assert all(names[t] == name and spent[t] == v for t, v, name in got)


def test_no_spend_no_leaders():
    assert _leaders({}, 3) == []
