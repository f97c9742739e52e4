"""tenants.compiled: a query compiled once per distinct arguments answers exactly as the ORM
does each time it runs (rows written after it was compiled included), for each set of
arguments apart, with no ids at all, and after older sets were let go."""

from __future__ import annotations

import pytest

from tenants.compiled import compiled_per_arguments
from tenants.models import Tenant
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_compiled_per_arguments_answers_as_the_orm_does():
    built = []

    @compiled_per_arguments(keep=2)
    def names(ids: tuple[int, ...]):
        built.append(ids)
        return Tenant.objects.filter(pk__in=ids).values("pk", "name").order_by("pk")

    a, b, c = (TenantFactory(slug=s, name=s.title()) for s in ("a1", "b1", "c1"))

    def orm(ids):
        return list(Tenant.objects.filter(pk__in=ids).values("pk", "name").order_by("pk"))

    assert names((a.pk, b.pk)) == orm((a.pk, b.pk))
    Tenant.objects.filter(pk=b.pk).update(name="Renamed")
    assert names((a.pk, b.pk)) == orm((a.pk, b.pk))  # executed again, not remembered
    assert names((c.pk,)) == orm((c.pk,))
    assert names(()) == [] == orm(())
    assert built == [(a.pk, b.pk), (c.pk,), ()]  # compiled once per distinct arguments
    assert names((a.pk, b.pk)) == orm((a.pk, b.pk))  # let go (keep=2), compiled again
    assert built[-1] == (a.pk, b.pk) and len(built) == 4
