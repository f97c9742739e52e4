"""An allocation's guards are in force before anything after them is applied: the shared
check comes after every guard, refuses only a probe whose allocation's entry the params
hold, names the shared guards it follows by fingerprint, and provisioning dry-runs the probe
until the API server refuses it.

The loop is tried here against a scripted answerer (what a real API server says is tried in
tests/k8s/test_hostile_specs.py, where hostile pods are refused the moment an allocation is
active)."""

import pytest

from fleet.allocations.admission import (
    CHECK_KEY,
    CHECK_RULES,
    GUARDS_LABEL,
    guard_policy_name,
    is_guard_params,
    older_guards,
)
from fleet.allocations.guard_check import (
    GUARD_CHECK,
    GUARD_DIGEST_LABEL,
    GUARD_FINGERPRINT_LABEL,
    GUARD_PROBE_LABEL,
    UNSTAMPED,
    guard_check_answer,
    guard_probe,
    guards_fingerprint,
    is_guard_check,
    is_shared_guard,
    stamp_guard_check,
)
from fleet.allocations.guards import guards_in_force
from fleet.allocations.manifests import apply_waves, is_guard_object, render_manifests
from fleet.domain import Route
from fleet.kube import DryRunBackend, KubeError
from tests.factories import spec

pytestmark = pytest.mark.unit


def _manifests(route, nodes=("gpu-a", "gpu-b")):
    return render_manifests(spec(route, nodes=nodes) if route == Route.DEDICATED_BLOCK
                            else spec(route))


@pytest.mark.parametrize("route", list(Route))
def test_a_guarded_route_ends_its_guards_with_the_check(route):
    manifests = _manifests(route)
    guards = [m for m in manifests if is_guard_object(m)]
    probe = guard_probe(manifests)
    if route not in (Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL):
        assert guards == [] and probe is None
        return
    # Policy then binding of the check, after every other guard and before anything else.
    assert [m["metadata"]["name"] for m in guards[-2:]] == [GUARD_CHECK] * 2
    assert [m["kind"] for m in guards[-2:]] == ["ValidatingAdmissionPolicy",
                                                "ValidatingAdmissionPolicyBinding"]
    waves = apply_waves(manifests)
    # Applied in waves: the params with the rails' policies, their bindings, then the check
    # alone (policy, binding); every guard before anything else.
    guard_waves = [w for w in waves if is_guard_object(w[0])]
    assert waves[:len(guard_waves)] == guard_waves
    assert sorted(map(str, (m for w in guard_waves for m in w))) == sorted(map(str, guards))
    assert guard_waves[-2:] == [[guards[-2]], [guards[-1]]]
    # The check evaluates only namespaces labelled as a probe: real namespaces are not even
    # evaluated (objectSelector), and the probe is never created (dry-run). It refuses when
    # the params hold the probe's allocation's check entry with the probe's digest.
    check = guards[-2]["spec"]
    assert {e["key"] for e in check["matchConstraints"]["objectSelector"][
        "matchExpressions"]} == {GUARD_PROBE_LABEL, GUARD_DIGEST_LABEL}
    assert probe["kind"] == "Namespace"
    params = next(m for m in guards if is_guard_params(m))
    digest = params["spec"]["entries"][f"{CHECK_KEY}{spec(route).allocation_id}"]
    assert probe["metadata"]["labels"] == {
        GUARD_PROBE_LABEL: str(spec(route).allocation_id), GUARD_DIGEST_LABEL: digest,
        GUARD_FINGERPRINT_LABEL: UNSTAMPED}
    assert CHECK_KEY in check["validations"][0]["expression"]


def test_the_shared_guards_are_the_same_for_every_allocation_of_a_route():
    """Two blocks of two tenants render the same policies and bindings, and differ only in
    their check entries: an added allocation costs the API server no expression and no data
    any rule reads (only the check reads params, and only for its probes)."""
    one = render_manifests(spec(Route.DEDICATED_BLOCK, nodes=("gpu-a",)))
    two = render_manifests(spec(Route.DEDICATED_BLOCK, nodes=("gpu-b", "gpu-c"),
                                tenant="globex", allocation_id=99))
    shared = [m for m in one if is_guard_object(m) and not is_guard_params(m)]
    assert shared == [m for m in two if is_guard_object(m) and not is_guard_params(m)]
    assert all("gpu-" not in str(m) and "globex" not in str(m) for m in shared)
    assert [m["metadata"]["name"] for m in shared if "paramKind" in m["spec"]] == [
        GUARD_CHECK]
    entries = [next(m for m in x if is_guard_params(m))["spec"]["entries"] for x in (one, two)]
    assert list(entries[1]) == [f"{CHECK_KEY}99"]
    assert set(entries[0]).isdisjoint(set(entries[1]))


