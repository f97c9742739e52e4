"""Benchmark, not a timed assertion: approvals across the four routes provisioned end to end
by a real Celery worker against the real API server, next to `kubectl apply --server-side`
of the same rendered objects (renamed into fresh namespaces) against the same server.

Default: 20 allocations (5 per route); PORTAL_BENCH_FULL=1: 100. Each allocation's first
Job is submitted the moment it is active, as a tenant would (PORTAL_BENCH_FIRST_JOBS=0: none,
the same work as kubectl's alone); PORTAL_TEST_KUEUE_QPS=kueue runs Kueue with its own
client defaults (20/30) instead of the tier's 200/400. It prints CPU per program and the
API server's requests by verb and resource in both phases. Rerun alone:
    make test ARGS="tests/k8s/test_provisioning_benchmark.py"
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from fleet.allocations.apply import apply_together
from fleet.allocations.desired import allocation_manifests
from fleet.allocations.manifests import apply_waves
from fleet.inventory.sync import fleet_sync
from fleet.kube import set_backend
from fleet.models import Allocation, Pool, Route
from intake import services
from portal.celery import app
from tenants.models import AuditEvent
from tests.factories import make_request
from tests.harness.controlplane import ensure_kubectl
from tests.harness.kueue import kueue_client_connection
from tests.harness.procs import ManagedProcess, celery_worker, wait_until
from tests.harness.waiting import eventually

from .approvals import ROUTE_REQUESTS, VALID
from .gpu_nodes import create_gpu_node
from .workloads import WORKLOADS, condition, first_job

pytestmark = pytest.mark.django_db(transaction=True)
FULL = os.environ.get("PORTAL_BENCH_FULL") == "1"
# PORTAL_BENCH_FIRST_JOBS=0: no tenant submits work meanwhile (the kubectl phase runs none:
# the ratio of the same work alone).
FIRST_JOBS = os.environ.get("PORTAL_BENCH_FIRST_JOBS", "1") != "0"
PER_ROUTE = 25 if FULL else 5


def kubectl() -> str:
    """The machine's kubectl, or one built from the Go module proxy next to the API server."""
    found = shutil.which("kubectl")
    if found:
        return found
    return str(ensure_kubectl())


def renamed(manifest: dict, namespace: str, suffix: str, allocation_id: int) -> dict:
    """The same object for a fresh namespace: every occurrence of the allocation's namespace
    (its name, the names of its cluster-scoped objects, their references) gets a suffix. The
    admission guards are shared by every allocation, so kubectl applies them as the portal
    does: over what is there (the allocation's keys in the params included)."""
    return json.loads(json.dumps(manifest).replace(f'"{namespace}', f'"{namespace}{suffix}'))


