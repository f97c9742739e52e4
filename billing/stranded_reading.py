"""Reading the world for the stranded-capacity detectors (billing.stranded): the holds from
the database, their namespaces' DCGM series and their running workloads' peaks from
Prometheus, their queues as the queue sync last read them. Read → decide (pure) → the
caller writes (`billing.stranded_services.findings_record`).

`samples_from` is pure (a range query's matrices → samples per namespace); the rest read.
A Prometheus that does not answer raises `PrometheusError`: nothing is judged on no data.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Max, Min, Sum

from fleet.allocations import lifecycle
from fleet.domain import Route, mig_share
from fleet.inventory.pricing import pool_rates
from fleet.inventory.selectors import mig_weights, pools_capacity
from fleet.models import Allocation, AllocationResize, ClusterQueueState, Pool, QueueWorkload
from fleet.prometheus import instant_query, range_query
from fleet.queues.utilisation import BUSY_METRIC, MEMORY_METRIC, pod_selector

from .stranded import (
    Finding,
    Hold,
    IdleCapacity,
    MigOffer,
    QueueFacts,
    Run,
    Sample,
    SeriesSummary,
    idle_hold,
    idle_part,
    oversized,
    quota_blocked,
    stalled_run,
    summarise,
)
from .stranded_thresholds import Thresholds, thresholds_for

SEL = '{namespace!=""}'
SERIES_QUERIES = {
    "busy": f"sum by (namespace, GPU_I_PROFILE) ({BUSY_METRIC}{SEL})",
    "top": f"max by (namespace) ({BUSY_METRIC}{SEL})",
    "memory": f"max by (namespace) ({MEMORY_METRIC}{SEL})",
    "active": f"count by (namespace) ({BUSY_METRIC}{SEL} > 0)",
}
MIB_GB = 1024 * 1024 / 1e9


def base_thresholds() -> Thresholds:
    return Thresholds(
        window=dt.timedelta(hours=settings.PORTAL_STRANDED_WINDOW_HOURS),
        idle_activity=settings.PORTAL_STRANDED_IDLE_PERCENT / 100,
        stall_window=dt.timedelta(minutes=settings.PORTAL_STRANDED_STALL_MINUTES),
        stall_activity=settings.PORTAL_STRANDED_STALL_PERCENT / 100,
        headroom=Decimal(settings.PORTAL_STRANDED_HEADROOM_PERCENT) / 100)


def pool_thresholds(pool: str) -> Thresholds:
    return thresholds_for(pool, base_thresholds(), settings.PORTAL_STRANDED_POOL_THRESHOLDS)


def _float(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN is no value


def samples_from(results: Mapping[str, list[dict]], weights: Mapping[str, Decimal] | None = None
                 ) -> dict[str, list[Sample]]:
    """Samples per namespace from the four matrices of SERIES_QUERIES; a moment exists where
    the busy series has a value (the others fill in, or are absent)."""
    busy: dict[str, dict[float, Decimal]] = defaultdict(dict)
    for series in results.get("busy", []):
        ns, profile = series["metric"].get("namespace", ""), series["metric"].get(
            "GPU_I_PROFILE", "")
        for t, v in series.get("values", []):
            value = _float(v)
            if value is not None:
                at = busy[ns]
                at[float(t)] = at.get(float(t), Decimal(0)) + \
                    Decimal(str(value)) * mig_share(profile, weights)
    others: dict[str, dict[str, dict[float, float]]] = {}
    for key in ("top", "memory", "active"):
        per_ns: dict[str, dict[float, float]] = defaultdict(dict)
        for series in results.get(key, []):
            for t, v in series.get("values", []):
                value = _float(v)
                if value is not None:
                    per_ns[series["metric"].get("namespace", "")][float(t)] = value
        others[key] = per_ns
    out: dict[str, list[Sample]] = {}
    for ns, moments in busy.items():
        out[ns] = [Sample(
            dt.datetime.fromtimestamp(t, tz=dt.UTC), value.quantize(Decimal("0.0001")),
            others["top"].get(ns, {}).get(t, 0.0),
            (round(others["memory"][ns][t] * MIB_GB, 2)
             if t in others["memory"].get(ns, {}) else None),
            int(others["active"].get(ns, {}).get(t, 0))) for t, value in sorted(moments.items())]
    return out


def namespace_samples(start: dt.datetime, end: dt.datetime, *, base_url: str | None = None
                      ) -> dict[str, list[Sample]]:
    step = settings.PORTAL_STRANDED_STEP_SECONDS
    return samples_from({key: range_query(q, start, end, step, base_url=base_url)
                         for key, q in SERIES_QUERIES.items()}, mig_weights())


def holds(now: dt.datetime) -> list[Hold]:
    """Every usable allocation as a Hold, priced at its pool's rate now."""
    rows = list(Allocation.objects.filter(status__in=lifecycle.USABLE, starts_at__lte=now)
                .select_related("tenant", "pool"))
    # Held at its size since its start, or since its last resize: a window measured at
    # another size says nothing about this one.
    resized = dict(AllocationResize.objects.filter(allocation__in=rows).values(
        "allocation_id").annotate(last=Max("at")).values_list("allocation_id", "last"))
    rates = pool_rates({a.pool_id for a in rows}, now)
    weights = tuple(sorted((k, str(v)) for k, v in mig_weights().items()))
    return [Hold(allocation_id=a.pk, tenant=a.tenant.slug, pool=a.pool.slug,
                 route=Route(a.route), held_devices=a.device_equivalents,
                 held_since=max(a.starts_at, resized.get(a.pk, a.starts_at)),
                 rate_per_device_hour=rates[a.pool_id], whole_devices=a.whole_devices,
                 mig_profile=a.mig_profile, mig_count=a.mig_count,
                 devices_per_node=a.pool.devices_per_node, gpu_memory_gb=a.pool.gpu_memory_gb,
                 mig_profiles_offered=tuple(a.pool.mig_profiles or ()), mig_weights=weights)
            for a in rows]


