"""The pool that takes a route (intake.selectors.first_active_pool, read once per request by
every planner, the MIG offer and the form's profiles) is the database's first active pool of
that route and GPU model by name — whatever mix of routes, models, names and inactive pools
there is."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.domain import ALL_MIG_PROFILES
from fleet.models import Pool, RateCard, Route
from intake.selectors import first_active_pool, offered_mig_profiles
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db

MODELS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]
pool_st = st.fixed_dictionaries({
    "route": st.sampled_from(list(Route)), "gpu_model": st.sampled_from(MODELS),
    "name": st.sampled_from(["alpha", "beta", "gamma", "Delta"]), "active": st.booleans(),
    "mig_profiles": st.sampled_from([[], ["1g.10gb"], ["2g.20gb", "3g.40gb"]])})


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pools=st.lists(pool_st, max_size=8))
def test_the_route_pool_is_the_first_active_one_by_name(pools):
    RateCard.objects.all().delete()
    Pool.objects.all().delete()
    for i, p in enumerate(pools):
        PoolFactory(slug=f"p{i}", **p)
    for route in Route:
        for model in ["", *MODELS]:
            query = Pool.objects.filter(route=route, active=True)
            if model:
                query = query.filter(gpu_model=model)
            expected = query.order_by("name", "pk").first()
            found = first_active_pool(route, model)
            assert (found.pk if found else None) == (expected.pk if expected else None) or (
                found.name == expected.name)  # names alike: either is the first by name
    offered = {name for p in pools if p["active"] and p["route"] == Route.MIG_VCLUSTER
               for name in p["mig_profiles"]}
    fractions = {p.name for p in ALL_MIG_PROFILES.values() if p.is_fraction}
    assert {p.name for p in offered_mig_profiles()} == (
        offered & fractions if offered else fractions)
