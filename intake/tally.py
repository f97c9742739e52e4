"""Request counts per tenant and status, from the tally the database keeps (RequestTally):
the requests list's filter counts and pages, the overview, the API's `count` and /metrics read
a few rows per tenant instead of counting every request ever filed."""

from __future__ import annotations

from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Sum

from tenants.access import tenant_scope
from tenants.compiled import compiled_once
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant

from .models import RequestTally


def request_counts(user, *, tenant_slug: str = "") -> dict[str, int]:
    """Requests per status among those `user` may see (or one tenant's of them): a sum over
    a few rows per tenant, kept across reading requests until the tally is written (every
    tenant's, for a platform admin, is a sum over thousands of rows)."""
    return dict(_counts_in(tenant_scope(user), tenant_slug))


def counted_in_tally(status: str, tenant_id: int | None = None) -> int:
    """How many requests have `status` ("": any), of one tenant or of all: the review
    queue's count when nothing but status and tenant narrow it."""
    counts = dict(_counts_in(None if tenant_id is None else (tenant_id,), ""))
    return counts.get(status, 0) if status else sum(counts.values())


@kept_across_requests(RequestTally, Tenant)
def _counts_in(scope: tuple[int, ...] | None, tenant_slug: str) -> tuple[tuple[str, int], ...]:
    tally = RequestTally.objects.all()
    if scope is not None:
        tally = tally.filter(tenant__in=scope)
    if tenant_slug:
        tally = tally.filter(tenant__slug=tenant_slug)
    return tuple((status, total) for status, total in tally.values("status").annotate(
        total=Sum("n")).values_list("status", "total").order_by() if total)


@compiled_once
def _tenant_status_sums():
    return (RequestTally.objects.values("tenant__slug", "status").annotate(total=Sum("n"))
            .order_by("tenant__slug", "status"))


def request_counts_by_tenant() -> list[tuple[str, str, int]]:
    """(tenant slug, status, requests) for every tenant with any, in slug and status order
    (/metrics: the query compiled once, tenants.compiled)."""
    return [(r["tenant__slug"], r["status"], r["total"]) for r in _tenant_status_sums()
            if r["total"]]


def compact_request_tally() -> int:
    """Fold the tally's delta rows into one row per tenant and status (none where the sum is
    0); how many rows were folded. The rows are taken by one DELETE … RETURNING, so exactly
    the rows deleted are summed: a delta committed meanwhile is not seen and stays for the
    next time, and two compactions at once never fold a row twice (the second skips rows the
    first deleted). Readers sum whatever rows there are, before or after: the same counts."""
    table = RequestTally._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE (tenant_id, status) IN ("  # noqa: S608 - our table
            f" SELECT tenant_id, status FROM {table} GROUP BY tenant_id, status"
            "  HAVING COUNT(*) > 1 OR SUM(n) = 0)"
            " RETURNING tenant_id, status, n")
        folded = cursor.fetchall()
        sums: dict[tuple[int, str], int] = defaultdict(int)
        for tenant_id, status, n in folded:
            sums[tenant_id, status] += n
        RequestTally.objects.bulk_create(
            RequestTally(tenant_id=t, status=s, n=n) for (t, s), n in sorted(sums.items()) if n)
    return len(folded)