def test_benchmark_provisioning_against_kubectl(control_plane, admin_kube, portal_kube, pools,
                                                 tenant, lead, admin_user, tmp_path, kueue):
    set_backend(portal_kube)
    shared_routes = (Route.SHARED_POOL, Route.MIG_VCLUSTER, Route.CONFIDENTIAL_POOL)
    # No ceiling: the nodes made below are the capacity.
    Pool.objects.filter(pk__in=[p.pk for p in pools.values()]).update(capacity_devices=0)
    for node in admin_kube.list("v1", "Node"):
        admin_kube.delete("v1", "Node", node["metadata"]["name"])
    for i in range(PER_ROUTE):  # one whole node per dedicated block
        create_gpu_node(admin_kube, f"bench-blk-{i:03d}",
                        labels={**VALID, "aifactory.io/pool": "dedicated"})
    # The other pools promise only what validated nodes hold: a node each per allocation
    # (every request here fits one node of 8).
    for route in shared_routes:
        pool = pools[route]
        for i in range(PER_ROUTE):
            create_gpu_node(admin_kube, f"bench-{pool.slug}-{i:03d}", product=pool.gpu_model,
                            labels={**VALID, "aifactory.io/pool": pool.slug,
                                    "aifactory.io/bios-profile": "confidential"
                                    if route == Route.CONFIDENTIAL_POOL else "performance"})
    fleet_sync(backend=portal_kube)
    requests = [make_request(tenant, lead, submit=True, **ROUTE_REQUESTS[route])
                for route in ROUTE_REQUESTS for _ in range(PER_ROUTE)]

    # As docker-compose.yml runs it: prefork, two processes (one per core here).
    worker = celery_worker(tmp_path / "worker.log", pool=("--concurrency=2",),
                           PORTAL_KUBE_BACKEND="kubeconfig",
                           PORTAL_KUBECONFIG=str(control_plane.portal_kubeconfig))
    first_jobs = FirstJobs(admin_kube, expected=len(requests))
    tenants = Tenants(first_jobs)
    app.conf.task_always_eager = False
    try:
        # A worker of a running platform is up before anyone approves: its start (Python,
        # Django, Celery, two pool processes discovering the API) is not provisioning time.
        # (Until this round the clock started before it, and counted the start as
        # provisioning.)
        worker_log = tmp_path / "worker.log"

        def worker_ready() -> bool:
            worker.raise_if_dead()
            text = worker_log.read_text(errors="replace") if worker_log.exists() else ""
            return " ready." in text and \
                text.count("Kubernetes API discovered at worker start") == 2

        wait_until(worker_ready, timeout=120, what="the Celery worker and its two processes")
        cpu_before, requests_before = cpu_by_program(), api_requests(admin_kube)
        started = time.monotonic()
        if FIRST_JOBS:
            tenants.start()  # the tenants act on their own, while the admin still approves
        for req in requests:
            services.request_approve(request=req, by=admin_user, reason="bench")
        approved = time.monotonic()
        ids = list(Allocation.objects.values_list("pk", flat=True))

        def all_active() -> None:
            worker.raise_if_dead()
            tenants.raise_if_failed()
            active = Allocation.objects.filter(pk__in=ids, status="active").count()
            assert active == len(ids), f"{active} of {len(ids)} active"

        eventually(all_active, timeout=600 if FULL else 180)
        done = time.monotonic()
        cpu_portal = cpu_spent(cpu_before)
        requests_portal = api_requests(admin_kube) - requests_before
        rss = worker_rss_mib(worker)
        if FIRST_JOBS:
            # Kueue gone stops the wait at once; a timeout says what Kueue made of the Jobs.
            eventually(tenants.finished, timeout=180, between=kueue.raise_if_dead,
                       detail=lambda: f"{first_jobs.stuck()}\nKueue's log, last lines:\n"
                                      f"{kueue.log_tail(60)}")
    finally:
        tenants.stop.set()
        if tenants.is_alive():
            tenants.join(timeout=30)
        app.conf.task_always_eager = True
        worker.stop()
    if FIRST_JOBS:
        first_jobs.all_admitted()
    active = Allocation.objects.filter(status="active").count()
    assert active == len(requests), f"{active} of {len(requests)} active"
    # Each pool process discovered the API as it started, not on its first task.
    log = (tmp_path / "worker.log").read_text()
    assert log.count("Kubernetes API discovered at worker start") == 2, log[-3000:]
    continuations = log.count("'provisioning'")  # a task that handed the guards' wait back

    manifests = []
    for alloc in Allocation.objects.all():
        manifests += [renamed(m, alloc.namespace, "-k", alloc.pk)
                      for m in allocation_manifests(alloc)]
    path = tmp_path / "objects.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))
    cpu_before, requests_before = cpu_by_program(), api_requests(admin_kube)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_k = time.monotonic()
    result = subprocess.run(
        [kubectl(), f"--kubeconfig={control_plane.admin_kubeconfig}", "apply",
         "--server-side", "--force-conflicts", "--field-manager=bench-kubectl", "-f", str(path)],
        capture_output=True, text=True, timeout=900)
    kubectl_s = time.monotonic() - started_k
    cpu_kubectl = cpu_spent(cpu_before)
    requests_kubectl = api_requests(admin_kube) - requests_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # kubectl itself, ended by now
    cpu_kubectl = sorted([*cpu_kubectl, ("kubectl", after.ru_utime + after.ru_stime
                                         - children.ru_utime - children.ru_stime)],
                         key=lambda x: -x[1])
    assert result.returncode == 0, result.stderr[-2000:]
    started_a = time.monotonic()
    for alloc in Allocation.objects.all():
        for wave in apply_waves([renamed(m, alloc.namespace, "-a", alloc.pk)
                                 for m in allocation_manifests(alloc)]):
            apply_together(portal_kube, wave)
    adapter_s = time.monotonic() - started_a
    portal_s = done - started
    waits = [e.data["guards_in_force_seconds"] for e in AuditEvent.objects.filter(
        subject_type="allocation", subject_id__in=ids, action="allocation.active")
        if "guards_in_force_seconds" in e.data]
    assert len(waits) == 2 * PER_ROUTE  # the dedicated and confidential allocations
    per_route = approval_to_active_by_route(ids)
    admitted = first_jobs.by_route()
    print(f"\nBENCHMARK provisioning: {len(requests)} allocations "
          f"({PER_ROUTE} per route), {len(manifests)} objects; approvals "
          f"{approved - started:.1f}s, "
          f"approval→all active {portal_s:.1f}s through a real worker (2 processes) "
          f"(after the last approval {done - approved:.1f}s); kubectl apply --server-side "
          f"of the same objects {kubectl_s:.1f}s; ratio {portal_s / kubectl_s:.2f}x "
          f"(the adapter alone, in waves, one process: {adapter_s:.1f}s, "
          f"{adapter_s / kubectl_s:.2f}x) "
          f"(goal 0.5x); worker RSS {rss} MiB; waiting for the API server to put the "
          f"guards of {len(waits)} allocations in force (kubectl does not wait): "
          f"{sum(waits):.1f}s in all, {max(waits):.2f}s at most, the processes taking other "
          f"allocations meanwhile ({continuations} tasks handed the wait back)")
    # The machine has two cores: whoever needs less CPU in all finishes first. Where it went.
    for phase, spent, took in (("portal", cpu_portal, portal_s), ("kubectl", cpu_kubectl,
                                                                   kubectl_s)):
        top = ", ".join(f"{name} {sec:.1f}" for name, sec in spent[:7])
        print(f"BENCHMARK provisioning CPU s, {phase} phase ({took:.1f}s on "
              f"{os.cpu_count()} cores): {sum(s for _, s in spent):.1f} in all — {top}")
    # And what the API server was asked, by whom it cannot say: the portal's requests, the
    # tenants' first Jobs and every controller's, against kubectl's (counts; seconds served).
    for phase, asked in (("portal", requests_portal), ("kubectl", requests_kubectl)):
        top = ", ".join(f"{what} {n:,}" for what, n in asked.most_common(10))
        print(f"BENCHMARK provisioning API requests, {phase} phase: "
              f"{sum(asked.values()):,} in all — {top}")
    for route, (median, most, last) in per_route.items():
        first = admitted.get(route)
        print(f"BENCHMARK provisioning {route:18s} approval→active median {median:.1f}s, "
              f"at most {most:.1f}s; its last active {last:.1f}s after the first approval" + (
                  f"; approval→its first Job admitted by Kueue median {first['median']:.1f}s, "
                  f"at most {first['most']:.1f}s (submitted when active, admitted "
                  f"{first['after_active']:.1f}s later, median)" if first else
                  " (no first Jobs: PORTAL_BENCH_FIRST_JOBS=0)"))
    client = kueue_client_connection().get("clientConnection", "Kueue's defaults")
    for route, first in admitted.items():  # where a first Job's wait goes, by Kueue's clock
        reasons = "; ".join(f"{n}× {why}" for why, n in first["pending"]) or "none"
        print(f"BENCHMARK first Job {route:18s} (Kueue's client {client}) Workload made "
              f"{first['created']:.0f}s after the Job (median), quota reserved "
              f"{first['reserved']:.0f}s after that (median; at most "
              f"{first['reserved_most']:.0f}s); Kueue's pending reasons seen: {reasons}")


