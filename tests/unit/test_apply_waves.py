"""Provisioning applies an allocation's objects in waves that may run in parallel: nothing
lost or doubled, guard rails first (the params and every policy before every binding, the
check's policy and then its binding last and alone), the namespace and cluster-scoped
objects before anything inside the namespace, access last."""

import pytest

from fleet.allocations.admission import is_guard_params
from fleet.allocations.guard_check import is_guard_check
from fleet.allocations.manifests import apply_waves, is_guard_object, render_manifests
from fleet.domain import Route
from tests.factories import spec

pytestmark = pytest.mark.unit


def key(m: dict) -> tuple:
    return (m["apiVersion"], m["kind"], m["metadata"].get("namespace", ""),
            m["metadata"]["name"])


@pytest.mark.parametrize("route", list(Route))
@pytest.mark.parametrize("nodes", [(), ("gpu-a", "gpu-b")])
def test_waves_keep_every_object_once_in_a_safe_order(route, nodes):
    manifests = render_manifests(spec(route, nodes=nodes)
                                 if route == Route.DEDICATED_BLOCK else spec(route))
    waves = apply_waves(manifests)
    flat = [m for w in waves for m in w]
    assert sorted(map(key, flat)) == sorted(map(key, manifests))
    position = {key(m): i for i, w in enumerate(waves) for m in w}
    guards = [m for m in manifests if is_guard_object(m)]
    checks = [m for m in guards if is_guard_check(m)]
    rails = [m for m in guards if not is_guard_check(m)]
    first_binding = min((position[key(m)] for m in rails
                         if m["kind"] == "ValidatingAdmissionPolicyBinding"), default=None)
    assert all(position[key(m)] < first_binding for m in rails
               if m["kind"] == "ValidatingAdmissionPolicy")  # a binding follows its policy
    # ...and its params: a binding whose params are missing refuses everything.
    assert all(position[key(m)] < first_binding for m in rails if is_guard_params(m))
    if guards:
        policy, binding = sorted(checks, key=lambda m: m["kind"])
        assert policy["kind"] == "ValidatingAdmissionPolicy"
        assert waves[position[key(policy)]] == [policy]  # alone
        assert waves[position[key(binding)]] == [binding]
        assert position[key(binding)] == position[key(policy)] + 1
        # the check last in both watches: after every other guard (and before the rest,
        # asserted below)
        assert all(position[key(m)] < position[key(policy)] for m in rails)
    ns = next(m for m in manifests if m["kind"] == "Namespace")
    for m in manifests:
        if is_guard_object(m):
            continue
        assert position[key(m)] > max((position[key(g)] for g in guards), default=-1)
        if m["metadata"].get("namespace"):
            assert position[key(m)] > position[key(ns)]
        if m["kind"] == "LocalQueue":
            cq = next(c for c in manifests if c["kind"] == "ClusterQueue")
            assert position[key(m)] > position[key(cq)]
    bindings = [m for m in manifests if m["kind"] == "RoleBinding"]
    assert bindings and all(position[key(b)] == len(waves) - 1 for b in bindings)
    assert all(m["kind"] == "RoleBinding" for m in waves[-1])
