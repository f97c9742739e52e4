"""The pool list's read: every pool with its capacity and the rate in force now."""

from __future__ import annotations

import pickle

from django.utils import timezone

from tenants.kept_reads import Until, kept_across_requests

from ..models import Allocation, Cluster, GpuNode, Pool, RateCard
from .capacity import PromisableCapacity
from .pricing import pool_rates_until
from .selectors import pools_capacity


@kept_across_requests(GpuNode, Pool, Cluster, Allocation, Allocation.nodes.through, RateCard,
                      freeze=pickle.dumps, thaw=pickle.loads)
def pools_with_capacity() -> Until:
    """Every pool with its capacity, and the rate card in force now as `rate_now`
    (fleet.inventory.pricing): the pool list, as a list of (pool, PromisableCapacity); kept
    across reading requests until a write to what it shows, or until the next card starts."""
    pools = list(Pool.objects.select_related("cluster"))
    capacities: dict[int, PromisableCapacity] = pools_capacity(pools)
    rates, next_card = pool_rates_until([p.pk for p in pools], timezone.now())
    for p in pools:
        p.rate_now = rates[p.pk]
    return Until([(p, capacities[p.pk]) for p in pools], next_card)