class Tenants(threading.Thread):
    """The tenants, on a thread of their own from the first approval on: every 0.2 s, a
    first Job for each allocation that became active, and a look at their Workloads. (Until
    this round the benchmark's one thread approved every request before any tenant looked,
    so a first Job waited for the admin's last approval.)"""

    def __init__(self, first_jobs: FirstJobs) -> None:
        super().__init__(daemon=True, name="tenants")
        self.first_jobs, self.stop, self.error = first_jobs, threading.Event(), None

    def run(self) -> None:
        try:
            while not self.stop.is_set() and not self.first_jobs.done():
                self.first_jobs.submit_for_active()
                self.first_jobs.poll()
                self.stop.wait(0.2)
        except Exception as exc:  # seen by the main thread's waits
            self.error = exc
        finally:
            connection.close()  # this thread's own database connection

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the tenants' thread failed: {self.error!r}")

    def finished(self) -> None:
        self.raise_if_failed()
        assert not self.is_alive(), (f"{len(self.first_jobs.jobs)} first Jobs not admitted, "
                                     f"{len(self.first_jobs.submitted)} submitted")


class FirstJobs:
    """Each tenant's first work, as a tenant submits it: a one-device Job to the allocation's
    LocalQueue the moment the portal says the allocation is active (polled every 0.2 s, the
    other allocations still provisioning). Per route: approval → Kueue admitted it (the
    number a tenant waits for), active → admitted, split where Kueue's own timestamps allow
    (Job submitted → Workload created → quota reserved, in Kubernetes' whole seconds), and
    the reasons Kueue gave while it was pending, most seen first."""

    def __init__(self, admin, expected: int) -> None:
        self.admin, self.expected = admin, expected
        self.jobs: dict[tuple[str, str], tuple[Allocation, dt.datetime]] = {}
        self.submitted: set[int] = set()
        self.rows: dict[str, list[tuple[float, float, float, float]]] = {}
        self.pending: dict[str, Counter] = {}

    def submit_for_active(self) -> None:
        for alloc in Allocation.objects.filter(status=Allocation.Status.ACTIVE).exclude(
                pk__in=self.submitted):
            body = first_job(alloc, self.admin)
            self.admin.apply(body)
            self.submitted.add(alloc.pk)
            self.jobs[(alloc.namespace, body["metadata"]["name"])] = (
                alloc, dt.datetime.now(dt.UTC))

    def poll(self) -> None:
        for wl in self.admin.list(*WORKLOADS):
            owners = wl["metadata"].get("ownerReferences") or []
            key = (wl["metadata"]["namespace"], owners[0]["name"] if owners else "")
            if key not in self.jobs:
                continue
            alloc, submitted = self.jobs[key]
            quota = condition(wl, "QuotaReserved")
            if condition(wl, "Admitted").get("status") == "True":
                del self.jobs[key]
                now = dt.datetime.now(dt.UTC)
                made = kube_time(wl["metadata"]["creationTimestamp"])
                self.rows.setdefault(alloc.route, []).append((
                    (now - alloc.created_at).total_seconds(),
                    (now - submitted).total_seconds(),
                    (made - submitted.replace(microsecond=0)).total_seconds(),
                    (kube_time(quota["lastTransitionTime"]) - made).total_seconds()))
            elif quota.get("status") == "False":
                # Kueue's words for this pending moment, the numbers in them left out
                words = re.sub(r"\d+(\.\d+)?", "N", quota.get("message") or "")[:140]
                self.pending.setdefault(alloc.route, Counter())[
                    f"{quota.get('reason')}: {words}"] += 1

    def done(self) -> bool:
        return len(self.submitted) == self.expected and not self.jobs

    def stuck(self, most: int = 5) -> str:
        """The first Jobs still waiting, each with its Workload's conditions as Kueue wrote
        them (or that it has none), for a failure to say where they stopped."""
        workloads = {(wl["metadata"]["namespace"], (wl["metadata"].get("ownerReferences")
                                                    or [{}])[0].get("name", "")): wl
                     for wl in self.admin.list(*WORKLOADS)}
        lines = []
        for key in sorted(self.jobs)[:most]:
            wl = workloads.get(key)
            said = "no Workload" if wl is None else "; ".join(
                f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message', '')[:160]})"
                for c in (wl.get("status") or {}).get("conditions") or []) or "no conditions"
            lines.append(f"  {key[0]}/{key[1]}: {said}")
        return "first Jobs waiting:\n" + "\n".join(lines)

    def all_admitted(self) -> None:
        assert self.done(), f"{len(self.jobs)} first Jobs not admitted: {sorted(self.jobs)[:5]}"

    def by_route(self) -> dict[str, dict]:
        return {route: {"median": statistics.median(r[0] for r in rows),
                        "most": max(r[0] for r in rows),
                        "after_active": statistics.median(r[1] for r in rows),
                        "created": statistics.median(r[2] for r in rows),
                        "reserved": statistics.median(r[3] for r in rows),
                        "reserved_most": max(r[3] for r in rows),
                        "pending": self.pending.get(route, Counter()).most_common(3)}
                for route, rows in sorted(self.rows.items())}


