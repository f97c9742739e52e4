"""What a workload's GPUs did while it ran, joined from DCGM: the DCGM exporter labels each
GPU's series with the pod using it (namespace, pod), Prometheus keeps them, and a Job's pods
are named after it. Measured after the fact, over the workload's own run (running → finished,
or → now while it runs), with the same activity metric billing counts used hours by.

`utilisation_queries` and `parse_utilisation` are pure; `measure_utilisation` asks
Prometheus for the workloads that are due and stores the figures on their rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from tenants.compiled import compiled_once

from ..models import QueueWorkload
from ..prometheus import PrometheusError, instant_query

log = logging.getLogger(__name__)

BUSY_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # 0–1, whole GPUs and MIG instances alike
MEMORY_METRIC = "DCGM_FI_DEV_FB_USED"  # MiB
# A running workload is measured again after this long; a finished one once after its end.
REMEASURE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class Utilisation:
    busy: float | None  # mean activity of its GPUs over the run, 0–1
    memory_gb: float | None  # the most GPU memory one of its GPUs held, GB

    @property
    def found(self) -> bool:
        return self.busy is not None or self.memory_gb is not None


def _string(value: str) -> str:
    """A PromQL double-quoted string literal's body."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _pods_of(job: str) -> str:
    """A Job's pod names: `<job>-<5 characters>`, or `<job>-<index>-<5>` for an indexed Job."""
    return f"{re.escape(job)}-([0-9]+-)?[a-z0-9]{{5}}"


def pod_selector(namespace: str, job: str, others: tuple[str, ...] = ()) -> str:
    """The series of a Job's pods. Names alone are ambiguous: `train-2-ab3cd` is pod 2 of an
    indexed Job `train` or a pod of a Job `train-2`; `others` (the namespace's other Jobs
    named `<job>-…`, as the portal knows them) are excluded."""
    sel = f'namespace="{_string(namespace)}",pod=~"{_string(_pods_of(job))}"'
    if others:
        sel += f',pod!~"{_string("|".join(_pods_of(o) for o in sorted(others)))}"'
    return sel


def utilisation_queries(namespace: str, job: str, start: dt.datetime, end: dt.datetime,
                        others: tuple[str, ...] = ()) -> tuple[str, str, dt.datetime]:
    """(busy query, memory query, evaluation time) for the run [start, end]."""
    # A millisecond short of the run: Prometheus 2 ranges include their left edge, and a
    # sample at the very moment it started running belongs to what came before (as billing).
    window = f"{max(1, round((end - start).total_seconds() * 1000) - 1)}ms"
    sel = pod_selector(namespace, job, others)
    busy = f"avg(avg_over_time({BUSY_METRIC}{{{sel}}}[{window}]))"
    memory = f"max(max_over_time({MEMORY_METRIC}{{{sel}}}[{window}]))"
    return busy, memory, end


def _scalar(result: list[dict]) -> float | None:
    for series in result:
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if value == value:  # not NaN
            return value
    return None


def parse_utilisation(busy_result: list[dict], memory_result: list[dict]) -> Utilisation:
    busy = _scalar(busy_result)
    mib = _scalar(memory_result)
    return Utilisation(busy=None if busy is None else min(1.0, max(0.0, busy)),
                       memory_gb=None if mib is None else round(mib * 1024 * 1024 / 1e9, 2))


def due_for_measurement(now: dt.datetime, limit: int = 200):
    """Workloads that ran and are not measured over their whole run yet."""
    ran = QueueWorkload.objects.filter(running_at__isnull=False)
    never = Q(utilisation_at__isnull=True)
    ended_since = Q(finished_at__isnull=False, utilisation_at__lt=F("finished_at"))
    running_stale = Q(state=QueueWorkload.State.ADMITTED, finished_at__isnull=True,
                      utilisation_at__lt=now - REMEASURE)
    return ran.filter(never | ended_since | running_stale).order_by("utilisation_at",
                                                                    "pk")[:limit]


def measure_utilisation(*, now: dt.datetime | None = None, base_url: str | None = None) -> int:
    """Measure what is due; stops at the first Prometheus error (all of it stays due)."""
    now = now or timezone.now()
    measured = 0
    due = list(due_for_measurement(now))
    # Every Job name of the namespaces measured, in one read (not one per workload).
    jobs: dict[str, set[str]] = {}
    for ns, name in QueueWorkload.objects.filter(
            namespace__in={r.namespace for r in due}).exclude(job="").values_list(
            "namespace", "job").distinct():
        jobs.setdefault(ns, set()).add(name)
    for row in due:
        end = row.finished_at or now
        if row.state != QueueWorkload.State.ADMITTED and row.finished_at is None:
            end = row.observed_at  # deleted or stopped: as far as it was seen
        job = row.job or row.name
        others = tuple(o for o in jobs.get(row.namespace, ()) if o.startswith(f"{job}-"))
        busy_q, memory_q, at = utilisation_queries(row.namespace, job, row.running_at,
                                                   max(end, row.running_at), others)
        try:
            got = parse_utilisation(instant_query(busy_q, at, base_url=base_url),
                                    instant_query(memory_q, at, base_url=base_url))
        except PrometheusError as exc:
            log.warning("workload utilisation not measured: %s", exc)
            break
        # A finished run is measured once (up to its end); any other again after REMEASURE.
        QueueWorkload.objects.filter(pk=row.pk).update(
            gpu_busy=got.busy, gpu_memory_gb=got.memory_gb,
            utilisation_at=row.finished_at or now)
        measured += 1
    return measured


# Buckets of the /metrics histograms: activity as a fraction, memory in GB (MIG slices of
# 5–40 GB up to a whole H200's 141 GB).
BUSY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MEMORY_BUCKETS_GB = (5, 10, 20, 40, 80, 160)


@compiled_once
def _utilisation_rows():
    def buckets(field: str, bounds) -> dict:
        return {f"{field}_le{i}": Count("id", filter=Q(**{f"{field}__lte": b}))
                for i, b in enumerate(bounds)}

    return (QueueWorkload.objects
            .filter(finished_at__isnull=False, utilisation_at__gte=F("finished_at"))
            .values("allocation__tenant__slug", "namespace", "local_queue")
            .annotate(busy_n=Count("gpu_busy"), busy_sum=Sum("gpu_busy"),
                      memory_n=Count("gpu_memory_gb"), memory_sum=Sum("gpu_memory_gb"),
                      **buckets("gpu_busy", BUSY_BUCKETS),
                      **buckets("gpu_memory_gb", MEMORY_BUCKETS_GB))
            .order_by("allocation__tenant__slug", "namespace", "local_queue"))


def utilisation_histograms() -> list[dict]:
    """Per tenant and queue: how busy finished workloads kept their GPUs, and the most memory
    they held, as cumulative bucket counts. Only workloads measured over their whole run
    count, each once, so the counts only grow (a running one's figure still changes; a
    deleted or stopped one was seen only in part). One aggregate query (compiled once:
    tenants.compiled)."""
    out = []
    for r in _utilisation_rows():
        base = {"tenant": r["allocation__tenant__slug"],
                "queue": f"{r['namespace']}/{r['local_queue']}"}
        for field, bounds, key in (("gpu_busy", BUSY_BUCKETS, "busy"),
                                   ("gpu_memory_gb", MEMORY_BUCKETS_GB, "memory")):
            if r[f"{key}_n"]:
                out.append({**base, "metric": key,
                            "buckets": [(b, r[f"{field}_le{i}"]) for i, b in enumerate(bounds)],
                            "count": r[f"{key}_n"], "sum": r[f"{key}_sum"] or 0.0})
    return out
