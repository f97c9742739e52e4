"""From admission to running, per route, through the real scheduler and simulated GPU nodes
(kwok): the "Use it" example Job, submitted as the tenant, is admitted by the real Kueue,
placed by kube-scheduler where the route promises (a dedicated block on its own nodes; the
confidential pool on confidential nodes; MIG: its claim allocated a slice of the approved
profile on the MIG node), runs and succeeds. The portal's queue watch records the
workload's ledger as it happens, and each step's time is the one Kubernetes itself
recorded. Another tenant's pod is never placed on a dedicated block."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from fleet.allocations.admission import (
    PARAMS_API,
    PARAMS_KIND,
    check_params_name,
    params_entries,
)
from fleet.allocations.connect import example_workload
from fleet.allocations.desired import allocation_spec
from fleet.inventory.connections import backend_of, home_cluster
from fleet.models import Route
from fleet.queues.timing import STAMP
from fleet.queues.watch import QueueFollower
from tests.harness.collector import CollectorServer
from tests.harness.placement import start_delays

from .approvals import approve
from .cohorts import four_in_a_cohort
from .conftest import eventually
from .gpu_nodes import resource_slice
from .identities import as_identity, new_tenant
from .kwok_nodes import kwok_node, untaint
from .workloads import IMAGE

pytestmark = [pytest.mark.django_db]


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """A real trace receiver (an OpenTelemetry Collector: OTLP/HTTP in, a JSON file out)."""
    started = time.monotonic()
    server = CollectorServer(tmp_path_factory.mktemp("collector")).start()
    print(f"\ncollector: ready in {time.monotonic() - started:.1f}s (build included)")
    yield server
    server.stop()


def _allocated_devices(admin, namespace: str) -> list[dict]:
    claims = admin.list("resource.k8s.io/v1", "ResourceClaim", namespace=namespace)
    devices = [r for c in claims for r in ((c.get("status") or {}).get("allocation") or {})
               .get("devices", {}).get("results", [])]
    assert devices, claims
    return devices


def _pods(admin, namespace: str, job: str) -> list[dict]:
    return admin.list("v1", "Pod", namespace=namespace, label_selector=f"job-name={job}")


def _succeeded(admin, namespace: str, job: str, placement) -> dict:
    placement.raise_if_dead()
    found = admin.get("batch/v1", "Job", job, namespace)
    assert (found.get("status") or {}).get("succeeded") == 1, found.get("status")
    return found


@pytest.mark.parametrize("route", list(Route))
def test_the_example_runs_where_the_route_promises(route, control_plane, simulated_fleet,
                                                   placement, admin_user, collector, settings,
                                                   django_capture_on_commit_callbacks):
    from fleet.models import Pool

    admin = simulated_fleet
    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    # A cohort of its own: work other tests left in the pool's cohort (admitted, never run by
    # a kubelet) cannot hold this queue's devices or make Kueue wait on a reclaim.
    Pool.objects.filter(route=route, cohort__gt="").update(cohort=f"place-{tenant.slug}")
    _req, alloc = approve(tenant, lead, admin_user, route, django_capture_on_commit_callbacks)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    spec = allocation_spec(alloc)
    if route is Route.CONFIDENTIAL_POOL:
        admin.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": spec.confidential_runtime_class},
                     "handler": spec.confidential_runtime_class}, force=True)
    job = example_workload(spec, image=IMAGE)
    # MIG: the pod runs long enough to read its claim's allocation while it holds it.
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = start_delays(
        run_ms=3000 if route is Route.MIG_VCLUSTER else 500)
    name = job["metadata"]["name"]
    # The portal follows by watch from before the submission (as `manage.py watch_queues`
    # does), and the test keeps every container start the API server ever showed.
    follower = QueueFollower(backend_of(home_cluster()), timeout_seconds=60)
    follower.start()
    starts = _VersionsSeen(admin, alloc.namespace)
    started = time.monotonic()
    as_identity(control_plane, f"{tenant.slug}-lead",
                [f"oidc:/tenants/{tenant.slug}/leads"]).apply(job)
    devices, seen = [], []
    if route is Route.MIG_VCLUSTER:
        try:
            devices = eventually(lambda: _allocated_devices(admin, alloc.namespace), timeout=60)
        except AssertionError:
            for wl in admin.list("kueue.x-k8s.io/v1beta2", "Workload",
                                 namespace=alloc.namespace):
                print("WORKLOAD", wl.get("status"))
            print(placement.log_tail())
            raise
        seen = _pods(admin, alloc.namespace, name)

    try:
        eventually(lambda: _succeeded(admin, alloc.namespace, name, placement), timeout=60)
    except AssertionError:
        print(placement.log_tail())
        for pod in _pods(admin, alloc.namespace, name):
            print("POD", pod["spec"].get("nodeName"), pod.get("status"))
        raise
    took = time.monotonic() - started
    pod = _pods(admin, alloc.namespace, name)[0]
    node = pod["spec"]["nodeName"]
    print(f"\nBENCHMARK placement {route}: submitted → Succeeded in {took:.2f}s on {node}")
    if route is Route.SHARED_POOL:
        assert node == "shr-0"
    elif route is Route.DEDICATED_BLOCK:
        assert node in set(alloc.nodes.values_list("name", flat=True))
    elif route is Route.CONFIDENTIAL_POOL:
        assert node == "conf-0" and pod["spec"]["runtimeClassName"] == \
            spec.confidential_runtime_class
    else:
        assert node == "mig-0"
        # The scheduler allocated the claim a MIG device of the approved profile on that node.
        assert len(devices) == 1 and devices[0]["driver"] == "gpu.nvidia.com" and \
            devices[0]["pool"] == "mig-0" and "-mig-" in devices[0]["device"], devices
    try:
        _ledger_is_what_kubernetes_recorded(admin, alloc, name, pod, route, seen, follower,
                                            starts)
    finally:
        follower.close()
        starts.stop.set()
    settings.PORTAL_OTLP_ENDPOINT = collector.otlp_url
    _the_trace_the_collector_keeps_is_the_ledger(collector, alloc, name)


def _the_trace_the_collector_keeps_is_the_ledger(collector, alloc, job: str) -> None:
    """The allocation's trace, sent by the beat task's function over OTLP to a real
    OpenTelemetry Collector and read back from what it wrote out: one trace, the stages under
    one root, the times those of the audit trail and the ledger, to the microsecond."""
    from fleet.models import QueueEvent
    from intake.tasks import export_allocation_traces
    from tenants.models import AuditEvent

    assert export_allocation_traces() == 1
    trace_id = alloc.trace.trace_id

    def kept() -> list[dict]:
        found = collector.spans(trace_id)
        assert len(found) == 6, f"the collector has {len(found)} of 6 spans of {trace_id}"
        return found

    got = eventually(kept, timeout=20)
    spans = {s["name"]: s for s in got}
    root = spans.pop(f"allocation {alloc.namespace}")
    assert root["parent_span_id"] == ""
    assert set(spans) == {"review", "provisioning", "until the first workload", "queue wait",
                          "placement"}
    assert all(s["parent_span_id"] == root["span_id"] for s in spans.values())
    assert root["resource"]["service.name"] == "aifactory-portal"

    def ns(t) -> int:
        return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000

    ledger = {e.kind: e.at for e in QueueEvent.objects.filter(allocation=alloc, workload=job)}
    submitted = AuditEvent.objects.get(subject_type="capacityrequest",
                                       subject_id=alloc.request.pk, action="request.submitted")
    active = AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk,
                                       to_state="active").order_by("at", "pk").first()
    assert root["start_ns"] == ns(submitted.at)
    # Kubernetes keeps whole seconds: a pod can show running "before" the portal recorded the
    # allocation active (within the same second); the root then ends at the later one.
    assert root["end_ns"] == ns(max(ledger["running"], active.at))
    wait, placed = spans["queue wait"], spans["placement"]
    assert (wait["start_ns"], placed["start_ns"]) == (ns(ledger["submitted"]),
                                                      ns(ledger["admitted"]))
    events = {e["name"]: e["time_ns"] for e in placed["events"]}
    assert events["Scheduled"] == ns(ledger["scheduled"]) and \
        events["Running"] == ns(ledger["running"]), events
    assert root["attributes"]["portal.tenant"] == alloc.tenant.slug
    assert root["attributes"]["portal.route"] == alloc.route
    print(f"\nBENCHMARK trace {alloc.route}: {len(got)} spans at the collector, filed → "
          f"running {(root['end_ns'] - root['start_ns']) / 1e9:.1f}s")


class _VersionsSeen:
    """Every version of the namespace's objects at `path` the API server showed, from a
    watch of our own. For pods: every container startedAt (kwok, unlike a kubelet, writes a
    new startedAt when it completes a pod, so the time the portal's watch recorded while the
    pod ran may differ from the finished pod's)."""

    def __init__(self, admin, namespace: str, kind: str = "pods"):
        import threading

        self.objects, self.stop = [], threading.Event()
        path = (f"/api/v1/namespaces/{namespace}/pods" if kind == "pods" else
                f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads")
        _items, version = admin.list_path_versioned(path)

        def run():
            from fleet.kube import KubeError

            while not self.stop.is_set():
                try:
                    for event in admin.watch_path(path, resource_version=version,
                                                  timeout_seconds=5):
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.add(event.get("object") or {})
                except KubeError:
                    return

        threading.Thread(target=run, daemon=True).start()

    def add(self, obj: dict) -> None:
        self.objects.append(obj)

    @property
    def times(self) -> set:
        from fleet.queues.truth import parse_time

        out = set()
        for pod in self.objects:
            for c in (pod.get("status") or {}).get("containerStatuses") or []:
                state = c.get("state") or {}
                started = (state.get("running") or state.get("terminated") or {}).get(
                    "startedAt")
                if started:
                    out.add(parse_time(started))
        return out

    def condition_times(self, kind: str, status: str = "True") -> set:
        """Every lastTransitionTime at which a Workload showed condition `kind` `status`."""
        from fleet.queues.truth import parse_time

        return {parse_time(c["lastTransitionTime"]) for wl in self.objects
                for c in (wl.get("status") or {}).get("conditions") or []
                if c.get("type") == kind and c.get("status") == status}


def _ledger_is_what_kubernetes_recorded(admin, alloc, job: str, pod: dict, route,
                                        seen: list[dict], follower, starts) -> None:
    """The watch's ledger for the Job: every step in order, each at the time the API
    server's objects carry, each seam the difference of those times. For MIG the claim is
    gone with its pod by now: its device was recorded from the watch's events alone."""
    from fleet.models import QueueEvent
    from fleet.queues.truth import parse_time

    def synced_to_the_end() -> list:
        # Kueue marks the Workload Finished a moment after the Job succeeds: read until then.
        follower.drain(wait=0.5)
        found = list(QueueEvent.objects.filter(allocation=alloc, workload=job))
        assert "finished" in [e.kind for e in found], [e.kind for e in found]
        return found

    events = eventually(synced_to_the_end, timeout=30)
    kinds = [e.kind for e in events]
    expected = ["submitted", "admitted", "pods", "scheduled", "running", "finished"]
    if route is Route.MIG_VCLUSTER:
        expected.insert(3, "claimed")
    assert sorted(kinds, key=expected.index) == expected and len(kinds) == len(expected), kinds
    at = {e.kind: e.at for e in events}
    kube = {e.kind: e.kube_at for e in events}
    assert [at[k] for k in expected if k != "claimed"] == sorted(
        at[k] for k in expected if k != "claimed"), at  # time order
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert kube["scheduled"] == parse_time(conditions["PodScheduled"]["lastTransitionTime"])
    assert kube["pods"] == parse_time(pod["metadata"]["creationTimestamp"])
    # The container's start as the pod carried it when read: kwok (unlike a kubelet) writes
    # a new startedAt when it completes a pod, so a read while it ran may have seen another.
    for p in [pod, *seen]:
        starts.add(p)
    assert kube["running"] in starts.times, (kube["running"], starts.times)
    # Each step's time within its stated bound of the stamp Kubernetes wrote: the watch's
    # moment and the stamp lie in the stamp's second (a step moved after the one it follows
    # says so in its bound); an Event's time is the eventTime the scheduler wrote.
    scheduled_events = {parse_time(ev.get("eventTime")) for ev in admin.list(
        "events.k8s.io/v1", "Event", namespace=alloc.namespace)
        if ev.get("reason") == "Scheduled" and (ev.get("regarding") or {}).get("name") ==
        pod["metadata"]["name"]}
    for e in events:
        assert e.at_source in ("event", "watch", "object"), (e.kind, e.at_source)
        assert e.kube_at is not None and e.at_bound_seconds is not None, e.kind
        late = (e.at - e.kube_at).total_seconds()
        if e.at_source == "event":
            # the eventTime the scheduler wrote, or — moved after a step the watch recorded
            # earlier a few ms late (that row stays: the ledger is append-only) — within the
            # bound the step states
            assert e.kind == "scheduled" and any(
                dt.timedelta(0) <= e.at - ev <= dt.timedelta(seconds=e.at_bound_seconds + 1e-6)
                for ev in scheduled_events), (e.at, e.at_bound_seconds, scheduled_events)
            assert -0.25 <= late < 1.25, (e.kind, late)
        else:
            assert 0 <= late < 1 or late <= e.at_bound_seconds, (e.kind, late, e.at_source,
                                                                 e.at_bound_seconds)
            assert e.at_bound_seconds <= 1.0 + max(0.0, late), (e.kind, e.at_bound_seconds)
    seams = {e.kind: e.seam_seconds for e in events}
    assert seams["running"] == max(0.0, (at["running"] - at["admitted"]).total_seconds())
    assert seams["scheduled"] == (at["scheduled"] - at["pods"]).total_seconds()
    assert next(e for e in events if e.kind == "scheduled").detail == pod["spec"]["nodeName"]
    if route is Route.MIG_VCLUSTER:
        assert "-mig-" in next(e for e in events if e.kind == "claimed").reason
    sources = {e.kind: e.at_source for e in events}
    print(f"\nBENCHMARK ledger {route}: " + ", ".join(
        f"{k} +{seams[k] * 1000:.0f} ms ({sources[k]})" for k in expected
        if seams.get(k) is not None) + "; watch lag " + (
        f"{follower.mirror.view().lag * 1000:.1f} ms" if follower.mirror.view().lag is not None
        else "not measured"))


def test_another_tenants_pod_never_lands_on_a_dedicated_block(
        control_plane, simulated_fleet, placement, admin_user,
        django_capture_on_commit_callbacks):
    admin = simulated_fleet
    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    _req, ded = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    block = set(ded.nodes.values_list("name", flat=True))
    # Eight pods of one GPU each, from a namespace the portal does not own: the scheduler
    # places them on every other node with room, never on the block (its taint).
    admin.apply({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "intruders"}}, force=True)
    names = []
    for i in range(8):
        name = f"probe-{uuid.uuid4().hex[:5]}-{i}"
        names.append(name)
        admin.apply({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": name, "namespace": "intruders"},
                     "spec": {"containers": [{"name": "c", "image": IMAGE, "resources": {
                         "requests": {"nvidia.com/gpu": "1"},
                         "limits": {"nvidia.com/gpu": "1"}}}]}}, force=True)

    def placed() -> list[str]:
        nodes = [(admin.get("v1", "Pod", n, "intruders") or {}).get("spec", {}).get("nodeName")
                 for n in names]
        assert all(nodes), nodes
        return nodes

    try:
        nodes = eventually(placed, timeout=60)
        assert not block & set(nodes), (block, nodes)
        # Naming the block's node in a selector passes admission (the guards read no list
        # of nodes: docs/isolation.md), and the taint keeps the pod off it for good.
        (node,) = sorted(block)[:1]
        by_name = {"hostname": {"nodeSelector": {"kubernetes.io/hostname": node}},
                   "field": {"affinity": {"nodeAffinity": {
                       "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                           {"matchFields": [{"key": "metadata.name", "operator": "In",
                                             "values": [node]}]}]}}}}}
        for how, aim in by_name.items():
            admin.apply({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"by-{how}", "namespace": "intruders"},
                         "spec": {"containers": [{"name": "c", "image": IMAGE}], **aim}})

        def unschedulable(name: str) -> dict:
            pod = admin.get("v1", "Pod", name, "intruders")
            conds = [c for c in (pod.get("status") or {}).get("conditions") or []
                     if c["type"] == "PodScheduled"]
            assert conds, "not looked at by the scheduler yet"
            assert conds[0]["status"] == "False" and conds[0]["reason"] == "Unschedulable", conds
            return pod

        for how in by_name:
            pod = eventually(lambda how=how: unschedulable(f"by-{how}"), timeout=60)
            # The scheduler tried the block and its taint said no, in words that name
            # neither the taint's value nor so the owner.
            assert "untolerated taint" in str(pod["status"]), pod["status"]
            assert tenant.slug not in str(pod["status"]), pod["status"]
        time.sleep(2)  # another scheduling round or two: still not bound
        for how in by_name:
            assert not admin.get("v1", "Pod", f"by-{how}", "intruders")["spec"].get("nodeName")
    finally:
        admin.delete("v1", "Namespace", "intruders")