@pytest.mark.parametrize("route", [Route.DEDICATED_BLOCK, Route.CONFIDENTIAL_POOL])
def test_the_nodes_and_the_access_come_in_waves_of_their_own_after_the_rest(route):
    """Provisioning waits for the guards before the first wave with a block's node or a
    RoleBinding: those waves hold nothing else, and nothing comes after them."""
    from fleet.allocations.manifests import AFTER_GUARDS_KINDS

    waves = apply_waves(_manifests(route))
    kinds = [{m["kind"] for m in w} for w in waves]
    first = next(i for i, k in enumerate(kinds) if k & AFTER_GUARDS_KINDS)
    assert all(k <= AFTER_GUARDS_KINDS for k in kinds[first:])
    assert not any(k & AFTER_GUARDS_KINDS for k in kinds[:first])
    assert kinds[-1] == {"RoleBinding"}
    if route == Route.DEDICATED_BLOCK:
        assert kinds[first] == {"Node"}


def test_the_digest_follows_the_entries():
    """A block moved to other nodes changes its entries, so its check entry changes: a
    probe of the entries as they were is not taken for the new ones."""
    one = guard_probe(_manifests(Route.DEDICATED_BLOCK, ("gpu-a", "gpu-b")))
    same = guard_probe(_manifests(Route.DEDICATED_BLOCK, ("gpu-a", "gpu-b")))
    moved = guard_probe(_manifests(Route.DEDICATED_BLOCK, ("gpu-a", "gpu-c")))
    d = GUARD_DIGEST_LABEL
    assert one["metadata"]["labels"][d] == same["metadata"]["labels"][d]
    assert one["metadata"]["labels"][d] != moved["metadata"]["labels"][d]


def _refusal(probe, digest=None, fingerprint=None):
    labels = probe["metadata"]["labels"]
    digest = digest or labels[GUARD_DIGEST_LABEL]
    fingerprint = fingerprint or labels[GUARD_FINGERPRINT_LABEL]
    name, owner = probe["metadata"]["name"], labels[GUARD_PROBE_LABEL]
    return (f"Applying Namespace {name}: namespaces \"{name}\" is forbidden: "
            f"ValidatingAdmissionPolicy '{GUARD_CHECK}' with binding '{GUARD_CHECK}' denied "
            f"request: {GUARD_CHECK} [{fingerprint}]: the guards of {owner} (digest {digest}) "
            "are in force.")


class Answers(DryRunBackend):
    """Accepts the probe `accepting` times, then answers with `then` (a KubeError)."""

    enforces_admission = True

    def __init__(self, accepting: int, then: KubeError | None):
        super().__init__()
        self.accepting, self.then, self.asked = accepting, then, []

    def apply(self, manifest, *, dry_run=False, force=False, field_manager=""):
        self.asked.append(dry_run)
        if self.accepting > 0 or self.then is None:
            self.accepting -= 1
            return manifest
        raise self.then


PROBE = guard_probe(_manifests(Route.CONFIDENTIAL_POOL))


def test_provisioning_waits_until_the_check_refuses_its_probe():
    backend = Answers(3, KubeError(_refusal(PROBE), retriable=False, status=422))
    waited = guards_in_force(backend, PROBE, timeout=5)
    assert backend.asked == [True] * 4  # dry-run only, asked until refused
    assert 0 < waited < 5


def test_an_older_checks_refusal_is_not_taken_for_the_new_guards():
    """The shared guards were just made again: the check as it was stamped before still
    answers for a moment. That is "not yet", not an answer."""
    stale = KubeError(_refusal(PROBE, fingerprint="0123abcd"), retriable=False, status=422)
    assert guard_check_answer(PROBE, 422, stale.message) == "older"
    assert guard_check_answer(PROBE, 422, _refusal(PROBE)) == "current"
    backend = Answers(0, stale)
    with pytest.raises(KubeError) as raised:
        guards_in_force(backend, PROBE, timeout=0.3)
    assert raised.value.retriable and "not in force" in raised.value.message
    assert len(backend.asked) >= 2

    class ThenCurrent(Answers):
        def apply(self, manifest, *, dry_run=False, force=False, field_manager=""):
            self.asked.append(dry_run)
            raise stale if len(self.asked) < 3 else \
                KubeError(_refusal(PROBE), retriable=False, status=422)

    backend = ThenCurrent(0, None)
    assert guards_in_force(backend, PROBE, timeout=5) > 0 and len(backend.asked) == 3


def test_another_admission_controls_refusal_is_not_yet_and_said_if_it_lasts():
    """A cluster policy refusing namespaces without some label answers the probe before the
    check is compiled (and may be quoted instead of it): provisioning keeps asking, and if
    it lasts says so in a retriable error."""
    other = KubeError("Applying Namespace x: admission webhook \"validate.kyverno.svc\" "
                      "denied the request: label team is required", retriable=False, status=400)
    assert guard_check_answer(PROBE, 400, other.message) == "other"
    backend = Answers(0, other)
    with pytest.raises(KubeError) as raised:
        guards_in_force(backend, PROBE, timeout=0.3)
    assert raised.value.retriable and "label team is required" in raised.value.message
    assert len(backend.asked) >= 2


