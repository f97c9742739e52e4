"""The month totals kept at write time (TenantMonthTotal): rebuilt from the one number.

Each (tenant, month) touched is recomputed whole from billing.figures.month_figures — the
reference every page agreed on before — and its rows replaced, so a total can only ever be
that sum (never a delta that drifts). The rollup, closing and reopening a month call this
in their own transaction; the property test compares every row with the reference. Each
tenant touched also has its all-time totals per pool (TenantPoolTotal, what /metrics
exports) rebuilt from its month totals in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import Sum

from fleet.models import Pool

from .figures import month_figures
from .models import TenantMonthTotal, TenantPoolTotal

# Refreshes take turns (PostgreSQL: a transaction-scoped advisory lock; SQLite has one
# writer at a time anyway). Each replaces rows that others may be replacing too: a tenant's
# all-time totals are rebuilt by a refresh of any of its months, and two rebuilding at once
# would each delete what it sees and insert over what the other inserted (a unique
# violation), or sum the months as they were before the other's commit.
TOTALS_LOCK = 0x41465054  # "AFPT"


@transaction.atomic
def refresh_totals(keys: Iterable[tuple[int, dt.date]]) -> int:
    """Rebuild the totals of these (tenant id, month) pairs and the all-time totals of their
    tenants; returns the month rows written."""
    keys = set(keys)
    if keys and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [TOTALS_LOCK])
    written = refresh_month_totals(keys)
    refresh_pool_totals({tenant_id for tenant_id, _month in keys})
    return written


def refresh_month_totals(keys: Iterable[tuple[int, dt.date]]) -> int:
    """The month totals alone (migration 0013, which runs before the all-time table)."""
    by_month: dict[dt.date, set[int]] = defaultdict(set)
    for tenant_id, month in keys:
        by_month[month].add(tenant_id)
    written = 0
    pools: dict[str, int] | None = None
    for month, tenant_ids in by_month.items():
        figures = month_figures(tenant_ids=tenant_ids, months=[month])
        if pools is None and figures:
            pools = dict(Pool.objects.values_list("slug", "pk"))
        rows = [TenantMonthTotal(tenant_id=f.tenant_id, pool_id=(pools or {})[slug],
                                 month=month, allocated_h=p["allocated_h"],
                                 used_h=p["used_h"], amount=p["amount"])
                for f in figures for slug, p in f.by_pool.items()]
        TenantMonthTotal.objects.filter(month=month, tenant_id__in=tenant_ids).delete()
        TenantMonthTotal.objects.bulk_create(rows, batch_size=2000)
        written += len(rows)
    return written


@transaction.atomic
def refresh_pool_totals(tenant_ids: set[int] | None) -> None:
    """Rebuild these tenants' (None: every tenant's) all-time totals per pool from their
    month totals."""
    if tenant_ids is not None and not tenant_ids:
        return
    months = TenantMonthTotal.objects.all()
    kept = TenantPoolTotal.objects.all()
    if tenant_ids is not None:
        months = months.filter(tenant_id__in=tenant_ids)
        kept = kept.filter(tenant_id__in=tenant_ids)
    sums = (months.values("tenant_id", "pool_id").order_by()
            .annotate(a=Sum("allocated_h"), u=Sum("used_h"), m=Sum("amount")))
    kept.delete()
    TenantPoolTotal.objects.bulk_create(
        [TenantPoolTotal(tenant_id=r["tenant_id"], pool_id=r["pool_id"], allocated_h=r["a"],
                         used_h=r["u"], amount=r["m"]) for r in sums], batch_size=2000)
