"""Benchmark, not a timed assertion: what the isolation guards cost every other tenant. Pods
are created in an unrelated namespace of the real API server with 0 and then N dedicated
blocks' guards in place (each block's ValidatingAdmissionPolicies and bindings, as the
portal renders them today: ten admission objects per block), and it prints the creates'
latency from the client (p50/p99) and the API server's own validating-admission time per
create (`apiserver_admission_step_admission_duration_seconds`, its sum over its count).

The baseline for the shared, parameterised guards of issue #44. Default N = 20;
PORTAL_BENCH_FULL=1: 100 and 500. Rerun alone:
    make test ARGS="tests/k8s/test_admission_benchmark.py"
"""

from __future__ import annotations

import os
import re
import time
import uuid

from fleet.allocations.manifests import (
    GUARD_KIND_NAMES,
    guard_check_answer,
    guard_probe,
    render_manifests,
)
from fleet.kube import KubeError
from fleet.models import Route
from tests.factories import spec

from .conftest import eventually
from .workloads import pod_spec

FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
SIZES = (0, 100, 500) if FULL else (0, 20)
PODS = 60 if FULL else 30
STEP = re.compile(r'^apiserver_admission_step_admission_duration_seconds_(sum|count)\{([^}]*)\}'
                  r' ([0-9.e+-]+)$')


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


def _guards(n: int, tag: str) -> list[dict]:
    out = []
    for i in range(n):
        s = spec(Route.DEDICATED_BLOCK, allocation_id=900_000 + i, tenant=f"t{tag}{i}",
                 namespace=f"t{tag}{i}-r1", nodes=(f"bench-{tag}-{i}",), whole_devices=8)
        out += [m for m in render_manifests(s) if m["kind"] in GUARD_KIND_NAMES]
    return out


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


def test_benchmark_admission_latency_with_guards_in_place(admin_kube):
    tag = uuid.uuid4().hex[:4]
    namespace = f"bystander-{tag}"
    admin_kube.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": namespace}})
    rows, applied = [], []
    try:
        for n in SIZES:
            guards = _guards(n, tag)[len(applied):]
            started = time.monotonic()
            for obj in guards:
                admin_kube.apply(obj, force=True)
            applied += guards
            loaded = time.monotonic() - started
            if n:  # the last block's check refuses its probe once every policy is loaded
                last = spec(Route.DEDICATED_BLOCK, allocation_id=900_000 + n - 1,
                            tenant=f"t{tag}{n - 1}", namespace=f"t{tag}{n - 1}-r1",
                            nodes=(f"bench-{tag}-{n - 1}",), whole_devices=8)
                probe = guard_probe(render_manifests(last))

                def in_force(probe=probe) -> bool:
                    try:
                        admin_kube.apply(probe, dry_run=True)
                    except KubeError as exc:
                        return guard_check_answer(probe, exc.status, exc.message) == "current"
                    return False

                eventually(in_force, timeout=120, what="the guards in force")
            times, server_ms = _creates(admin_kube, namespace)
            rows.append((n, loaded, times[len(times) // 2],
                         times[min(len(times) - 1, int(len(times) * 0.99))], server_ms))
            assert len(times) == PODS
    finally:
        for obj in reversed(applied):
            admin_kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        admin_kube.delete("v1", "Namespace", namespace)
    for n, loaded, p50, p99, server_ms in rows:
        print(f"\nBENCHMARK admission, {n} dedicated blocks' guards ({10 * n} admission "
              f"objects, applied in {loaded:.1f}s): a pod create in an unrelated namespace "
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms from the client; the API server's "
              f"validating admission {server_ms:.2f} ms per create ({PODS} creates)")