def test_a_tenants_two_blocks_keep_their_own_work(control_plane, simulated_fleet, placement,
                                                  admin_user,
                                                  django_capture_on_commit_callbacks):
    """Kueue admits a block's work against that block's quota, so its pods must run on that
    block's nodes: four one-GPU pods of block A all land on A's node, none on B's (the
    flavor selects the allocation's nodes, not the tenant's)."""
    admin = simulated_fleet
    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    _r, first = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    _r, second = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                         django_capture_on_commit_callbacks)
    own = set(first.nodes.values_list("name", flat=True))
    other = set(second.nodes.values_list("name", flat=True))
    assert own and other and not own & other, (own, other)
    for node in own | other:
        untaint(admin, node)  # the block's own taint stays; the not-ready one goes
    job = example_workload(allocation_spec(first), image=IMAGE)
    job["spec"]["parallelism"] = job["spec"]["completions"] = 4
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = start_delays(
        run_ms=1500)
    name = job["metadata"]["name"]
    as_identity(control_plane, f"{tenant.slug}-lead",
                [f"oidc:/tenants/{tenant.slug}/leads"]).apply(job)

    def placed() -> list[str]:
        nodes = [p["spec"].get("nodeName") for p in _pods(admin, first.namespace, name)]
        assert len(nodes) == 4 and all(nodes), nodes
        return nodes

    nodes = eventually(placed, timeout=60)
    assert set(nodes) <= own, (nodes, own, other)
    eventually(lambda: _succeeded_count(admin, first.namespace, name, 4), timeout=60)


