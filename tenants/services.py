"""Writes of the tenants app. Each one audits in the same transaction."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction

from .audit import audit_record
from .models import Allocation, Pool, Tenant


def namespace_for(tenant: Tenant, suffix: str) -> str:
    """A DNS-1123 namespace name for a tenant's allocation, at most 63 characters."""
    name = f"{tenant.slug}-{suffix}".lower()
    return name[:63].rstrip("-")


@transaction.atomic
def allocation_create(*, tenant: Tenant, pool: Pool, route: str, whole_devices: int,
                      mig_profile: str, mig_count: int, device_equivalents: Decimal,
                      starts_at: dt.datetime, ends_at: dt.datetime | None, by, reason: str,
                      name_suffix: str) -> Allocation:
    allocation = Allocation.objects.create(
        tenant=tenant, pool=pool, route=route, whole_devices=whole_devices,
        mig_profile=mig_profile, mig_count=mig_count, device_equivalents=device_equivalents,
        namespace=namespace_for(tenant, name_suffix), starts_at=starts_at, ends_at=ends_at,
    )
    audit_record(actor=by, subject=allocation, tenant=tenant, action="allocation.created",
                 to_state=allocation.status, reason=reason, data={
                     "pool": pool.slug, "route": route,
                     "device_equivalents": str(device_equivalents),
                     "whole_devices": whole_devices, "mig_profile": mig_profile,
                     "mig_count": mig_count})
    return allocation
