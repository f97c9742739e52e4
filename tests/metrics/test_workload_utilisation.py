"""GPU activity and memory per workload, joined from DCGM series in a real Prometheus
(fleet.queues.utilisation). The expected figures are computed here from the samples we
generate; the series of another Job, another namespace and the time outside the run must not
count."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from fleet.models import Allocation, ClusterQueueState, QueueEvent, QueueWorkload, Route
from fleet.queues.utilisation import due_for_measurement, measure_utilisation, pod_selector
from tests.harness.procs import free_port
from tests.harness.prometheus import PrometheusServer, write_openmetrics

pytestmark = pytest.mark.django_db

STEP = 30
BASE = floor_hour(timezone.now()) - dt.timedelta(hours=6)  # well before the head block
RUN = (BASE + dt.timedelta(minutes=10), BASE + dt.timedelta(minutes=40))  # train's run
SAMPLES = range(1, 121)  # an hour of samples, every STEP seconds


def t(k: int) -> int:
    return int(BASE.timestamp()) + k * STEP


def inside(k: int) -> bool:
    return RUN[0].timestamp() < t(k) <= RUN[1].timestamp()


def labels(ns, pod, gpu):
    return (("gpu", str(gpu)), ("UUID", f"GPU-{ns}-{gpu}"), ("namespace", ns), ("pod", pod))


# labels → (busy at sample k, memory MiB at sample k)
SERIES = {
    labels("acme-r1", "train-x7k2q", 0): (lambda k: 0.9 if k % 2 else 0.7,
                                         lambda k: 30000 + 100 * (k % 7)),
    labels("acme-r1", "train-x7k2q", 1): (lambda k: 0.4, lambda k: 12000),
    # Not train's: another Job whose name starts the same, another tenant's pod of that name.
    labels("acme-r1", "train-2-ab3cd", 2): (lambda k: 0.05, lambda k: 79000),
    labels("globex-r2", "train-x7k2q", 0): (lambda k: 0.01, lambda k: 80000),
    # An indexed Job: its pods are <job>-<index>-<5>.
    labels("acme-r1", "sweep-0-qwert", 3): (lambda k: 0.6, lambda k: 1000),
    labels("acme-r1", "sweep-1-asdfg", 4): (lambda k: 0.2, lambda k: 3000),
}


def expected(pods: set[str], ns: str = "acme-r1") -> tuple[float, float]:
    busy, memory = [], []
    for lab, (b, m) in SERIES.items():
        d = dict(lab)
        if d["namespace"] == ns and d["pod"] in pods:
            ks = [k for k in SAMPLES if inside(k)]
            busy.append(sum(b(k) for k in ks) / len(ks))
            memory.append(max(m(k) for k in ks))
    return sum(busy) / len(busy), round(max(memory) * 1024 * 1024 / 1e9, 2)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus-util")
    server = PrometheusServer(work)
    for i, metric in enumerate(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")):
        path = work / f"{metric}.om"
        write_openmetrics(path, {lab: [(t(k), fns[i](k)) for k in SAMPLES]
                                 for lab, fns in SERIES.items()}, metric=metric)
        server.backfill(path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def alloc(tenant, pools):
    a = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace="acme-r1", status="active", starts_at=BASE)
    ClusterQueueState.objects.create(name="acme-r1", allocation=a, resource="nvidia.com/gpu",
                                     nominal=Decimal(4), observed_at=BASE)
    return a


def workload(alloc, job: str, *, finished: bool = True) -> QueueWorkload:
    row = QueueWorkload.objects.create(
        allocation=alloc, uid=f"uid-{job}", namespace=alloc.namespace, name=f"job-{job}-1",
        job=job, local_queue="gpu", cluster_queue=alloc.namespace, devices=2,
        state="finished" if finished else "admitted", submitted_at=RUN[0],
        admitted_at=RUN[0], running_at=RUN[0], finished_at=RUN[1] if finished else None,
        observed_at=RUN[1])
    QueueEvent.objects.create(allocation=alloc, workload_uid=row.uid, workload=job,
                              kind="running", at=RUN[0], reason="its pods run")
    return row


def test_a_jobs_gpus_over_its_own_run_and_nothing_else(prometheus, alloc):
    train, sweep, idle = (workload(alloc, j) for j in ("train", "sweep", "idle"))
    workload(alloc, "train-2")  # the portal knows the Job whose pods look like train's
    assert measure_utilisation(base_url=prometheus.url) == 4
    for row, pods in ((train, {"train-x7k2q"}), (sweep, {"sweep-0-qwert", "sweep-1-asdfg"})):
        row.refresh_from_db()
        busy, memory = expected(pods)
        assert row.gpu_busy == pytest.approx(busy, abs=1e-6), row.job
        assert row.gpu_memory_gb == memory and row.utilisation_at == RUN[1]
    idle.refresh_from_db()  # no series for its pods: measured, nothing found
    assert idle.gpu_busy is None and idle.gpu_memory_gb is None and idle.utilisation_at
    # A finished run is measured once.
    assert not due_for_measurement(timezone.now()) and \
        measure_utilisation(base_url=prometheus.url) == 0


def test_a_running_job_is_measured_again_later(prometheus, alloc):
    row = workload(alloc, "train", finished=False)
    now = RUN[1]
    assert measure_utilisation(base_url=prometheus.url, now=now) == 1
    assert measure_utilisation(base_url=prometheus.url, now=now + dt.timedelta(minutes=1)) == 0
    assert measure_utilisation(base_url=prometheus.url, now=now + dt.timedelta(minutes=6)) == 1
    row.refresh_from_db()
    assert row.gpu_busy is not None and row.utilisation_at == now + dt.timedelta(minutes=6)


def test_prometheus_away_leaves_it_due(alloc):
    row = workload(alloc, "train")
    assert measure_utilisation(base_url=f"http://127.0.0.1:{free_port()}") == 0
    row.refresh_from_db()
    assert row.utilisation_at is None and list(due_for_measurement(timezone.now())) == [row]


def test_the_tenant_reads_it_in_the_ledger(prometheus, alloc, client, lead):
    workload(alloc, "train")
    QueueWorkload.objects.create(  # known, never ran: only its name matters here
        allocation=alloc, uid="uid-train-2", namespace=alloc.namespace, name="job-train-2-1",
        job="train-2", state="pending", observed_at=RUN[1])
    measure_utilisation(base_url=prometheus.url)
    client.force_login(lead)
    (job,) = client.get(f"/api/allocations/{alloc.pk}/queue/").json()["jobs"]
    busy, memory = expected({"train-x7k2q"})
    assert job["gpu_busy"] == pytest.approx(busy) and job["gpu_memory_gb"] == memory
    page = client.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    assert f"{round(busy * 100)}% busy" in page and f"memory up to <strong>{memory} GB" in page


def _histogram(body: str, name: str, labels: str) -> tuple[list[tuple[float, int]], int, float]:
    buckets = [(float(le), int(n)) for le, n in re.findall(
        rf'{name}_bucket{{{re.escape(labels)},le="([^"]+)"}} (\d+)', body) if le != "+Inf"]
    count = int(re.search(rf"{name}_count{{{re.escape(labels)}}} (\d+)", body).group(1))
    total = float(re.search(rf"{name}_sum{{{re.escape(labels)}}} ([0-9.]+)", body).group(1))
    return buckets, count, total


def test_metrics_expose_finished_workloads_gpu_activity_as_histograms(prometheus, alloc,
                                                                      client, tenant):
    """/metrics: each finished, measured workload once in the busy and memory histograms of
    its tenant and queue; a running one (its figure still changes) not yet."""
    workload(alloc, "train")
    workload(alloc, "sweep")
    workload(alloc, "idle")  # measured, no series: in neither histogram
    workload(alloc, "train-2", finished=False)  # still running: its figure can change
    assert measure_utilisation(base_url=prometheus.url, now=RUN[1]) == 4
    body = client.get("/metrics").content.decode()
    labels = f'tenant="{tenant.slug}",queue="acme-r1/gpu"'
    # The stored figures (the test above checks them against the samples): train's mean is
    # 0.6 exactly in decimal, so the bucket it lands in is the stored float's, not ours.
    figures = list(QueueWorkload.objects.filter(job__in=("train", "sweep")).values_list(
        "gpu_busy", "gpu_memory_gb"))
    assert len(figures) == 2 and all(b and m for b, m in figures)
    for name, values in (("aifactory_workload_gpu_busy_ratio", [b for b, _ in figures]),
                         ("aifactory_workload_gpu_memory_gigabytes", [m for _, m in figures])):
        buckets, count, total = _histogram(body, name, labels)
        assert count == 2 and total == pytest.approx(sum(values), abs=1e-3), name
        assert buckets and all(n == sum(v <= le for v in values) for le, n in buckets), name
    checked = subprocess.run([shutil.which("promtool"), "check", "metrics"],
                             input=body.encode(), capture_output=True)
    # Exit 3: style hints only, and just the one this metric's name draws (it is exposed
    # in gigabytes); 1 would be a format the Prometheus parser refuses.
    assert (checked.returncode, checked.stderr.decode()) == (
        3, 'aifactory_workload_gpu_memory_gigabytes use base unit "bytes" instead of '
           '"gigabytes"\n')


@pytest.mark.unit
def test_the_selector_matches_only_the_jobs_own_pod_names():
    import re

    pattern = re.search(r'pod=~"([^"]+)"', pod_selector("ns", "train.v2")).group(1)
    rx = re.compile(pattern.replace("\\\\", "\\"))
    assert rx.fullmatch("train.v2-ab3cd") and rx.fullmatch("train.v2-12-ab3cd")
    assert not rx.fullmatch("trainxv2-ab3cd")  # the dot is literal
    assert not rx.fullmatch("train.v2-2-ab3cd-x") and not rx.fullmatch("train.v2-2")
    # Another Job named like an index of this one is excluded by name.
    excluded = re.search(r'pod!~"([^"]+)"', pod_selector("ns", "train", ("train-2",))).group(1)
    assert re.fullmatch(excluded.replace("\\\\", "\\"), "train-2-ab3cd")
    assert not re.fullmatch(excluded.replace("\\\\", "\\"), "train-ab3cd")