def _succeeded_count(admin, namespace: str, job: str, n: int) -> None:
    found = admin.get("batch/v1", "Job", job, namespace)
    assert (found.get("status") or {}).get("succeeded") == n, found.get("status")


def test_a_block_moved_off_a_retiring_node_runs_on_its_new_node_only(
        control_plane, simulated_fleet, placement, admin_user,
        django_capture_on_commit_callbacks):
    """Retire the block's node and move the block (the node page's action): in the real API
    the new node carries the block's labels and taint and the old one none of them; an
    intruder's pod pinned to the new node is refused; the tenant's Job is placed on the new
    node and runs."""
    from fleet.allocations.desired import allocation_manifests
    from fleet.allocations.moves import allocation_move_off
    from fleet.inventory.services import node_set_retiring
    from fleet.models import GpuNode

    from .workloads import outcome, pod_spec

    admin = simulated_fleet
    tenant, lead = new_tenant(uuid.uuid4().hex[:6])
    _r, block = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                        django_capture_on_commit_callbacks)
    old = block.nodes.get().name
    intruder, ilead = new_tenant(uuid.uuid4().hex[:6])
    _r, shared = approve(intruder, ilead, admin_user, Route.SHARED_POOL,
                         django_capture_on_commit_callbacks)
    node_set_retiring(node=GpuNode.objects.get(name=old), by=admin_user, retiring=True,
                      reason="End of warranty")
    new = allocation_move_off(allocation_id=block.pk, node_name=old, by=admin_user,
                              reason="End of warranty")
    assert new != old
    labels = {n: (admin.get("v1", "Node", n)["metadata"].get("labels") or {}) for n in (old, new)}
    assert labels[new].get("aifactory.io/allocation") == str(block.pk)
    assert labels[old].get("aifactory.io/allocation") != str(block.pk)
    taints = {n: [t for t in admin.get("v1", "Node", n)["spec"].get("taints") or []
                  if t["key"] == "aifactory.io/dedicated"] for n in (old, new)}
    assert taints[new] and not taints[old], taints
    untaint(admin, new)

    who = as_identity(control_plane, f"{intruder.slug}-lead",
                      [f"oidc:/tenants/{intruder.slug}/leads"])
    pinned = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pinned", "namespace": shared.namespace},
              "spec": pod_spec(nodeName=new)}

    # At once: the move's reconcile waited for the guards' check (its entry names the new
    # nodes) before it tainted the new node; the policies name no node at all, so nothing
    # in them had to change.
    assert "spec.nodeName" in outcome(who, pinned)
    live = params_entries(admin.get(PARAMS_API, PARAMS_KIND, check_params_name(block.pk)))
    assert f"check.{block.pk}" in live
    assert not any(new in str(m) or old in str(m) for m in allocation_manifests(block)
                   if m["kind"] == "ValidatingAdmissionPolicy")

    job = example_workload(allocation_spec(block), image=IMAGE)
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = start_delays(
        run_ms=500)
    name = job["metadata"]["name"]
    as_identity(control_plane, f"{tenant.slug}-lead",
                [f"oidc:/tenants/{tenant.slug}/leads"]).apply(job)

    def placed() -> str:
        nodes = [p["spec"].get("nodeName") for p in _pods(admin, block.namespace, name)]
        assert nodes and all(nodes), nodes
        return nodes[0]

    assert eventually(placed, timeout=60) == new
    eventually(lambda: _succeeded(admin, block.namespace, name, placement), timeout=60)


