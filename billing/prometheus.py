"""The Prometheus adapter: used device-seconds per namespace from DCGM exporter metrics."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from fleet.domain import mig_share
from fleet.prometheus import PrometheusError, instant_query

from .domain import HOUR, SECONDS_PER_HOUR

__all__ = ["USED_QUERY", "PrometheusError", "used_device_seconds"]

# Graphics-engine activity (0-1) works for whole GPUs and MIG instances alike. The window is
# an hour less a millisecond: Prometheus 2 ranges include their left edge, so a sample taken
# exactly on the hour would otherwise count in two hours.
USED_QUERY = ("sum by (namespace, GPU_I_PROFILE) "
              "(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace!=\"\"}[3599999ms]))")


def used_device_seconds(hour: dt.datetime, *, base_url: str | None = None,
                        weights: dict[str, Decimal] | None = None) -> dict[str, Decimal]:
    """Used device-seconds per namespace in [hour, hour + 1h).

    avg_over_time over the hour × 3600 s is the device-seconds one series was busy; a MIG
    instance counts with its share of a device (compute slices / 7 unless configured).
    """
    result = instant_query(USED_QUERY, hour + HOUR, base_url=base_url)
    out: dict[str, Decimal] = {}
    for series in result:
        labels = series["metric"]
        value = Decimal(series["value"][1])
        weight = mig_share(labels.get("GPU_I_PROFILE", ""), weights)
        ns = labels.get("namespace", "")
        out[ns] = out.get(ns, Decimal(0)) + value * SECONDS_PER_HOUR * weight
    return out
