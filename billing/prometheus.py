"""The Prometheus adapter: used device-seconds per namespace from DCGM exporter metrics."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.conf import settings

from fleet.domain import mig_share
from fleet.prometheus import PrometheusError, instant_query

from .domain import HOUR, SECONDS_PER_HOUR

__all__ = ["USED_QUERY", "PrometheusError", "used_device_seconds", "used_query"]

# Graphics-engine activity (0-1) works for whole GPUs and MIG instances alike. The window is
# an hour less a millisecond: Prometheus 2 ranges include their left edge, so a sample taken
# exactly on the hour would otherwise count in two hours.
USED_QUERY = ("sum by (namespace, GPU_I_PROFILE) "
              "(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace!=\"\"}[3599999ms]))")


def used_query(cluster_label: str = "") -> str:
    """USED_QUERY, kept apart by the cluster label when one Prometheus holds several."""
    if not cluster_label:
        return USED_QUERY
    return USED_QUERY.replace("by (namespace, GPU_I_PROFILE)",
                              f"by (namespace, GPU_I_PROFILE, {cluster_label})", 1)


def used_device_seconds(hour: dt.datetime, *, base_url: str | None = None,
                        weights: dict[str, Decimal] | None = None, by_cluster: bool = False
                        ) -> dict[str, Decimal] | dict[str, dict[str, Decimal]]:
    """Used device-seconds per namespace in [hour, hour + 1h); `by_cluster`: per namespace
    and cluster (the PORTAL_PROMETHEUS_CLUSTER_LABEL's value; "" for a series without it).

    avg_over_time over the hour × 3600 s is the device-seconds one series was busy; a MIG
    instance counts with its share of a device (compute slices / 7 unless configured).
    """
    label = settings.PORTAL_PROMETHEUS_CLUSTER_LABEL if by_cluster else ""
    result = instant_query(used_query(label), hour + HOUR, base_url=base_url)
    out: dict[str, dict[str, Decimal]] = {}
    for series in result:
        labels = series["metric"]
        value = Decimal(series["value"][1])
        weight = mig_share(labels.get("GPU_I_PROFILE", ""), weights)
        there = out.setdefault(labels.get("namespace", ""), {})
        cluster = labels.get(label, "") if label else ""
        there[cluster] = there.get(cluster, Decimal(0)) + value * SECONDS_PER_HOUR * weight
    if by_cluster:
        return out
    return {ns: sum(parts.values(), Decimal(0)) for ns, parts in out.items()}