# Known, reported (not skipped): in the full suite's order this scenario's last job sometimes
# keeps its pods unscheduled after other modules' work on the shared kwok nodes; it passes
# alone and after the preemption scenario. Non-strict so a pass still counts; to be found.
def test_four_tenants_contend_through_placement_and_billing_is_the_ledger(
        control_plane, simulated_fleet, placement, admin_user,
        django_capture_on_commit_callbacks):
    """The four-tenant contention of tests/k8s/test_queue_truth.py carried to running pods,
    followed by the portal's queue watch: A runs within quota; B borrows 4 devices and runs
    on the shared node; C returns, the cohort reclaims, B's pods are deleted and C's placed;
    when A's job is deleted B is admitted again and runs to the end. The ledger holds every step in
    order at the times Kubernetes recorded, the recovery seam is the time from B's
    preemption to its pod running again, and the borrowed device-seconds billing reads
    equal the ledger's (within the one-second resolution of Kubernetes' conditions)."""
    from billing.services import borrowed_device_seconds
    from fleet.models import QueueEvent
    from fleet.queues.placement import recoveries
    from fleet.queues.truth import parse_time

    from .workloads import job as tenant_job

    admin = simulated_fleet
    allocs, idents = {}, {}
    for letter, (tenant, _lead, alloc) in four_in_a_cohort(
            admin_user, django_capture_on_commit_callbacks, prefix="t").items():
        allocs[letter] = alloc
        idents[letter] = as_identity(control_plane, f"{tenant.slug}-lead",
                                     [f"oidc:/tenants/{tenant.slug}/leads"])
    a, b, c = allocs["a"], allocs["b"], allocs["c"]
    b_pods, b_workloads = _VersionsSeen(admin, b.namespace), _VersionsSeen(admin, b.namespace,
                                                                       "workloads")
    follower = QueueFollower(backend_of(home_cluster()), timeout_seconds=120)
    follower.start()

    def submit(letter: str, name: str, devices: int, run_ms: int) -> None:
        body = tenant_job(allocs[letter].namespace, devices=devices, name=name)
        body["spec"]["template"]["metadata"] = {"annotations": start_delays(run_ms=run_ms)}
        idents[letter].apply(body)

    def following(check, timeout: float = 90):
        """Let the portal's watch record until `check` passes (the watch, not the test,
        reads the cluster: a check reads the portal's own rows)."""
        def recorded_then_checked():
            placement.raise_if_dead()
            follower.drain(wait=0.2)
            return check()

        return eventually(recorded_then_checked, timeout=timeout, interval=0,
                          detail=placement.log_tail)

    def ledger(alloc, job: str) -> list:
        return list(QueueEvent.objects.filter(allocation=alloc, workload=job)
                    .order_by("at", "pk"))

    def has(alloc, job: str, *kinds: str) -> list:
        found = ledger(alloc, job)
        got = [e.kind for e in found]
        for k in kinds:
            assert k in got, (job, got)
            got.remove(k)
        return found

    # A and C run until the test ends them (a machine under load must not see A finish
    # before C arrives: then nothing would need reclaiming); B runs 20 s each time.
    try:
        submit("a", "a-train", 2, run_ms=600_000)
        following(lambda: has(a, "a-train", "running"))
        submit("b", "b-sweep", 6, run_ms=20_000)
        following(lambda: has(b, "b-sweep", "running"))
        # A span, not a wait: B borrows for two seconds on purpose, so that the borrowing
        # lasts long enough to be recorded and priced before C takes its devices back.
        until = time.monotonic() + 2
        while time.monotonic() < until:
            follower.drain(wait=0.2)
        submit("c", "c-eval", 2, run_ms=600_000)
        following(lambda: has(b, "b-sweep", "preempted") and has(c, "c-eval", "running"))
        admin.delete("batch/v1", "Job", "a-train", a.namespace)  # A's 2 devices come free
        following(lambda: has(b, "b-sweep", "running", "running", "finished"), timeout=120)
    finally:
        for alloc, name in ((a, "a-train"), (c, "c-eval")):
            admin.delete("batch/v1", "Job", name, alloc.namespace)
        follower.close()
        b_pods.stop.set()
        b_workloads.stop.set()

    events = ledger(b, "b-sweep")
    kinds = [e.kind for e in events]
    assert kinds == ["submitted", "admitted", "pods", "scheduled", "running", "preempted",
                     "requeued", "admitted", "pods", "scheduled", "running", "finished"], kinds
    preempted = next(e for e in events if e.kind == "preempted")
    assert "reclaimed" in preempted.reason
    # Every step at the time Kubernetes recorded it: admissions and the preemption from the
    # Workload's conditions as they were shown, pods from the Pods.
    # (`kube_at`; `at` is the finest time the portal had, within its bound of that stamp.)
    assert preempted.kube_at in b_workloads.condition_times("Evicted")
    # Requeued when its pods had stopped and Kueue released its quota.
    requeued = next(e for e in events if e.kind == "requeued")
    assert requeued.kube_at in b_workloads.condition_times("QuotaReserved", "False")
    assert preempted.at <= requeued.at
    admissions = [e for e in events if e.kind == "admitted"]
    assert {e.kube_at for e in admissions} <= b_workloads.condition_times("Admitted") | \
        b_workloads.condition_times("QuotaReserved")
    runs = [e for e in events if e.kind == "running"]
    assert {e.kube_at for e in runs} <= b_pods.times, ({e.kube_at for e in runs}, b_pods.times)
    for e in events:
        # The step's span by the portal's best clock ([at - bound, at + bound]) meets the
        # second its stamp leaves open: an Event's time may lie up to the allowed clock skew
        # past that second, with its bound saying by how much.
        bound = dt.timedelta(seconds=e.at_bound_seconds)
        assert e.at - bound <= e.kube_at + STAMP and e.at + bound >= e.kube_at, e
    created = sorted(parse_time(p["metadata"]["creationTimestamp"]) for p in b_pods.objects)
    # Nothing ran without admission: every pod of B was created after one of its admissions.
    assert created and created[0] >= admissions[0].kube_at
    # The recovery seam: from the preemption to the pod running again.
    ((again, seconds),) = recoveries([(e.workload_uid, e.kind, e.at) for e in events])
    assert again == runs[1].at and seconds == (runs[1].at - preempted.at).total_seconds()
    assert preempted.at < admissions[1].at <= runs[1].at

    # Billing's borrowed device-seconds (the queue-hours the watch integrated) = the
    # ledger's: each admission borrowed 4 devices until its quota was released (its pods
    # stopped after the preemption: requeued) or it finished.
    ends = {id(admissions[0]): requeued.at,
            id(admissions[1]): next(e.at for e in events if e.kind == "finished")}
    by_ledger = sum(float(e.borrowed) * (ends[id(e)] - e.at).total_seconds()
                    for e in admissions)
    assert [e.borrowed for e in admissions] == [4, 4]
    start = admissions[0].at.replace(minute=0, second=0, microsecond=0)
    end = start + dt.timedelta(hours=2)
    billed = borrowed_device_seconds(list(allocs.values()), start, end)
    by_billing = sum(v for (alloc_id, _hour), v in billed.items() if alloc_id == b.pk)
    # Conditions and pod times are whole seconds, the watch records a moment after: per
    # boundary 4 devices × (1 s + 0.5 s).
    tolerance = 4 * 1.5 * 2 * len(admissions)
    assert abs(float(by_billing) - by_ledger) <= tolerance, (by_billing, by_ledger)
    assert {alloc_id for alloc_id, _hour in billed} == {b.pk}, billed  # A, C in quota
    print(f"\nBENCHMARK contention through placement: B borrowed {by_ledger:.1f} "
          f"device-s by the ledger, {float(by_billing):.1f} billed (± {tolerance:.0f}); "
          f"recovery after reclaim {seconds:.1f} s; "
          + ", ".join(f"{e.kind} {e.at:%H:%M:%S}" for e in events))


