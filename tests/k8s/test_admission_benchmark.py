"""Benchmark, not a timed assertion: what the isolation guards cost every other tenant, in
four shapes: this portal's (shared policies that read only the pod and its namespace's
labels; one params object per block, read by the check alone), the one before it (the same
policies, every block's check entry in one params object under a field manager per block:
tests/k8s/legacy_check_entries.py), the one before that (shared policies reading one
GuardParams object that listed every block: tests/k8s/legacy_shared_guards.py), and the
oldest (ten admission objects per dedicated block: tests/k8s/legacy_guards.py). Pods are
created in an unrelated namespace of the real API server with 0 and then N blocks guarded,
and it prints the creates' latency from the client (p50/p99), the API server's own
validating-admission time per create (`apiserver_admission_step_admission_duration_seconds`,
its sum over its count), the admission objects in the cluster, and the API server's and
controller manager's CPU per added block (applying its guards until its check refuses the
probe, and the controller manager's type check of every new policy), and, for this shape,
the latency at the largest N over that at 0.

Default N = 20; PORTAL_BENCH_FULL=1: 100 and 500. PORTAL_BENCH_PROFILE=1: also, at each N of
the shapes with params, the size of the params object and the API server's own CPU profile
while pods are created (its pprof endpoint, read with `go tool pprof`): the share spent
turning params into a CEL value, the step that grew with the fleet. Rerun alone:
    make test ARGS="tests/k8s/test_admission_benchmark.py"
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import uuid

from fleet.allocations.admission import (
    LEGACY_CHECK_PARAMS,
    LEGACY_GUARD_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
    check_params_name,
    is_guard_params,
)
from fleet.allocations.guard_check import GUARD_DIGEST_LABEL, guard_probe, is_guard_check
from fleet.allocations.manifests import guard_manifests
from fleet.kube import KubeError
from fleet.models import Route
from tests.factories import spec

from .conftest import delete_check_params, empty_guard_params, eventually
from .legacy_check_entries import entries_manager, one_object_check, one_object_params
from .legacy_guards import legacy_guards, legacy_probe
from .legacy_shared_guards import block_params, legacy_check, legacy_shared_probe, shared_policies
from .workloads import pod_spec

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
SIZES = (0, 100, 500) if FULL else (0, 20)
PODS = 60 if FULL else 30
PROFILE = os.environ.get("PORTAL_BENCH_PROFILE") == "1"
PROFILE_SECONDS = 10
# Frames of the API server's validating-admission path, outermost first: the policy
# dispatch, the activation built for each evaluation, and the params' conversion in it.
FRAMES = ("validating.(*dispatcher).Dispatch", "plugin/cel.newActivation",
          "cel/common.SchemalessTypedToVal", "unstructured.(*Unstructured).MarshalJSON")
STEP = re.compile(r'^apiserver_admission_step_admission_duration_seconds_(sum|count)\{([^}]*)\}'
                  r' ([0-9.e+-]+)$')
GROUP = "admissionregistration.k8s.io/v1"


def _validating(admin) -> tuple[float, float]:
    """(seconds, admissions) of the API server's validating step for creates, so far."""
    body = admin.api_client.call_api("/metrics", "GET", auth_settings=["BearerToken"],
                                     _preload_content=False, _return_http_data_only=True)
    text = body.data.decode()
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        m = STEP.match(line)
        if m and 'type="validate"' in m.group(2) and 'operation="CREATE"' in m.group(2):
            total[m.group(1)] += float(m.group(3))
    return total["sum"], total["count"]


def _block(i: int, tag: str):
    return spec(Route.DEDICATED_BLOCK, allocation_id=900_000 + i, tenant=f"t{tag}{i}",
                namespace=f"t{tag}{i}-r1", nodes=(f"bench-{tag}-{i}",), whole_devices=8)


def _creates(admin, namespace: str) -> tuple[list[float], float]:
    """Client latency of PODS pod creates (ms), and the API server's validating time per
    create over them (ms)."""
    before = _validating(admin)
    times = []
    for i in range(PODS):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"p{i:03d}-{uuid.uuid4().hex[:4]}", "namespace": namespace},
               "spec": pod_spec()}
        t0 = time.perf_counter()
        admin.apply(pod)
        times.append((time.perf_counter() - t0) * 1000)
    after = _validating(admin)
    per = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
    return sorted(times), per


def _params_size(admin, name: str) -> tuple[int, int]:
    """(bytes of the params object as JSON, its managedFields entries)."""
    live = admin.get(PARAMS_API, PARAMS_KIND, name) or {}
    return len(json.dumps(live)), len(live.get("metadata", {}).get("managedFields") or [])


