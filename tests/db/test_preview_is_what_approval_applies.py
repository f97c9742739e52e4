"""One plan: for every route, the objects the review page previews are exactly the objects
approval applies (the allocation's own id, unknown before approval, aside)."""

import re

import pytest

from fleet.allocations.admission import CHECK_KEY, CHECK_PARAMS_PREFIX, check_params_name
from fleet.allocations.desired import allocation_manifests
from fleet.inventory.sync import fleet_sync
from fleet.kube import LABEL_ALLOCATION, DryRunBackend
from fleet.models import Pool, Route
from intake import services
from intake.preview import request_manifests
from portal.demo_fleet import demo_fleet
from tests.factories import make_request

pytestmark = pytest.mark.django_db

ANSWERS = {
    Route.SHARED_POOL: {"whole_devices": 4},
    Route.DEDICATED_BLOCK: {"whole_devices": 8, "isolation_origin": "contractual",
                            "isolation_reference": "MSA-77"},
    Route.CONFIDENTIAL_POOL: {"device_fill": "small", "replicas": 2, "whole_devices": 0,
                              "mig_profile": "1g.10gb", "isolation_origin": "regulatory",
                              "isolation_reference": "GDPR art. 9"},
    Route.MIG_VCLUSTER: {"device_fill": "small", "replicas": 3, "whole_devices": 0,
                         "mig_profile": "2g.20gb"},
}


@pytest.fixture
def synced_fleet(pools):
    """The demo fleet, synced: a dedicated block then chooses real nodes."""
    slugs = {Route.SHARED_POOL: "shared-h100", Route.DEDICATED_BLOCK: "dedicated-h100",
             Route.CONFIDENTIAL_POOL: "confidential-h100", Route.MIG_VCLUSTER: "mig-a100"}
    for route, slug in slugs.items():
        Pool.objects.filter(pk=pools[route].pk).update(slug=slug)
    backend = DryRunBackend()
    for obj in demo_fleet():
        backend.apply(obj)
    fleet_sync(backend=backend)
    return backend


def _without_allocation_id(manifests: list[dict], allocation_id: int) -> list[dict]:
    def walk(value, key=""):
        if isinstance(value, dict):
            # the guards' params key the check entry by the allocation
            return {(k.replace(f".{allocation_id}", ".<allocation>")
                     if k.startswith(CHECK_KEY) else k):
                    ("<allocation>" if k == LABEL_ALLOCATION and v == str(allocation_id)
                     else walk(v, k))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and key == "name" and value == check_params_name(allocation_id):
            return f"{CHECK_PARAMS_PREFIX}<allocation>"  # its own check params
        if isinstance(value, str) and key.startswith(CHECK_KEY):
            # the check entry is a digest of what the guards protect, named by allocation
            return re.sub(r"^[0-9a-f]{12}$", "<guards>", value)
        return value
    return [walk(m) for m in manifests]


@pytest.mark.parametrize("route", list(ANSWERS))
def test_the_review_preview_is_exactly_what_approval_applies(route, tenant, lead, admin_user,
                                                              synced_fleet):
    req = make_request(tenant, lead, submit=True, **ANSWERS[route])
    assert req.route == route
    previewed = request_manifests(req)
    assert previewed, "the review page must show objects"
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    applied = allocation_manifests(req.allocation)
    assert _without_allocation_id(previewed, 0) == \
        _without_allocation_id(applied, req.allocation.pk)
    if route is Route.DEDICATED_BLOCK:
        nodes = sorted(m["metadata"]["name"] for m in applied if m["kind"] == "Node")
        assert nodes and nodes == sorted(req.allocation.nodes.values_list("name", flat=True))


def test_approval_plans_once(tenant, lead, admin_user, pools, monkeypatch):
    """`request_approve` sizes, prices and fits the request a single time (under the lock)."""
    from intake import selectors

    calls = []
    real = selectors.plan_request
    monkeypatch.setattr(selectors, "plan_request",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    req = make_request(tenant, lead, submit=True)
    calls.clear()
    services.request_approve(request=req, by=admin_user, reason="ok")
    assert len(calls) == 1


OVERRIDES = [(Route.SHARED_POOL, Route.DEDICATED_BLOCK), (Route.SHARED_POOL,
             Route.CONFIDENTIAL_POOL), (Route.MIG_VCLUSTER, Route.SHARED_POOL),
             (Route.DEDICATED_BLOCK, Route.SHARED_POOL)]


@pytest.mark.parametrize(("matrix", "chosen"), OVERRIDES)
def test_the_override_preview_is_exactly_what_approval_with_it_applies(
        matrix, chosen, tenant, lead, admin_user, synced_fleet):
    """Issue #46: under an override the review page listed the matrix route's objects while
    approval applied the chosen route's. The preview of the route chosen is now what
    approval with that override applies, object for object."""
    req = make_request(tenant, lead, submit=True, **ANSWERS[matrix])
    assert req.route == matrix
    previewed = request_manifests(req, chosen.value)
    assert previewed and previewed != request_manifests(req)
    req = services.request_approve(request=req, by=admin_user, reason="ok",
                                   override_route=chosen.value,
                                   override_reason="the tenant asked for it")
    assert req.allocation.route == chosen
    assert _without_allocation_id(previewed, 0) == \
        _without_allocation_id(allocation_manifests(req.allocation), req.allocation.pk)


def test_an_override_the_request_cannot_take_is_said_not_previewed(tenant, lead, synced_fleet):
    """A MIG override of a request sized in whole devices has no objects, and says why."""
    from intake.preview import request_objects

    req = make_request(tenant, lead, submit=True, **ANSWERS[Route.SHARED_POOL])
    objects = request_objects(req, platform_admin=True, override_route=Route.MIG_VCLUSTER)
    assert objects["docs"] == [] and "MIG profile" in objects["why"]
    # Someone else's view, or a route that is not one, is the request's own objects.
    own = request_objects(req, platform_admin=True)
    assert request_objects(req, platform_admin=False, override_route=Route.DEDICATED_BLOCK
                           )["override"] == ""
    nonsense = request_objects(req, platform_admin=True, override_route="nonsense")
    assert nonsense["docs"] == [] and "not a route" in nonsense["why"]
    assert own["docs"] and own["override"] == ""