def test_benchmark_placement_rate(control_plane, simulated_fleet, placement):
    """Benchmark (printed, never a timed assertion): how fast the simulated factory places
    GPU pods — by the device plugin's extended resource, and by DRA claims made from a
    template (one whole GPU each) — beside Kubernetes' own published scheduling rates.
    Small by default; PORTAL_BENCH_FULL=1: 50 nodes, 400 pods of each kind."""
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from fleet.kube import KubeError

    admin = simulated_fleet
    full = os.environ.get("PORTAL_BENCH_FULL") == "1"
    nodes, pods = (50, 400) if full else (8, 64)
    tag = uuid.uuid4().hex[:5]
    pool, ns = f"rate-{tag}", f"rate-{tag}"
    names = [f"rate-{tag}-{i:02d}" for i in range(nodes)]
    for name in names:
        kwok_node(admin, name, {"aifactory.io/pool": pool})
        admin.apply(resource_slice(name, gpus=8), force=True)
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                force=True)
    admin.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                 "metadata": {"name": "one-gpu", "namespace": ns},
                 "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     "deviceClassName": "gpu.nvidia.com"}}]}}}}, force=True)
    bound: dict[str, float] = {}
    stop = threading.Event()
    _items, version = admin.list_path_versioned(f"/api/v1/namespaces/{ns}/pods")

    def follow() -> None:  # a watch of our own: when each pod got its node
        while not stop.is_set():
            try:
                for event in admin.watch_path(f"/api/v1/namespaces/{ns}/pods",
                                              resource_version=version, timeout_seconds=5):
                    pod = event.get("object") or {}
                    name = (pod.get("metadata") or {}).get("name")
                    if (pod.get("spec") or {}).get("nodeName") and name not in bound:
                        bound[name] = time.monotonic()
            except KubeError:
                return

    threading.Thread(target=follow, daemon=True).start()

    def pod(name: str, dra: bool) -> dict:
        container = {"name": "c", "image": IMAGE, "resources": {}}
        spec = {"nodeSelector": {"aifactory.io/pool": pool}, "containers": [container]}
        if dra:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
            container["resources"]["claims"] = [{"name": "gpu"}]
        else:
            container["resources"] = {"requests": {"nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": ns, "annotations": start_delays(run_ms=600_000)},
            "spec": spec}

    def run(kind: str, dra: bool) -> tuple[float, float]:
        batch = [f"{kind}-{i:04d}" for i in range(pods)]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as workers:
            list(workers.map(lambda n: admin.apply(pod(n, dra), force=True), batch))
        created = time.monotonic() - started
        eventually(lambda: _all_bound(batch, bound), timeout=120 if full else 60)
        last = max(bound[n] for n in batch)
        return pods / (last - started), pods / created

    try:
        plugin_rate, plugin_created = run("plugin", dra=False)
        dra_rate, dra_created = run("dra", dra=True)
        # Every claim got its own device: no GPU of a slice was given twice.
        claims = [c for c in admin.list("resource.k8s.io/v1", "ResourceClaim", namespace=ns)
                  if (c.get("status") or {}).get("allocation")]
        devices = [(r["pool"], r["device"]) for c in claims
                   for r in c["status"]["allocation"]["devices"]["results"]]
        assert len(devices) == pods and len(set(devices)) == pods
        per_node = {}
        for p in admin.list("v1", "Pod", namespace=ns):
            if p["metadata"]["name"].startswith("plugin-"):
                per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        assert max(per_node.values()) <= 8  # a node's eight GPUs, never more
    finally:
        stop.set()
        admin.delete("v1", "Namespace", ns)
        for name in names:
            admin.delete("resource.k8s.io/v1", "ResourceSlice", f"{name}-gpu.nvidia.com")
            admin.delete("v1", "Node", name)
    print(f"\nBENCHMARK placement rate ({nodes} kwok nodes × 8 GPUs, {pods} pods each"
          f"{'' if full else '; PORTAL_BENCH_FULL=1 for 50 nodes, 400 pods'}): device "
          f"plugin {plugin_rate:.0f} pods/s (created at {plugin_created:.0f}/s), DRA claim "
          f"from a template {dra_rate:.0f} pods/s (created at {dra_created:.0f}/s), "
          "submit → bound. Anchor, Kubernetes' scheduler_perf thresholds (in-process "
          "scheduler, no kubelets, its CI machines): SchedulingBasic/5000Nodes_10000Pods "
          "680 pods/s, SchedulingWithResourceClaimTemplate/5000pods_500nodes 56 pods/s "
          "(\"typically above 70\"). Here: 2 cores shared by etcd, the API server, kcm, "
          "Kueue, the scheduler and kwok, and pod creation through the API counted in.")


def _all_bound(names: list[str], bound: dict) -> None:
    missing = [n for n in names if n not in bound]
    assert not missing, f"{len(missing)} not bound yet"
