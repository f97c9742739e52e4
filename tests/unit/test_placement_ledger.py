"""The steps after admission, read from Pods and ResourceClaims (fleet.queues.placement)."""

import datetime as dt

from fleet.queues.placement import (
    NOTHING,
    Placement,
    claim_allocation,
    claims_by_pod,
    placement_events,
    placement_of,
    pods_by_job,
)

T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)


def iso(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name, created, *, scheduled=None, node="", started=None, done=False, job="train"):
    status = {"conditions": []}
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "True",
                                     "lastTransitionTime": iso(scheduled)})
    if started is not None:
        state = {"terminated" if done else "running": {"startedAt": iso(started)}}
        status["containerStatuses"] = [{"name": "c", "state": state}]
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": iso(created),
                         "labels": {"batch.kubernetes.io/job-name": job}},
            "spec": {"nodeName": node}, "status": status}


def claim(pod_name, allocated_at=None, device="gpu-0-mig-2g.20gb-0"):
    c = {"metadata": {"name": f"{pod_name}-gpu", "namespace": "ns",
                      "ownerReferences": [{"kind": "Pod", "name": pod_name}],
                      "managedFields": []}, "status": {}}
    if allocated_at is not None:
        c["status"]["allocation"] = {"devices": {"results": [
            {"driver": "gpu.nvidia.com", "pool": "mig-0", "device": device,
             "request": "gpu"}]}}
        c["metadata"]["managedFields"].append({
            "manager": "kube-scheduler", "operation": "Update", "subresource": "status",
            "time": iso(allocated_at), "fieldsV1": {"f:status": {"f:allocation": {}}}})
    return c


def test_the_steps_of_an_admission_are_the_times_kubernetes_wrote():
    pods = pods_by_job([pod("train-a", 1, scheduled=3, node="mig-0", started=5)])
    claims = claims_by_pod([claim("train-a", allocated_at=2)])
    p = placement_of(pods[("ns", "train")], claims, T0)
    assert p == Placement(pods_at=T0 + dt.timedelta(seconds=1),
                          scheduled_at=T0 + dt.timedelta(seconds=3), node="mig-0",
                          claimed_at=T0 + dt.timedelta(seconds=2),
                          devices=("gpu.nvidia.com: gpu-0-mig-2g.20gb-0 on mig-0",),
                          running_at=T0 + dt.timedelta(seconds=5))
    events = placement_events(NOTHING, p, admitted_at=T0, base={"workload": "train"})
    assert [(e["kind"], e["seam_seconds"]) for e in events] == [
        ("pods", 1.0), ("claimed", 1.0), ("scheduled", 2.0), ("running", 5.0)]
    assert "mig-0" in events[2]["reason"] and events[2]["detail"] == "mig-0"
    # Recorded once: the same steps read again add nothing.
    assert placement_events(p, p, admitted_at=T0, base={}) == []


def test_a_finished_pod_still_tells_when_it_started():
    p = placement_of([pod("a", 0, scheduled=0, node="n", started=4, done=True)], {}, T0)
    assert p.running_at == T0 + dt.timedelta(seconds=4)


def test_pods_of_an_earlier_admission_do_not_count_for_the_next():
    readmitted = T0 + dt.timedelta(minutes=10)
    old = pod("a", 1, scheduled=2, node="n1", started=3)
    new = pod("b", 602, scheduled=604, node="n2")
    p = placement_of([old, new], {}, readmitted)
    assert p.node == "n2" and p.running_at is None
    assert p.pods_at == T0 + dt.timedelta(seconds=602)


def test_nothing_before_admission_and_an_unallocated_claim_has_no_devices():
    assert placement_of([pod("a", 1)], {}, None) == NOTHING
    assert claim_allocation(claim("a")) == (None, ())
    p = placement_of([pod("a", 1)], claims_by_pod([claim("a")]), T0)
    assert p.claimed_at is None and p.scheduled_at is None and p.pods_at is not None


def test_malformed_objects_are_read_as_not_yet():
    junk = {"metadata": {"labels": {"job-name": "x"}, "creationTimestamp": "not a time"},
            "status": {"conditions": "no", "containerStatuses": [None, {"state": 3}]}}
    assert placement_of([junk], {}, T0).running_at is None
    assert pods_by_job([{"metadata": None}]) == {}
