"""Synthetic GPU use for the embedded run, which has no Prometheus: a daily rhythm around
each request's expected utilisation. The same numbers seed the demo's history and feed the
hourly rollup, so an allocation approved today shows in billing within the hour."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

from django.db.models import Q

from fleet.models import Allocation
from intake.models import CapacityRequest


def demo_level(expected_utilisation: int, hour: dt.datetime) -> Decimal:
    """Share of the allocated device-seconds busy in `hour` (0–1, three places)."""
    phase = (hour.timestamp() / 3600) % 24 / 24 * 2 * math.pi
    level = max(0.0, min(1.0, expected_utilisation / 100 + 0.25 * math.sin(phase)))
    return Decimal(str(round(level, 3)))


def used_device_seconds(hour: dt.datetime, *, base_url: str | None = None,
                        weights: dict[str, Decimal] | None = None, by_cluster: bool = False):
    """Drop-in for billing.prometheus.used_device_seconds (PORTAL_USAGE_SOURCE); with
    `by_cluster`, a dispatched allocation's use in proportion to its shares."""
    end = hour + dt.timedelta(hours=1)
    allocations = Allocation.objects.filter(starts_at__lt=end).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=hour)).exclude(
        status=Allocation.Status.RETIRED).select_related("pool__cluster")
    expected = dict(CapacityRequest.objects.filter(allocation__in=allocations).values_list(
        "allocation_id", "expected_utilisation"))
    used = {a: (a.device_equivalents * 3600 * demo_level(expected.get(a.pk, 60), hour)
                ).quantize(Decimal("1")) for a in allocations}
    if not by_cluster:
        return {a.namespace: v for a, v in used.items()}
    out = {}
    for a, v in used.items():
        shares = {k: int(n) for k, n in (a.cluster_shares or {}).items() if int(n) > 0}
        whole = sum(shares.values())
        out[a.namespace] = ({k: v * n / whole for k, n in shares.items()} if whole
                            else {a.pool.cluster.slug: v})
    return out