def test_the_check_as_applied_names_the_guards_as_they_live():
    """A shared guard deleted and made again has the same content but a new uid: the check
    as applied changes with it (policy and binding both), so an old check's refusal cannot
    pass for the new guards'."""
    manifests = _manifests(Route.DEDICATED_BLOCK)
    guards = [m for m in manifests if is_shared_guard(m)]
    checks = [m for m in manifests if is_guard_check(m)]
    live = [{**g, "metadata": {**g["metadata"], "uid": f"u{i}", "generation": 1}}
            for i, g in enumerate(guards)]
    again = [dict(live[0], metadata={**live[0]["metadata"], "uid": "new"}), *live[1:]]
    one, two = guards_fingerprint(live), guards_fingerprint(again)
    assert one != two and one == guards_fingerprint(list(reversed(live)))
    stamped = [stamp_guard_check(c, one) for c in checks]
    assert stamped != [stamp_guard_check(c, two) for c in checks]
    assert [stamp_guard_check(m, one) for m in guards] == guards  # only the check changes
    probe = guard_probe(manifests, one)
    assert probe["metadata"]["labels"][GUARD_FINGERPRINT_LABEL] == one
    # the binding selects only a probe of this fingerprint; the policy's message quotes it
    policy, binding = stamped
    assert binding["spec"]["matchResources"]["objectSelector"]["matchLabels"] == {
        GUARD_FINGERPRINT_LABEL: one}
    assert binding["spec"]["paramRef"] == checks[1]["spec"]["paramRef"]
    assert f"[{one}]" in policy["spec"]["validations"][0]["messageExpression"]
    assert guard_check_answer(probe, 422, _refusal(probe)) == "current"
    assert guard_check_answer(guard_probe(manifests), 422, _refusal(probe)) == "older"


def test_a_refusal_by_something_else_is_raised_as_it_came():
    forbidden = KubeError('Applying Namespace x: namespaces is forbidden: User "portal" '
                          'cannot patch resource "namespaces"', retriable=False, status=403)
    assert guard_check_answer(PROBE, 403, forbidden.message) == "other"
    with pytest.raises(KubeError) as raised:
        guards_in_force(Answers(0, forbidden), PROBE, timeout=1)
    assert raised.value is forbidden


def test_guards_never_in_force_are_a_retriable_error_that_says_so():
    backend = Answers(10**6, None)
    with pytest.raises(KubeError) as raised:
        guards_in_force(backend, PROBE, timeout=0.3)
    assert raised.value.retriable
    assert "admission guards were not in force" in raised.value.message
    assert len(backend.asked) >= 2  # it asked again before giving up


def test_a_server_error_while_checking_is_raised_as_it_came():
    down = KubeError("Applying Namespace x: connection refused", retriable=True)
    with pytest.raises(KubeError) as raised:
        guards_in_force(Answers(0, down), PROBE, timeout=1)
    assert raised.value is down


def test_no_admission_no_wait():
    """The embedded dry-run backend enforces nothing: there is nothing to wait for (and
    the allocation's audit says nothing about guards being in force)."""
    assert guards_in_force(DryRunBackend(), PROBE, timeout=1) is None


def test_older_guards_are_this_routes_earlier_shared_ones_only():
    """What the upgrade removes: an earlier shape's shared guards of the route reconciled,
    bindings before policies as listed; never this shape's, the check, another route's or a
    per-allocation guard; and whether any earlier shared guard is still there."""
    def obj(name, rules, **labels):
        return {"metadata": {"name": name, "labels": {GUARDS_LABEL: rules, **labels}}}

    current = guard_policy_name("dedicated", "pods")
    live = [("ValidatingAdmissionPolicyBinding", obj("aifactory-dedicated-pods", "dedicated")),
            ("ValidatingAdmissionPolicyBinding", obj(current, "dedicated")),
            ("ValidatingAdmissionPolicyBinding", obj(GUARD_CHECK, CHECK_RULES)),
            ("ValidatingAdmissionPolicy", obj("aifactory-dedicated-pods", "dedicated")),
            ("ValidatingAdmissionPolicy", obj("aifactory-confidential-pods", "confidential")),
            ("ValidatingAdmissionPolicy", obj("aifactory-a7-dedicated-pods", "dedicated",
                                              **{"aifactory.io/allocation": "7"})),
            ("ValidatingAdmissionPolicy", {"metadata": {"name": "someone-elses"}})]
    assert older_guards(live, {"dedicated"}) == (
        [("ValidatingAdmissionPolicyBinding", "aifactory-dedicated-pods"),
         ("ValidatingAdmissionPolicy", "aifactory-dedicated-pods")], True)
    assert older_guards(live[1:3], {"dedicated"}) == ([], False)
    assert older_guards(live[4:5], {"dedicated"}) == ([], True)  # another route's remains
