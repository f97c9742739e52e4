"""One number per tenant and month: what every page, export, API field and metric shows.

A month's charge is the sum of its statement lines, each rounded to the cent (as a statement
prints them), plus the adjustments made after closing; a closed month reads its frozen lines,
an open one the live usage. Hours are the lines' hours; idle is allocated − used per line.
`docs/invariants.md` lists what the property tests check against this.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import DecimalField, Exists, F, Func, OuterRef, Sum

from fleet.inventory.pricing import money
from fleet.models import Allocation, Pool
from tenants.compiled import compiled_once
from tenants.models import Tenant

from .domain import SECONDS_PER_HOUR, utilisation
from .models import (
    Adjustment,
    Statement,
    StatementLine,
    TenantMonthTotal,
    TenantPoolTotal,
    UsageMonth,
)

ZERO = Decimal(0)


# What the month figures are summed from (the kept totals, the usage months with their
# allocations and pools, statements, their lines and adjustments, tenants): what a read kept
# across requests declares when it sums them (tenants.kept_reads).
FIGURE_MODELS = (TenantMonthTotal, TenantPoolTotal, UsageMonth, Statement, StatementLine,
                 Adjustment, Tenant, Pool, Allocation)


def hours(seconds) -> Decimal:
    """Device-seconds as hours to 4 places, per line (as a statement line holds them), so
    sums and differences of what is shown are exact: idle = allocated − used, line by
    line and in total."""
    return (Decimal(seconds or 0) / SECONDS_PER_HOUR).quantize(Decimal("0.0001"))


@dataclass
class MonthFigures:
    tenant_id: int
    tenant: str  # slug
    month: dt.date
    allocated_h: Decimal = ZERO
    used_h: Decimal = ZERO
    idle_h: Decimal = ZERO
    borrowed_h: Decimal = ZERO
    credit_h: Decimal = ZERO
    charged_h: Decimal = ZERO
    usage_amount: Decimal = ZERO  # Σ lines, each to the cent
    adjustments: Decimal = ZERO
    closed: bool = False
    pending_hours: int = 0
    lines: int = 0
    by_pool: dict[str, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def final(self) -> Decimal:
        return self.usage_amount + self.adjustments

    @property
    def currency(self) -> str:
        return settings.PORTAL_CURRENCY


def month_figures(*, tenant_ids: Iterable[int] | None = None,
                  months: Iterable[dt.date] | None = None, route: str = "",
                  first: dt.date | None = None, last: dt.date | None = None
                  ) -> list[MonthFigures]:
    """Every (tenant, month) with usage, a statement or an adjustment, among the tenants and
    months given (None: all; `first`/`last`: a range of months, in SQL). With a route, only
    that route's lines, and no adjustment (an adjustment is the whole tenant-month's). Four
    queries whatever the size."""
    tenant_ids = None if tenant_ids is None else list(tenant_ids)  # read more than once

    def scoped(qs, tenant_field: str, month_field: str):
        if tenant_ids is not None:
            qs = qs.filter(**{f"{tenant_field}__in": tenant_ids})
        if months is not None:
            qs = qs.filter(**{f"{month_field}__in": list(months)})
        if first is not None:
            qs = qs.filter(**{f"{month_field}__gte": first})
        if last is not None:
            qs = qs.filter(**{f"{month_field}__lte": last})
        return qs

    closed = {(s["tenant_id"], s["month"]): s["pk"] for s in scoped(
        Statement.objects.filter(closed_at__isnull=False), "tenant_id", "month")
        .values("pk", "tenant_id", "month")}
    out: dict[tuple[int, dt.date], MonthFigures] = {}

    def row(tenant_id: int, month: dt.date) -> MonthFigures:
        key = (tenant_id, month)
        if key not in out:
            out[key] = MonthFigures(tenant_id, "", month, closed=key in closed)
        return out[key]

    usage = scoped(UsageMonth.objects, "tenant_id", "month")
    if route:
        usage = usage.filter(allocation__route=route)
    for u in usage.values(
            "tenant_id", "month", "pool__slug", "allocated_s", "used_s", "borrowed_s",
            "credit_s", "charged_s", "amount", "pending_hours"):
        if (u["tenant_id"], u["month"]) in closed:
            continue  # a closed month is its frozen lines
        f = row(u["tenant_id"], u["month"])
        allocated, used = hours(u["allocated_s"]), hours(u["used_s"])
        f.allocated_h += allocated
        f.used_h += used
        f.idle_h += max(ZERO, allocated - used)
        f.borrowed_h += hours(u["borrowed_s"])
        f.credit_h += hours(u["credit_s"])
        f.charged_h += hours(u["charged_s"])
        f.usage_amount += money(u["amount"] or 0)
        f.pending_hours += u["pending_hours"] or 0
        f.lines += 1
        pool = f.by_pool.setdefault(u["pool__slug"], {"allocated_h": ZERO, "used_h": ZERO,
                                                      "amount": ZERO})
        pool["allocated_h"] += allocated
        pool["used_h"] += used
        pool["amount"] += money(u["amount"] or 0)
    by_statement = {pk: key for key, pk in closed.items()}
    frozen = StatementLine.objects.filter(statement_id__in=list(by_statement))
    if route:
        frozen = frozen.filter(route=route)
    for line in frozen.values(
            "statement_id", "allocation__pool__slug", "allocated_h", "used_h", "idle_h",
            "credit_h", "charged_h", "amount"):
        f = row(*by_statement[line["statement_id"]])
        f.allocated_h += line["allocated_h"]
        f.used_h += line["used_h"]
        f.idle_h += line["idle_h"]
        f.credit_h += line["credit_h"]
        f.charged_h += line["charged_h"]
        f.usage_amount += line["amount"]
        f.lines += 1
        pool = f.by_pool.setdefault(line["allocation__pool__slug"], {
            "allocated_h": ZERO, "used_h": ZERO, "amount": ZERO})
        pool["allocated_h"] += line["allocated_h"]
        pool["used_h"] += line["used_h"]
        pool["amount"] += line["amount"]
    adjustments: dict[tuple[int, dt.date], Decimal] = defaultdict(Decimal)
    made = scoped(Adjustment.objects, "statement__tenant_id", "statement__month").values(
        "statement__tenant_id", "statement__month", "amount")
    for a in [] if route else made:
        adjustments[(a["statement__tenant_id"], a["statement__month"])] += a["amount"]
    for key, amount in adjustments.items():
        row(*key).adjustments += amount
    # The slugs of the tenants found, not of every tenant (5,000 of them: 4 ms a page).
    slugs = dict(Tenant.objects.filter(pk__in={t for t, _ in out}).values_list("pk", "slug"))
    for f in out.values():
        f.tenant = slugs.get(f.tenant_id, "")
    return sorted(out.values(), key=lambda f: (f.tenant, f.month))


Sums = dict[str, Decimal]


def _zero() -> Sums:
    return {"allocated_h": ZERO, "used_h": ZERO, "amount": ZERO}


def sum_figures(figures: Iterable[MonthFigures], by: tuple[str, ...], *,
                adjustments: bool = True) -> dict[tuple, Sums]:
    """The reference: MonthFigures summed per group of `by` ⊆ (tenant or tenant_id, month,
    pool), tenant as its slug. Per pool, amounts are the lines' (an adjustment belongs to no
    pool)."""
    out: dict[tuple, Sums] = defaultdict(_zero)
    for f in figures:
        key = {"tenant": f.tenant, "tenant_id": f.tenant_id, "month": f.month}
        if "pool" in by:
            for pool, p in f.by_pool.items():
                t = out[tuple({**key, "pool": pool}[k] for k in by)]
                for name in ("allocated_h", "used_h", "amount"):
                    t[name] += p[name]
            continue
        t = out[tuple(key[k] for k in by)]
        t["allocated_h"] += f.allocated_h
        t["used_h"] += f.used_h
        t["amount"] += f.final if adjustments else f.usage_amount
    return dict(out)


def figure_sums(by: tuple[str, ...], *, tenant_ids: Iterable[int] | None = None,
                months: Iterable[dt.date] | None = None, route: str = "",
                adjustments: bool = True) -> dict[tuple, Sums]:
    """sum_figures(month_figures(…)), summed by the database on PostgreSQL: line by line
    with the roundings month_figures makes (hours to 4 places, ties to even; amounts to the
    cent, half up), so a page or a scrape over every tenant and month reads a few sums
    instead of every line. Elsewhere (SQLite: decimals are floats there) it is the
    reference itself; the property tests compare the two. Over every route it reads the
    totals kept at write time (TenantMonthTotal), so a scrape or a page of every tenant
    reads one row per tenant, pool and month."""
    if connection.vendor != "postgresql":
        return sum_figures(month_figures(tenant_ids=tenant_ids, months=months, route=route),
                           by, adjustments=adjustments)


    ids = None if tenant_ids is None else list(tenant_ids)
    months = None if months is None else list(months)
    field = DecimalField(max_digits=24, decimal_places=4)

    class Hours(Func):
        """billing.figures.hours in SQL: seconds (4 decimal places) / 3600 to 4 places, an
        exact tie (10⁴·s ≡ 1800 mod 3600) to the even neighbour as Decimal.quantize does;
        otherwise ROUND, whose half-away rounding only differs on ties."""
        template = ("CASE WHEN MOD(%(expressions)s * 10000, 3600) = 1800 THEN "
                    "(FLOOR(%(expressions)s * 10000 / 3600) + "
                    "MOD(FLOOR(%(expressions)s * 10000 / 3600), 2)) / 10000 "
                    "ELSE ROUND(%(expressions)s / 3600, 4) END")
        output_field = field

    class Cents(Func):
        template = "ROUND(%(expressions)s, 2)"  # half away from zero = money()'s half up
        output_field = field

    out: dict[tuple, Sums] = defaultdict(_zero)

    def add(qs, names: dict[str, str], **sums) -> None:
        if ids is not None:
            qs = qs.filter(**{f"{names['tenant_id']}__in": ids})
        if months is not None:
            qs = qs.filter(**{f"{names['month']}__in": months})
        cols = [names[k] for k in by]
        n = len(cols)
        # As tuples (values_list): a page of every tenant and month reads ~1,000 groups,
        # and building a dict per row was a third of this loop.
        for row in qs.values(*cols).annotate(**sums).values_list(*cols, *sums).order_by():
            t = out[row[:n]]
            for name, value in zip(sums, row[n:], strict=True):
                t[name] += value or ZERO

    if route:
        # A route's share: its lines summed here (the totals are per pool, not per route).
        closed = Statement.objects.filter(tenant_id=OuterRef("tenant_id"),
                                          month=OuterRef("month"), closed_at__isnull=False)
        usage = UsageMonth.objects.exclude(Exists(closed)).filter(allocation__route=route)
        add(usage, {"tenant_id": "tenant_id", "tenant": "tenant__slug", "month": "month",
                    "pool": "pool__slug"},
            allocated_h=Sum(Hours(F("allocated_s"))), used_h=Sum(Hours(F("used_s"))),
            amount=Sum(Cents(F("amount"))))
        lines = StatementLine.objects.filter(statement__closed_at__isnull=False, route=route)
        add(lines, {"tenant_id": "statement__tenant_id", "tenant": "statement__tenant__slug",
                    "month": "statement__month", "pool": "allocation__pool__slug"},
            allocated_h=Sum("allocated_h"), used_h=Sum("used_h"), amount=Sum("amount"))
    else:
        # Every route: the totals kept at write time (billing.totals), one row per tenant,
        # pool and month, already rounded line by line as above.
        _add_kept(out, by, ids, months, adjustments=adjustments)
        return dict(out)
    if adjustments and not route and "pool" not in by:
        add(Adjustment.objects.all(), {
            "tenant_id": "statement__tenant_id", "tenant": "statement__tenant__slug",
            "month": "statement__month"}, amount=Sum("amount"))
    return dict(out)


def _kept_sql(by: tuple[str, ...], ids: list[int] | None, months: list[dt.date] | None, *,
              adjustments: bool) -> tuple[str, list]:
    """figure_sums over every route on PostgreSQL as one statement: the kept totals and (unless
    by pool) the adjustments, grouped by `by` (columns c0, c1, …, then allocated_h, used_h,
    amount). Tenants and months are array parameters, so the SQL has one shape per grouping
    and nothing is compiled per request (through the ORM, building and compiling these was
    most of a one-tenant page's figures)."""
    tenants = Tenant._meta.db_table
    pools = TenantMonthTotal._meta.get_field("pool").related_model._meta.db_table
    parts, params = [], []

    def part(select: str, source: str, columns: dict[str, str], tenant: str, month: str):
        where = []
        if ids is not None:
            where.append(f"{tenant} = ANY(%s)")
            params.append(ids)
        if months is not None:
            where.append(f"{month} = ANY(%s)")
            params.append(months)
        cols = "".join(f"{columns[k]} AS c{i}, " for i, k in enumerate(by))
        parts.append(f"SELECT {cols}{select} FROM {source}"
                     + (" WHERE " + " AND ".join(where) if where else ""))

    joins = (f" JOIN {tenants} tt ON tt.id = k.tenant_id" if "tenant" in by else "") + (
        f" JOIN {pools} pp ON pp.id = k.pool_id" if "pool" in by else "")
    part("k.allocated_h, k.used_h, k.amount", f"{TenantMonthTotal._meta.db_table} k{joins}",
         {"tenant_id": "k.tenant_id", "tenant": "tt.slug", "month": "k.month",
          "pool": "pp.slug"}, "k.tenant_id", "k.month")
    if adjustments and "pool" not in by:
        joins = f" JOIN {tenants} tt ON tt.id = s.tenant_id" if "tenant" in by else ""
        part("0, 0, a.amount", f"{Adjustment._meta.db_table} a JOIN "
             f"{Statement._meta.db_table} s ON s.id = a.statement_id{joins}",
             {"tenant_id": "s.tenant_id", "tenant": "tt.slug", "month": "s.month"},
             "s.tenant_id", "s.month")
    group = ", ".join(f"c{i}" for i in range(len(by)))
    sql = (f"SELECT {group + ', ' if group else ''}SUM(allocated_h) AS allocated_h, "
           f"SUM(used_h) AS used_h, SUM(amount) AS amount FROM ("
           + " UNION ALL ".join(parts) + ") x" + (f" GROUP BY {group}" if group else ""))
    return sql, params


def _add_kept(out: dict, by: tuple[str, ...], ids: list[int] | None,
              months: list[dt.date] | None, *, adjustments: bool) -> None:
    sql, params = _kept_sql(by, ids, months, adjustments=adjustments)
    n = len(by)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            if not n and all(v is None for v in row):  # no group, no rows: no sums
                continue
            t = out[tuple(row[:n])]
            for name, value in zip(("allocated_h", "used_h", "amount"), row[n:], strict=True):
                t[name] += value or ZERO


@dataclass(frozen=True)
class MonthSpend:
    """A month's spend over the tenants given: `total`, every tenant's final amount (lines to
    the cent plus adjustments) added up; `leaders`, the `top` tenants by spend, ties by name
    in code-point order then id, as (id, spend, name); `of`, the spend of the tenants asked
    for that have any."""

    total: Decimal
    leaders: list[tuple[int, Decimal, str]]
    of: dict[int, Decimal]


def month_spend(tenant_ids: Iterable[int] | None, month: dt.date, *, top: int,
                of: Iterable[int] = ()) -> MonthSpend:
    """figure_sums by tenant for one month, ranked and added up by PostgreSQL: finance's
    month so far reads the leaders, one total and the spend of the tenants with budgets,
    not every tenant's sum. Elsewhere the reference: figure_sums, then sorted here; the
    property tests hold the two equal."""
    of = list(of)
    if connection.vendor != "postgresql":
        spent = {key[0]: sums["amount"] for key, sums in figure_sums(
            ("tenant_id",), tenant_ids=tenant_ids, months=[month]).items()}
        names = dict(Tenant.objects.filter(pk__in=list(spent)).values_list("pk", "name"))
        ranked = sorted(spent, key=lambda t: (-spent[t], names[t], t))[:top]
        return MonthSpend(sum(spent.values(), ZERO), [(t, spent[t], names[t]) for t in ranked],
                          {t: spent[t] for t in of if t in spent})
    ids = None if tenant_ids is None else list(tenant_ids)
    # Each tenant's final amount, as figure_sums by tenant sums it (the kept totals are to
    # the cent line by line, adjustments added).
    spent, params = _kept_sql(("tenant_id",), ids, [month], adjustments=True)
    spent = f"SELECT c0 AS tid, amount FROM ({spent}) g"  # noqa: S608 — no input in it
    with connection.cursor() as cursor:
        # The window sums every tenant's spend before LIMIT keeps the leaders; names in
        # code-point order (COLLATE "C"), as Python compares them.
        cursor.execute(
            f"WITH spent AS ({spent}) SELECT s.tid, s.amount, t.name, "  # noqa: S608
            f"SUM(s.amount) OVER () FROM spent s JOIN {Tenant._meta.db_table} t "
            f'ON t.id = s.tid ORDER BY s.amount DESC, t.name COLLATE "C", s.tid LIMIT %s',
            [*params, top])
        found = cursor.fetchall()
        total = found[0][3] if found else ZERO
        if not found:  # none in the top: any spend at all is in the total
            cursor.execute(f"SELECT SUM(amount) FROM ({spent}) x", params)  # noqa: S608
            total = cursor.fetchone()[0] or ZERO
        asked = {}
        if of:
            cursor.execute(f"SELECT tid, amount FROM ({spent}) x "  # noqa: S608
                           "WHERE tid = ANY(%s)", [*params, of])
            asked = dict(cursor.fetchall())
    return MonthSpend(total, [(t, amount, name) for t, amount, name, _ in found], asked)


@compiled_once
def _pool_sums():
    return TenantPoolTotal.objects.values("tenant__slug", "pool__slug", "allocated_h", "used_h",
                                          "amount").order_by()


@compiled_once
def _adjustment_sums():
    return (Adjustment.objects.values("statement__tenant__slug").annotate(amount=Sum("amount"))
            .order_by())


def metric_sums() -> tuple[dict[tuple, Sums], dict[tuple, Sums]]:
    """What /metrics exports, over every month: figure_sums by (tenant, pool) and by tenant
    (adjustments included), from the all-time totals kept per tenant and pool
    (TenantPoolTotal) in two queries compiled once per process (tenants.compiled) — a
    scrape reads one row per tenant and pool, whatever the months. The property test holds
    it equal to figure_sums (and so to the reference)."""
    if connection.vendor != "postgresql":
        return figure_sums(("tenant", "pool")), figure_sums(("tenant",))
    per_pool: dict[tuple, Sums] = {}
    per_tenant: dict[tuple, Sums] = defaultdict(_zero)
    for row in _pool_sums():
        sums = {name: row[name] or ZERO for name in ("allocated_h", "used_h", "amount")}
        per_pool[(row["tenant__slug"], row["pool__slug"])] = sums
        t = per_tenant[(row["tenant__slug"],)]
        for name, value in sums.items():
            t[name] += value
    for row in _adjustment_sums():
        per_tenant[(row["statement__tenant__slug"],)]["amount"] += row["amount"] or ZERO
    return per_pool, dict(per_tenant)


def month_totals(*, tenant_ids: Iterable[int] | None = None, months: list[dt.date],
                 route: str = "") -> dict[dt.date, Sums]:
    """Per month, the sum of month_figures over the tenants given (None: all): the finance
    overview's month totals."""
    sums = figure_sums(("month",), tenant_ids=tenant_ids, months=months, route=route)
    return {m: sums.get((m,)) or _zero() for m in months}


def grand_total(totals: Iterable[Sums]) -> dict[str, Decimal | None]:
    """Month totals (month_totals, or sum_figures by month) summed over the months:
    allocated, used and charged; idle = allocated − used (exact: both are sums of hours to 4
    places) and utilisation (billing.domain.utilisation) of those sums. The finance
    overview's cards and footer; the one place they are added up."""
    totals = list(totals)
    grand: dict[str, Decimal | None] = {
        "allocated_h": sum(t["allocated_h"] for t in totals),
        "used_h": sum(t["used_h"] for t in totals),
        "amount": sum(t["amount"] for t in totals)}
    grand["idle_h"] = grand["allocated_h"] - grand["used_h"]
    grand["utilisation"] = utilisation(grand["used_h"], grand["allocated_h"])
    return grand


def apply_to_overview(rows, totals: list[dict], figures: list[MonthFigures],
                      sums: dict[dt.date, dict[str, Decimal]] | None = None) -> None:
    """Put the one number into the finance overview's rows (from `figures`, those of the
    rows' tenants) and month totals (`sums`: month_totals of every tenant the filters leave;
    by default the sum of `figures`, when those are all of them)."""
    if sums is None:
        sums = {k[0]: v for k, v in sum_figures(figures, ("month",)).items()}
    by_tenant: dict[int, list[MonthFigures]] = defaultdict(list)
    for f in figures:
        by_tenant[f.tenant_id].append(f)
    for r in rows:
        mine = by_tenant.get(r.tenant_id, [])
        r.months = {f.month: {"allocated_h": f.allocated_h, "used_h": f.used_h,
                              "amount": f.final} for f in mine}
        r.allocated_h = sum((f.allocated_h for f in mine), ZERO)
        r.used_h = sum((f.used_h for f in mine), ZERO)
        r.amount = sum((f.final for f in mine), ZERO)
    for t in totals:
        t.update(sums.get(t["month"]) or {"allocated_h": ZERO, "used_h": ZERO, "amount": ZERO})


def apply_sums_to_overview(rows, totals: list[dict], months: list[dt.date], *,
                           route: str = "", month_sums: dict[dt.date, Sums]) -> None:
    """apply_to_overview for the page: the rows' figures per tenant and month from
    figure_sums (the kept totals over every route; the same sums as month_figures', which
    the property test holds), month totals given (month_totals)."""
    per = figure_sums(("tenant_id", "month"), tenant_ids=[r.tenant_id for r in rows],
                      months=months, route=route)
    by_tenant: dict[int, dict[dt.date, Sums]] = defaultdict(dict)
    for (tenant_id, month), sums in per.items():
        by_tenant[tenant_id][month] = sums
    for r in rows:
        r.months = by_tenant.get(r.tenant_id, {})
        r.allocated_h = sum((m["allocated_h"] for m in r.months.values()), ZERO)
        r.used_h = sum((m["used_h"] for m in r.months.values()), ZERO)
        r.amount = sum((m["amount"] for m in r.months.values()), ZERO)
    for t in totals:
        t.update(month_sums.get(t["month"]) or _zero())


def tenant_month(tenant_id: int, month: dt.date) -> MonthFigures:
    found = month_figures(tenant_ids=[tenant_id], months=[month])
    if found:
        return found[0]

    return MonthFigures(tenant_id, Tenant.objects.get(pk=tenant_id).slug, month)
