"""The month totals kept at write time (TenantMonthTotal): rebuilt from the one number.

Each (tenant, month) touched is recomputed whole from billing.figures.month_figures — the
reference every page agreed on before — and its rows replaced, so a total can only ever be
that sum (never a delta that drifts). The rollup, closing and reopening a month call this
in their own transaction; the property test compares every row with the reference.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from django.db import transaction

from fleet.models import Pool

from .figures import month_figures
from .models import TenantMonthTotal


@transaction.atomic
def refresh_totals(keys: Iterable[tuple[int, dt.date]]) -> int:
    """Rebuild the totals of these (tenant id, month) pairs; returns the rows written."""
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