def mig_offers(now: dt.datetime) -> dict[str, list[MigOffer]]:
    """The active MIG pools per GPU model: where a habitual whole-device hold could move."""
    pools = list(Pool.objects.filter(route=Route.MIG_VCLUSTER, active=True))
    rates = pool_rates([p.pk for p in pools], now)
    out: dict[str, list[MigOffer]] = defaultdict(list)
    for p in pools:
        out[p.gpu_model].append(MigOffer(p.slug, p.gpu_memory_gb, tuple(p.mig_profiles or ()),
                                         rates[p.pk]))
    return out


def run_peaks(allocation_ids, now: dt.datetime, window: dt.timedelta, *,
              base_url: str | None = None) -> dict[int, list[Run]]:
    """Each running workload's pods' peak activity over the stall window (one instant query
    per workload, as the ledger's utilisation reads a run)."""
    running = list(QueueWorkload.objects.filter(
        allocation_id__in=list(allocation_ids), state=QueueWorkload.State.ADMITTED,
        running_at__isnull=False, finished_at__isnull=True))
    out: dict[int, list[Run]] = defaultdict(list)
    seconds = max(1, int(window.total_seconds()))
    for w in running:
        query = f"max(max_over_time({BUSY_METRIC}{{{pod_selector(w.namespace, w.job or w.name)}}}" \
                f"[{seconds}s]))"
        peak = None
        for series in instant_query(query, now, base_url=base_url):
            peak = _float(series.get("value", [None, None])[1])
        out[w.allocation_id].append(Run(w.job or w.name, w.devices, w.running_at, peak))
    return out


def queue_facts(by_id: Mapping[int, Hold]) -> list[QueueFacts]:
    """The queues of the holds as last read, with their pending work."""
    pending = {r["allocation_id"]: r for r in QueueWorkload.objects.filter(
        allocation_id__in=list(by_id), state=QueueWorkload.State.PENDING).values(
        "allocation_id").annotate(n=Count("id"), devices=Sum("devices"),
                                 oldest=Min("submitted_at"))}
    out = []
    for q in ClusterQueueState.objects.filter(allocation_id__in=list(pending)).select_related(
            "allocation__pool"):
        p = pending[q.allocation_id]
        out.append(QueueFacts(by_id[q.allocation_id], q.allocation.pool.gpu_model, q.cohort,
                              q.nominal, q.borrowing_limit, q.usage, int(p["n"] or 0),
                              Decimal(p["devices"] or 0), p["oldest"]))
    return out


def idle_capacity(pools, idle_held: Mapping[int, Decimal]) -> list[IdleCapacity]:
    """Per pool: its free promisable devices and the idle part of its holds."""
    capacity = pools_capacity(pools)
    cohorts = dict(ClusterQueueState.objects.filter(allocation__pool__in=pools).exclude(
        cohort="").values_list("allocation__pool_id", "cohort"))
    return [IdleCapacity(p.slug, p.gpu_model, cohorts.get(p.pk, p.cohort),
                         capacity[p.pk].free_devices, idle_held.get(p.pk, Decimal(0)))
            for p in pools]


def detect(now: dt.datetime, *, base_url: str | None = None) -> tuple[list[Finding], set[int]]:
    """Every finding now, and the allocations judged (their open findings not found again
    are resolved)."""
    all_holds = holds(now)
    if not all_holds:
        return [], set()
    by_id = {h.allocation_id: h for h in all_holds}
    namespaces = dict(Allocation.objects.filter(pk__in=list(by_id)).values_list("pk",
                                                                               "namespace"))
    widest = max(pool_thresholds(h.pool).window for h in all_holds)
    series = namespace_samples(now - widest, now, base_url=base_url)
    offers = mig_offers(now)
    models = dict(Pool.objects.filter(slug__in={h.pool for h in all_holds}).values_list(
        "slug", "gpu_model"))
    findings: list[Finding] = []
    summaries: dict[int, SeriesSummary] = {}
    stall = max(pool_thresholds(h.pool).stall_window for h in all_holds)
    runs = run_peaks(by_id, now, stall, base_url=base_url)
    for h in all_holds:
        th = pool_thresholds(h.pool)
        summary = summarise(series.get(namespaces[h.allocation_id], []), now - th.window, now)
        summaries[h.allocation_id] = summary
        findings += [f for f in (
            idle_hold(h, summary, th),
            oversized(h, summary, th, offers.get(models.get(h.pool, ""), [])),
            stalled_run(h, runs.get(h.allocation_id, []), now, th)) if f is not None]
    idle_held: dict[int, Decimal] = defaultdict(Decimal)
    pool_ids = dict(Pool.objects.filter(slug__in=set(models)).values_list("slug", "pk"))
    for h in all_holds:
        if h.held_since <= summaries[h.allocation_id].start:
            idle_held[pool_ids[h.pool]] += idle_part(h, summaries[h.allocation_id])
    idle = idle_capacity(list(Pool.objects.filter(active=True)), idle_held)
    for q in queue_facts(by_id):
        own = idle_part(q.hold, summaries[q.hold.allocation_id])  # its own idle devices are
        elsewhere = [replace(c, idle_held_devices=max(Decimal(0), c.idle_held_devices - own))
                     if c.pool == q.hold.pool else c for c in idle]  # no quota's doing
        if (f := quota_blocked(q, elsewhere, now, pool_thresholds(q.hold.pool))) is not None:
            findings.append(f)
    return findings, set(by_id)