def _profile(admin, namespace: str) -> dict[str, float]:
    """The API server's CPU profile while pods are created without pause: each of FRAMES'
    share of its CPU (cumulative %)."""
    stop = threading.Event()

    def create() -> None:
        i = 0
        while not stop.is_set():
            admin.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"prof{i:05d}-{uuid.uuid4().hex[:4]}", "namespace": namespace},
                "spec": pod_spec()})
            i += 1

    worker = threading.Thread(target=create)
    worker.start()
    try:
        body = admin.api_client.call_api(
            "/debug/pprof/profile", "GET", query_params=[("seconds", str(PROFILE_SECONDS))],
            auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True)
    finally:
        stop.set()
        worker.join()
    path = f"/tmp/aifactory-apiserver-{uuid.uuid4().hex[:6]}.pprof"
    with open(path, "wb") as out:
        out.write(body.data)
    top = subprocess.run(["go", "tool", "pprof", "-top", "-cum", "-nodecount=2000",
                          "-nodefraction=0", "-edgefraction=0", path],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    shares = {}
    for line in top.splitlines():
        cols = line.split()
        frame = next((f for f in FRAMES if len(cols) == 6 and cols[5].endswith(f)), None)
        if frame and frame not in shares:
            shares[frame] = float(cols[4].rstrip("%"))
    return shares


def _in_force(admin, probe) -> bool:
    """Whether the check (of either shape) refuses the probe for its digest."""
    digest = probe["metadata"]["labels"][GUARD_DIGEST_LABEL]
    try:
        admin.apply(probe, dry_run=True)
    except KubeError as exc:
        return f"(digest {digest})" in exc.message and "are in force" in exc.message
    return False


def _type_checked(admin, names: list[str]) -> bool:
    """Whether the controller manager has type-checked every one of these policies."""
    for name in names:
        live = admin.get(GROUP, "ValidatingAdmissionPolicy", name) or {}
        if (live.get("status") or {}).get("observedGeneration") != \
                live.get("metadata", {}).get("generation"):
            return False
    return True


def _legacy(admin, n: int, have: int, tag: str) -> tuple[list[dict], dict | None]:
    """Blocks have..n-1 guarded the old way: their objects applied; the last one's probe."""
    objects = [m for i in range(have, n) for m in legacy_guards(_block(i, tag))]
    for obj in objects:
        admin.apply(obj, force=True)
    return objects, legacy_probe(_block(n - 1, tag)) if n else None


def _listing(admin, n: int, have: int, tag: str) -> tuple[list[dict], dict | None]:
    """Blocks have..n-1 guarded the previous way: each block's keys in the listing params
    under its own field manager, the shared policies and check once."""
    objects = [*shared_policies(("kube-system",)), *legacy_check()]
    for i in range(have, n):
        admin.apply(block_params(_block(i, tag)), force=True,
                    field_manager=entries_manager("bench", 900_000 + i))
        if i == 0:
            for obj in objects:
                admin.apply(obj, force=True)
    return (objects if n else []), legacy_shared_probe(_block(n - 1, tag)) if n else None


def _one_object(admin, n: int, have: int, tag: str) -> tuple[list[dict], dict | None]:
    """Blocks have..n-1 guarded the way before this one: the shared guards once, then each
    block's check entry in the one params object under its own field manager."""
    objects = []
    for i in range(have, n):
        manifests = guard_manifests(_block(i, tag))
        params = next(m for m in manifests if is_guard_params(m))
        admin.apply(one_object_params(params), force=True,
                    field_manager=entries_manager("bench", 900_000 + i))
        if i == 0:
            objects = [m for m in manifests if not is_guard_params(m) and
                       not is_guard_check(m)] + one_object_check()
            for obj in objects:  # shared: applied once (policies, bindings, check)
                admin.apply(obj, force=True)
    return objects, guard_probe(guard_manifests(_block(n - 1, tag))) if n else None


def _current(admin, n: int, have: int, tag: str) -> tuple[list[dict], dict | None]:
    """Blocks have..n-1 guarded this portal's way: the shared guards once, then each
    block's own params object, as provisioning applies them."""
    objects = []
    for i in range(have, n):
        manifests = guard_manifests(_block(i, tag))
        admin.apply(next(m for m in manifests if is_guard_params(m)), force=True)
        if i == 0:
            objects = [m for m in manifests if not is_guard_params(m)]
            for obj in objects:  # shared: applied once (policies, bindings, check)
                admin.apply(obj, force=True)
    return objects, guard_probe(guard_manifests(_block(n - 1, tag))) if n else None


def _params_of(shape, n: int) -> str:
    """The params object a shape's check (or guards) read for the last block."""
    return {_listing: LEGACY_GUARD_PARAMS, _one_object: LEGACY_CHECK_PARAMS,
            _current: check_params_name(900_000 + n - 1)}[shape]


def _clear(admin) -> None:
    """No guard of earlier tests: the objects counted are this run's."""
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        for obj in admin.list(GROUP, kind,
                              label_selector="app.kubernetes.io/managed-by=aifactory-portal"):
            admin.delete(GROUP, kind, obj["metadata"]["name"])
    delete_check_params(admin)
    empty_guard_params(admin, LEGACY_CHECK_PARAMS)
    empty_guard_params(admin, LEGACY_GUARD_PARAMS)


def _run(shape, control_plane, admin, tag: str) -> list[tuple]:
    _clear(admin)
    namespace = f"bystander-{tag}"
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    rows, have = [], 0
    try:
        for n in SIZES:
            cpu = control_plane.cpu_seconds()
            started = time.monotonic()
            objects, probe = shape(admin, n, have, tag)
            if probe:
                eventually(lambda p=probe: _in_force(admin, p), timeout=180,
                           what="the guards in force")
            loaded = time.monotonic() - started
            policies = [o["metadata"]["name"] for o in objects
                        if o["kind"] == "ValidatingAdmissionPolicy"]
            eventually(lambda ps=policies: _type_checked(admin, ps), timeout=180,
                       what="every new policy type-checked")
            spent = {k: v - cpu.get(k, 0.0) for k, v in control_plane.cpu_seconds().items()}
            added = max(1, n - have)
            live = sum(len(admin.list(GROUP, kind, label_selector="app.kubernetes.io/"
                                      "managed-by=aifactory-portal"))
                       for kind in ("ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding"))
            times, server_ms = _creates(admin, namespace)
            assert len(times) == PODS
            if PROFILE and shape is not _legacy:
                size, managers = _params_size(admin, _params_of(shape, n))
                shares = _profile(admin, namespace)
                # With guards, the dispatch runs on every create: a profile without it
                # measured nothing.
                assert not n or shares.get(FRAMES[0], 0) > 0, shares
                print(f"\nPROFILE admission, {shape.__name__[1:]} shape, {n} dedicated blocks: "
                      f"params object {size:,} bytes "
                      f"of JSON, {managers} managedFields entries; of the API server's CPU "
                      "while creating pods: " + ", ".join(
                          f"{f} {shares.get(f, 0.0):.1f}%" for f in FRAMES))
            rows.append((n, live, loaded, times[len(times) // 2],
                         times[min(len(times) - 1, int(len(times) * 0.99))], server_ms,
                         spent.get("kube-apiserver", 0.0) / added * 1000,
                         spent.get("kube-controller-manager", 0.0) / added * 1000,
                         n > have))
            have = n
    finally:
        _clear(admin)
        admin.delete("v1", "Namespace", namespace)
    return rows


def test_benchmark_admission_latency_in_four_shapes(control_plane, admin_kube):
    tag = uuid.uuid4().hex[:4]
    # One shape at a time, the cluster cleared between them: each row at 0 is measured alike.
    current = _run(_current, control_plane, admin_kube, f"c{tag}")
    one_object = _run(_one_object, control_plane, admin_kube, f"e{tag}")
    listing = _run(_listing, control_plane, admin_kube, f"l{tag}")
    old = _run(_legacy, control_plane, admin_kube, f"o{tag}")
    for name, rows in (("label-reading guards, a check params object per block (this portal)",
                        current),
                       ("label-reading guards, every check entry in one object (the previous "
                        "portal)", one_object),
                       ("guards reading a params list of every block (the one before)",
                        listing),
                       ("per-allocation guards (older portals)", old)):
        for n, live, loaded, p50, p99, server_ms, api_ms, kcm_ms, added in rows:
            cost = (f"; CPU per added block: kube-apiserver {api_ms:.1f} ms, "
                    f"kube-controller-manager {kcm_ms:.1f} ms" if added else "")
            print(f"\nBENCHMARK admission, {name}, {n} dedicated blocks ({live} admission "
                  f"objects, in force {loaded:.1f}s after the first apply): a pod create in an "
                  f"unrelated namespace p50 {p50:.1f} ms, p99 {p99:.1f} ms from the client; "
                  f"the API server's validating admission {server_ms:.2f} ms per create "
                  f"({PODS} creates){cost}")
    first, last = current[0], current[-1]
    print(f"\nBENCHMARK admission, this portal at {last[0]} blocks over 0: client p50 "
          f"{last[3] / first[3]:.2f}x, p99 {last[4] / first[4]:.2f}x; validating admission "
          f"+{last[5] - first[5]:.2f} ms per create")
    # The shared shapes' objects do not grow with blocks; the oldest one's do, ten a block.
    assert len({live for _n, live, *_ in current if _n}) == 1
    assert len({live for _n, live, *_ in one_object if _n}) == 1
    assert len({live for _n, live, *_ in listing if _n}) == 1
    assert [live for _n, live, *_ in old] == [10 * n for n in SIZES]
    # At 0 blocks every shape leaves the cluster as it was.
    assert current[0][1] == one_object[0][1] == listing[0][1] == old[0][1] == 0
