"""Priority preemption in a stand-alone queue, against the real Kueue, kube-scheduler and kwok
nodes, told as it happens: a low-priority job runs on the tenant's dedicated block; a
high-priority one (a WorkloadPriorityClass) is submitted to the same queue; Kueue preempts the
low one. While its pods stop — Kueue keeps its quota reserved until its Job is no longer
active — the portal shows it as being preempted, never as running; then requeued (waiting
while the high job holds the block); then, the high job removed, admitted again and running
again; one preemption, its lost run time counted.

How "its pods are still stopping" is held open: Kueue releases the quota once the Job
controller reports the Job inactive. A ValidatingAdmissionPolicy of the test's own refuses
the Job controller's status writes for this one Job while it is suspended, so to Kueue the
Job stays active — what a Job whose pods take long to stop looks like — until the test lifts
the policy. A probe Job's refused dry run says the policy is in force before it matters."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.test import Client

from fleet.allocations.retirement import allocation_retire
from fleet.models import Route
from fleet.queues.sync import queue_sync
from tests.harness.placement import start_delays

from .approvals import approve
from .conftest import eventually
from .workloads import condition, job, wait_workload, workload_of

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"
VAP = "admissionregistration.k8s.io/v1"
HOLD = "test.aifactory.io/hold-stop"


def _hold_policy(tag: str) -> tuple[dict, dict]:
    """Refuse status writes of a suspended Job labelled with `tag` (pods "still stopping")."""
    name = f"hold-stop-{tag}"
    policy = {"apiVersion": VAP, "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail", "matchConstraints": {
                  "objectSelector": {"matchLabels": {HOLD: tag}},
                  "resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                     "operations": ["UPDATE"],
                                     "resources": ["jobs/status"]}]},
                  "validations": [{"expression":
                                   "!(has(object.spec.suspend) && object.spec.suspend)",
                                   "message": "held by the test: its pods are still stopping"}]}}
    binding = {"apiVersion": VAP, "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return policy, binding


def _held(admin, probe: str) -> None:
    """The policy refuses a status write of the (suspended) probe Job: it is in force."""
    client = admin._dynamic()
    jobs = admin._resource("batch/v1", "Job")
    try:
        client.request("patch", jobs.path(name=probe, namespace="default") + "/status",
                       body={"status": {"active": 0}}, dry_run="All",
                       content_type="application/merge-patch+json")
    except Exception as exc:  # the API server's refusal, whatever its class
        assert "held by the test" in str(exc), exc
        return
    raise AssertionError("the hold policy is not in force yet")


def _running_pod(admin, namespace: str, job_name: str, placement) -> dict:
    placement.raise_if_dead()
    for pod in admin.list("v1", "Pod", namespace=namespace,
                          label_selector=f"job-name={job_name}"):
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if not pod["metadata"].get("deletionTimestamp") and any(
                (s.get("state") or {}).get("running") for s in statuses):
            return pod
    raise AssertionError(f"no running pod of {job_name} yet")


def _stopping(admin, namespace: str, job_name: str) -> dict:
    wl = workload_of(admin, namespace, job_name)
    assert condition(wl, "Preempted").get("reason") == "InClusterQueue", wl and wl["status"]
    assert condition(wl, "Evicted").get("status") == "True", wl["status"]
    assert condition(wl, "QuotaReserved").get("status") == "True", wl["status"]
    return wl


def _readmitted(admin, namespace: str, job_name: str, first: str) -> dict:
    wl = workload_of(admin, namespace, job_name)
    admitted = condition(wl, "Admitted")
    assert admitted.get("status") == "True" and admitted["lastTransitionTime"] != first, \
        wl and wl["status"]
    return wl


def _view(lead, alloc) -> tuple[dict, str]:
    user = Client()
    user.force_login(lead)
    api = user.get(f"/api/allocations/{alloc.pk}/queue/").json()
    return api, user.get(f"/allocations/{alloc.pk}/queue/").content.decode()


def _section(page: str, title: str) -> str:
    if f"<h3>{title}</h3>" not in page:
        return ""
    return page.split(f"<h3>{title}</h3>", 1)[1].split("<h3>", 1)[0]


def _job(api: dict, name: str) -> dict:
    (found,) = [j for j in api["jobs"] if j["name"] == name]
    return found


def test_a_preempted_job_is_being_preempted_then_requeued_then_running_again(
        simulated_fleet, placement, kube, kueue, tenant, lead, admin_user,
        django_capture_on_commit_callbacks):
    admin = simulated_fleet
    for name, value in (("batch-low", 10), ("urgent-high", 1000)):
        admin.apply({"apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value,
                     "description": f"test priority {value}"}, force=True)
    _req, alloc = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                          django_capture_on_commit_callbacks)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    cq = admin.get(KUEUE, "ClusterQueue", alloc.namespace)
    assert not cq["spec"].get("cohortName")  # a stand-alone queue: nothing to borrow
    tag = uuid.uuid4().hex[:6]
    policy, binding = _hold_policy(tag)
    probe = f"probe-{tag}"
    try:
        admin.apply(policy, force=True)
        admin.apply(binding, force=True)
        admin.apply({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": probe, "namespace": "default",
                                  "labels": {HOLD: tag}},
                     "spec": {"suspend": True, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "registry.example/x:1"}]}}}},
                    force=True)
        eventually(lambda: _held(admin, probe), timeout=30)
        _scenario(admin, kube, kueue, placement, alloc, lead, tag)
    finally:
        admin.delete(VAP, "ValidatingAdmissionPolicyBinding", binding["metadata"]["name"])
        admin.delete(VAP, "ValidatingAdmissionPolicy", policy["metadata"]["name"])
        admin.delete("batch/v1", "Job", probe, "default")
        # Leave the fleet as found: the ten-minute jobs' pods and the block's reserved nodes
        # would otherwise stand in the way of the blocks later tests place work on.
        for job_name in ("batch", "urgent"):
            admin.delete("batch/v1", "Job", job_name, alloc.namespace)
        allocation_retire(alloc.pk)
        eventually(lambda: _no_pods(admin, alloc.namespace), timeout=60)


def _no_pods(admin, namespace: str) -> None:
    left = [p["metadata"]["name"] for p in admin.list("v1", "Pod", namespace=namespace)]
    assert not left, left


def _scenario(admin, kube, kueue, placement, alloc, lead, tag):
    ns, units = alloc.namespace, alloc.whole_devices
    low = job(ns, devices=units, name="batch")
    low["metadata"]["labels"].update({"kueue.x-k8s.io/priority-class": "batch-low",
                                      HOLD: tag})
    low["spec"]["template"]["metadata"] = {"annotations": start_delays(run_ms=600_000)}
    admin.apply(low)
    first = wait_workload(admin, ns, "batch", want="Admitted", kueue=kueue, timeout=60)
    eventually(lambda: _running_pod(admin, ns, "batch", placement), timeout=60)
    queue_sync(kube)
    api, _page = _view(lead, alloc)
    assert [r["name"] for r in api["running"]] == ["batch"] and api["stopping"] == []

    # 1. The urgent job of the same tenant: Kueue preempts the batch job, whose pods stop.
    high = job(ns, devices=units, name="urgent")
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent-high"
    high["spec"]["template"]["metadata"] = {"annotations": start_delays(run_ms=600_000)}
    admin.apply(high)
    wl = eventually(lambda: _stopping(admin, ns, "batch"), timeout=60,
                    detail=lambda: kueue.log_tail())
    queue_sync(kube)
    api, page = _view(lead, alloc)
    assert "batch" not in [r["name"] for r in api["running"]]  # never "running"
    (stopping,) = api["stopping"]
    assert (stopping["name"], stopping["kind"], stopping["reason_code"]) == (
        "batch", "preempted", "InClusterQueue")
    assert stopping["reason"].startswith("Being preempted: a higher-priority job of yours")
    assert "batch" not in _section(page, "Running")
    assert "Being preempted: a higher-priority job of yours" in _section(
        page, "Being preempted / stopping")
    ledger = _job(api, "batch")
    assert ledger["state"] == "stopping" and ledger["preemptions"] == 1
    preempted = [s for s in ledger["steps"] if s["kind"] == "preempted"]
    assert len(preempted) == 1
    assert preempted[0]["at"] == condition(wl, "Evicted")["lastTransitionTime"]

    # 2. Its pods stop (the hold lifted; a touch wakes the Job controller): Kueue releases
    # the quota and requeues it.
    admin.delete(VAP, "ValidatingAdmissionPolicyBinding", f"hold-stop-{tag}")
    admin._dynamic().patch(admin._resource("batch/v1", "Job"), name="batch", namespace=ns,
                           body={"metadata": {"annotations": {"test.aifactory.io/poke": "1"}}},
                           content_type="application/merge-patch+json")
    requeued = eventually(lambda: _requeued(admin, ns), timeout=60,
                          detail=lambda: kueue.log_tail())
    queue_sync(kube)
    api, _page = _view(lead, alloc)
    assert api["stopping"] == [] and "batch" not in [r["name"] for r in api["running"]]
    assert "batch" in [p["name"] for p in api["pending"]]  # waiting again, not running
    ledger = _job(api, "batch")
    assert ledger["state"] == "pending"
    kinds = [s["kind"] for s in ledger["steps"]]
    assert kinds.index("preempted") < kinds.index("requeued")
    step = [s for s in ledger["steps"] if s["kind"] == "requeued"][0]
    assert step["at"] == condition(requeued, "QuotaReserved")["lastTransitionTime"]
    assert ledger["preemptions"] == 1

    # 3. The urgent job done (deleted), the batch job is admitted again and runs again.
    wait_workload(admin, ns, "urgent", want="Admitted", kueue=kueue, timeout=60)
    admin.delete("batch/v1", "Job", "urgent", ns)
    eventually(lambda: _readmitted(admin, ns, "batch",
                                   condition(first, "Admitted")["lastTransitionTime"]),
               timeout=90, detail=lambda: kueue.log_tail())
    eventually(lambda: _running_pod(admin, ns, "batch", placement), timeout=60)
    queue_sync(kube)
    api, page = _view(lead, alloc)
    assert [r["name"] for r in api["running"]] == ["batch"] and api["stopping"] == []
    ledger = _job(api, "batch")
    kinds = [s["kind"] for s in ledger["steps"]]
    assert kinds.count("admitted") == 2 and kinds.count("running") == 2, kinds
    assert kinds.index("preempted") < kinds.index("requeued") < \
        len(kinds) - 1 - kinds[::-1].index("admitted") < len(kinds) - 1 - \
        kinds[::-1].index("running"), kinds
    assert ledger["state"] == "admitted" and ledger["preemptions"] == 1
    # Run time lost: from its start to the preemption, as Kubernetes stamped them (whole
    # seconds: a preemption within the second it started loses 0 s).
    steps = ledger["steps"]
    stop = next(i for i, st in enumerate(steps) if st["kind"] == "preempted")
    start = max(i for i in range(stop) if steps[i]["kind"] == "running")
    lost = (dt.datetime.fromisoformat(steps[stop]["at"].replace("Z", "+00:00"))
            - dt.datetime.fromisoformat(steps[start]["at"].replace("Z", "+00:00")))
    assert ledger["lost_run_seconds"] == pytest.approx(lost.total_seconds())
    assert "preempted 1×" in _section(page, "Jobs, step by step")


def _requeued(admin, ns: str) -> dict:
    wl = workload_of(admin, ns, "batch")
    assert condition(wl, "QuotaReserved").get("status") == "False", wl and wl["status"]
    return wl