def kube_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def api_requests(admin) -> Counter:
    """The API server's requests served so far (its own counter), by verb and resource:
    "APPLY clusterqueues", "PATCH workloads/status", "dry-run APPLY namespaces" (watches
    left out: they are held open, not served)."""
    body = admin.api_client.call_api("/metrics", "GET", auth_settings=["BearerToken"],
                                     _preload_content=False, _return_http_data_only=True)
    out: Counter = Counter()
    for line in body.data.decode().splitlines():
        m = REQUEST_TOTAL.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("verb") == "WATCH":
            continue
        what = labels.get("resource", "?") + (f"/{labels['subresource']}"
                                              if labels.get("subresource") else "")
        dry = "dry-run " if labels.get("dry_run") else ""
        out[f"{dry}{labels.get('verb', '?')} {what}"] += int(float(m.group(2)))
    return out


def cpu_by_program() -> dict[str, float]:
    """CPU seconds (user + system) used so far by every process on the machine, summed per
    program: the control plane's binaries by name, the Celery worker, PostgreSQL, and this
    test process (which makes the approvals). Processes that ended in between are missed."""
    hertz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / hertz
        command = " ".join(a.decode(errors="replace") for a in argv[:6])
        name = Path(argv[0].decode(errors="replace")).name if argv[0] else "?"
        if "celery" in command:
            name = "celery worker"
        elif int(entry.name) == me:
            name = "test process (approvals)"
        elif name.startswith("postgres") or "postgres:" in command:
            name = "postgres"
        out[name] = out.get(name, 0.0) + seconds
    return out


