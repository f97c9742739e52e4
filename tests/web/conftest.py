"""Fixtures the web tests share."""

import datetime as dt
from decimal import Decimal

import pytest

from billing.services import refresh_months
from fleet.models import Allocation, Route
from tests.factories import LAST_MONTH, usage_hour


@pytest.fixture
def billed(tenant, other_tenant, pools):
    """Last month billed for two tenants' shared-pool allocations."""
    hour = dt.datetime.combine(LAST_MONTH, dt.time(5), tzinfo=dt.UTC)
    out = []
    for t, ns, devices in ((tenant, "acme-r1", 4), (other_tenant, "globex-r2", 2)):
        alloc = Allocation.objects.create(
            tenant=t, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
            whole_devices=devices, device_equivalents=Decimal(devices), namespace=ns,
            status="active", starts_at=hour)
        usage_hour(alloc, hour, Decimal(devices * 3600), Decimal(devices * 900),
              Decimal(devices * 2.5))
        out.append(alloc)
    refresh_months({(a.pk, LAST_MONTH) for a in out})
    return out
