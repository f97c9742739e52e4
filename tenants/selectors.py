"""Reads of the tenants app."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Sum

from .models import Allocation, Pool


@dataclass(frozen=True)
class PoolCapacity:
    capacity_devices: Decimal
    allocated_devices: Decimal
    source: str

    @property
    def free_devices(self) -> Decimal:
        return max(Decimal(0), self.capacity_devices - self.allocated_devices)


def pool_capacity(pool: Pool) -> PoolCapacity:
    """Promisable capacity of a pool and what allocations already hold of it."""
    held = (Allocation.objects.filter(pool=pool, status__in=Allocation.HOLDING)
            .aggregate(total=Sum("device_equivalents"))["total"]) or Decimal(0)
    return PoolCapacity(Decimal(pool.capacity_devices), Decimal(held), "configured pool size")


def pools_for_route(route: str, gpu_model: str = ""):
    pools = Pool.objects.filter(route=route, active=True)
    if gpu_model:
        pools = pools.filter(gpu_model=gpu_model)
    return pools.order_by("name")