def cpu_spent(before: dict[str, float]) -> list[tuple[str, float]]:
    """CPU seconds per program since `before`, most first."""
    after = cpu_by_program()
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    return sorted(((n, s) for n, s in spent.items() if s >= 0.05), key=lambda x: -x[1])


def approval_to_active_by_route(ids: list[int]) -> dict[str, tuple[float, float, float]]:
    """Per route, from the audit trail: the median and the longest time from an allocation's
    approval (its creation) to its "active" event, and when the route's last one was active
    (seconds after the first approval)."""
    allocs = {a.pk: a for a in Allocation.objects.filter(pk__in=ids)}
    first = min(a.created_at for a in allocs.values())
    active = dict(AuditEvent.objects.filter(
        subject_type="allocation", subject_id__in=ids,
        action="allocation.active").values_list("subject_id", "at"))
    spans: dict[str, list[tuple[float, float]]] = {}
    for pk, alloc in allocs.items():
        at = active[pk]
        spans.setdefault(alloc.route, []).append(
            ((at - alloc.created_at).total_seconds(), (at - first).total_seconds()))
    return {route: (statistics.median(s for s, _ in rows), max(s for s, _ in rows),
                    max(e for _, e in rows)) for route, rows in sorted(spans.items())}


def worker_rss_mib(worker: ManagedProcess) -> str:
    """Resident memory of the worker: its main process and its pool processes, from /proc."""
    def rss(pid: int) -> int:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return int(next(line.split()[1] for line in status if line.startswith("VmRSS:")))

    try:
        pid = worker.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        total = rss(pid) + sum(rss(int(c)) for c in children)
        return f"{total / 1024:.0f} ({1 + len(children)} processes)"
    except (OSError, StopIteration, AttributeError, ValueError):
        return "?"
