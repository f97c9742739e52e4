"""MultiKueue dispatch decided: the quota split, what each cluster holds, and a manager's
Workload read as Kueue writes it (waiting for a worker, then admitted on one)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from fleet.allocations.dispatch import (
    MULTIKUEUE_CONTROLLER,
    WorkerShare,
    check_name,
    kubeconfig_secret,
    manager_manifests,
    secret_name,
    split_shares,
    worker_manifests,
)
from fleet.allocations.manifests import AllocationSpec
from fleet.domain import largest_job
from fleet.models import Route
from fleet.queues.dispatched import dispatch_words, worker_view_words
from fleet.queues.ledger import transition_events
from fleet.queues.truth import (
    ADMITTED,
    DISPATCHING,
    PENDING,
    QueueFacts,
    explain_pending,
    parse_workload,
)

SPEC = AllocationSpec(allocation_id=7, tenant="acme", namespace="acme-r1",
                      route=Route.SHARED_POOL, pool="dispatch", gpu_model="NVIDIA-L40S",
                      node_selector={"aifactory.io/pool": "dispatch"}, whole_devices=8,
                      cohort="shared", borrowing_limit=2)
WORKERS = (WorkerShare("w1", "w1", 4), WorkerShare("w2", "gpu-w2", 4))


@given(st.integers(0, 200), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                                            st.integers(0, 64), min_size=1))
def test_the_shares_sum_to_the_allocation_and_follow_capacity(devices, capacity):
    shares = split_shares(devices, capacity)
    assert set(shares) == set(capacity)
    if sum(capacity.values()) == 0:
        assert set(shares.values()) == {0}
        return
    assert sum(shares.values()) == devices  # the manager's quota is the workers' sum
    for name, c in capacity.items():
        if c == 0:
            assert shares[name] == 0
        exact = devices * c / sum(capacity.values())
        assert abs(shares[name] - exact) < 1  # largest remainder: never a device off
        if devices <= sum(capacity.values()):
            assert shares[name] <= c  # a promised allocation never exceeds a worker


def test_an_even_fleet_splits_evenly_and_an_uneven_one_in_proportion():
    assert split_shares(8, {"w1": 8, "w2": 8}) == {"w1": 4, "w2": 4}
    assert split_shares(6, {"w1": 16, "w2": 8}) == {"w1": 4, "w2": 2}
    assert split_shares(3, {"w1": 8, "w2": 8}) in ({"w1": 2, "w2": 1}, {"w1": 1, "w2": 2})
    assert largest_job({"w1": 4, "w2": 2}) == 4 and largest_job({}) == 0


def test_the_manager_queues_behind_multikueue_and_runs_nothing_itself():
    out = manager_manifests(SPEC, WORKERS)
    by_kind = {}
    for m in out:
        by_kind.setdefault(m["kind"], []).append(m)
    cq = by_kind["ClusterQueue"][0]
    assert cq["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": check_name("dispatch")}]}
    gpu = [r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
           if r["name"] == "nvidia.com/gpu"][0]
    assert gpu["nominalQuota"] == 8  # the sum of the shares
    assert by_kind["ResourceFlavor"][0]["spec"] == {}  # selects no node of the manager
    check = by_kind["AdmissionCheck"][0]
    assert check["spec"]["controllerName"] == MULTIKUEUE_CONTROLLER
    assert check["spec"]["parameters"]["name"] == check_name("dispatch")
    assert by_kind["MultiKueueConfig"][0]["spec"]["clusters"] == ["gpu-w2", "w1"]
    clusters = {m["metadata"]["name"]: m for m in by_kind["MultiKueueCluster"]}
    assert clusters["gpu-w2"]["spec"]["clusterSource"]["kubeConfig"] == {
        "locationType": "Secret", "location": secret_name("w2")}
    # Pool-level wiring carries no allocation label: pruning one allocation keeps it.
    for kind in ("AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster"):
        for m in by_kind[kind]:
            assert "aifactory.io/allocation" not in m["metadata"]["labels"]
    # The wiring comes before the queue that names it; no credential is ever rendered.
    kinds = [m["kind"] for m in out]
    assert kinds.index("AdmissionCheck") < kinds.index("ClusterQueue")
    assert "Secret" not in kinds


def test_a_worker_holds_its_share_with_the_same_namespace_queue_and_access():
    out = worker_manifests(SPEC, WorkerShare("w1", "w1", 3))
    cq = next(m for m in out if m["kind"] == "ClusterQueue")
    gpu = [r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
           if r["name"] == "nvidia.com/gpu"][0]
    assert gpu["nominalQuota"] == 3
    assert "admissionChecksStrategy" not in cq["spec"]
    assert {m["kind"] for m in out} >= {"Namespace", "LocalQueue", "RoleBinding"}
    flavor = next(m for m in out if m["kind"] == "ResourceFlavor")
    assert flavor["spec"]["nodeLabels"] == {"aifactory.io/pool": "dispatch"}


def test_the_secret_holds_the_kubeconfig_under_kueues_key():
    secret = kubeconfig_secret("w1", b"apiVersion: v1\n")
    assert secret["metadata"] == {"name": secret_name("w1"), "namespace": "kueue-system",
                                  "labels": {"app.kubernetes.io/managed-by":
                                             "aifactory-portal"}}
    assert secret["data"] == {"kubeconfig": "YXBpVmVyc2lvbjogdjEK"}


def _manager_workload(*, admitted: bool, cluster: str = "", nominated=()) -> dict:
    t = "2026-12-03T10:00:00Z"
    conditions = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                   "lastTransitionTime": t}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted",
                           "lastTransitionTime": "2026-12-03T10:00:02Z"})
    status = {"conditions": conditions,
              "admission": {"clusterQueue": "acme-r1", "podSetAssignments": [
                  {"name": "main", "resourceUsage": {"nvidia.com/gpu": "3"}}]},
              "admissionChecks": [{"name": "multikueue-dispatch",
                                   "state": "Ready" if admitted else "Pending",
                                   "message": f'The workload got reservation on "{cluster}"'
                                   if admitted else "",
                                   "lastTransitionTime": "2026-12-03T10:00:02Z"}]}
    if cluster:
        status["clusterName"] = cluster
    if nominated:
        status["nominatedClusterNames"] = list(nominated)
    return {"metadata": {"uid": "u1", "name": "job-a-1", "namespace": "acme-r1",
                         "creationTimestamp": "2026-12-03T09:59:59Z", "resourceVersion": "5",
                         "ownerReferences": [{"kind": "Job", "name": "a", "controller": True}]},
            "spec": {"queueName": "gpu"}, "status": status}


def test_quota_reserved_on_the_manager_is_not_admission_until_a_worker_admits():
    waiting = parse_workload(_manager_workload(admitted=False, nominated=("w2", "w1")),
                             cluster_queue_of={})
    assert waiting.state == PENDING and waiting.pending_reason == DISPATCHING
    assert waiting.nominated == ("w1", "w2") and waiting.ran_on == ""
    queue = QueueFacts(name="acme-r1", cohort="", resource="nvidia.com/gpu",
                       nominal=Decimal(8), borrowing_limit=None, usage=Decimal(3),
                       borrowed=Decimal(0), pending=1, admitted=0, active=True,
                       inactive_reason="")
    why = explain_pending(waiting, queue, own_running=[], ahead=[], cohort_free=Decimal(0),
                          now=dt.datetime(2026, 12, 3, 10, 1, tzinfo=dt.UTC))
    assert why.code == "dispatching" and "offered to w1, w2" in why.text

    ran = parse_workload(_manager_workload(admitted=True, cluster="w2"), cluster_queue_of={})
    assert ran.state == ADMITTED and ran.ran_on == "w2"
    assert ran.dispatched_at == dt.datetime(2026, 12, 3, 10, 0, 2, tzinfo=dt.UTC)
    events = transition_events(waiting, ran, now=ran.dispatched_at, borrowed=Decimal(0))
    kinds = [e["kind"] for e in events]
    assert kinds == ["admitted", "dispatched"]
    assert events[1]["reason"] == dispatch_words(ran)
    assert 'Admitted on worker w2, the first to admit it: The workload got reservation on ' \
        '"w2".' == events[1]["reason"]
    # Read again unchanged: no second dispatch step.
    assert transition_events(ran, ran, now=ran.dispatched_at, borrowed=Decimal(0)) == []


def test_what_a_worker_says_of_its_copy():
    assert worker_view_words(None).startswith("no copy there")
    copy = parse_workload(_manager_workload(admitted=False), cluster_queue_of={})
    # A worker's copy waiting for quota (no admission check there).
    raw = _manager_workload(admitted=False)
    raw["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False",
                                     "reason": "Pending", "message": "insufficient quota"}]}
    copy = parse_workload(raw, cluster_queue_of={})
    assert worker_view_words(copy) == "waiting there: insufficient quota"
