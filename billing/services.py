"""Rollup of usage from allocations and Prometheus, statements, closing and adjustments."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone
from django.utils.module_loading import import_string

from fleet.allocations import lifecycle
from fleet.domain import FleetError, devices_text, in_devices
from fleet.inventory.pricing import money, rate_at, rate_history
from fleet.inventory.selectors import mig_weights
from fleet.inventory.services import rate_card_checked, rate_card_create
from fleet.models import Allocation, AllocationResize, NodeOutage, QueueUsageHour
from tenants.access import require_billing_writer, require_platform_admin
from tenants.audit import audit_record, reason_error
from tenants.errors import DomainError
from tenants.models import Tenant

from . import prometheus
from .cluster_usage import record_cluster_parts
from .domain import (
    HOUR,
    POLICIES,
    adjustment_check,
    allocation_hour,
    floor_hour,
    hours_between,
    month_bounds,
    month_start,
    rate_reprices,
    right_sizing,
    sizes_held,
    utilisation,
)
from .figures import hours, tenant_month
from .models import (
    Adjustment,
    RateCard,
    Statement,
    StatementLine,
    UsageHour,
    UsageMonth,
)
from .totals import refresh_totals
from .validation import adjustment_errors

BILLED = tuple(sorted(lifecycle.BILLED))


class BillingError(DomainError):
    """A refusal of billing (a rate, a close, an adjustment)."""


@dataclass
class RollupReport:
    hours: int = 0
    rows: int = 0
    pending_hours: list[dt.datetime] | None = None

    def summary(self) -> str:
        pending = len(self.pending_hours or [])
        return (f"{self.rows} allocation-hour(s) over {self.hours} hour(s); "
                f"{pending} hour(s) pending on Prometheus")


def usage_source():
    """Where used device-seconds come from: Prometheus (DCGM), or what PORTAL_USAGE_SOURCE
    names (the embedded run's synthetic use). Same signature either way."""
    if settings.PORTAL_USAGE_SOURCE:
        return import_string(settings.PORTAL_USAGE_SOURCE)
    return prometheus.used_device_seconds


def _billed_between(start: dt.datetime, end: dt.datetime):
    """Allocations that hold billable hours in [start, end)."""
    return Allocation.objects.filter(status__in=BILLED, starts_at__lt=end).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=start))


def rollup_usage(*, start: dt.datetime, end: dt.datetime, prometheus_url: str | None = None
                 ) -> RollupReport:
    """Recompute every allocation-hour in [start, end). Safe to re-run on any window: rows
    are replaced, never added twice; an hour Prometheus cannot answer stays pending (or keeps
    the value an earlier run measured).

    Prometheus is asked first, with no transaction open; the rows are then written in one."""
    start, end = floor_hour(start), floor_hour(end)
    end = min(end, floor_hour(timezone.now()))  # only whole, finished hours
    report = RollupReport(pending_hours=[])
    if not _billed_between(start, end).exists():
        return report
    measured: dict[dt.datetime, dict[str, Decimal] | None] = {}
    per_cluster: dict[dt.datetime, dict[str, dict[str, Decimal]]] = {}
    by_cluster = bool(settings.PORTAL_PROMETHEUS_CLUSTER_LABEL)
    for hour in hours_between(start, end):
        report.hours += 1
        try:
            answer = usage_source()(hour, base_url=prometheus_url, weights=mig_weights(),
                                    **({"by_cluster": True} if by_cluster else {}))
        except prometheus.PrometheusError:
            measured[hour] = None
            report.pending_hours.append(hour)
            continue
        if by_cluster:
            per_cluster[hour] = answer
            answer = {ns: sum(parts.values(), Decimal(0)) for ns, parts in answer.items()}
        measured[hour] = answer
    report.rows = _record_hours(start, end, measured)
    record_cluster_parts(start, end, per_cluster if by_cluster else None)
    return report


@transaction.atomic
def borrowed_device_seconds(allocations, start: dt.datetime, end: dt.datetime
                            ) -> dict[tuple[int, dt.datetime], Decimal]:
    """(allocation, hour) → device-seconds admitted above quota, from the queue-hours the
    fleet integrates from Kueue's admissions (MIG slices as device-equivalents)."""
    weights = mig_weights()
    profile = {a.pk: a.mig_profile for a in allocations}
    return {(q.allocation_id, q.hour): in_devices(q.borrowed_s, profile[q.allocation_id],
                                                  weights)
        for q in QueueUsageHour.objects.filter(allocation_id__in=list(profile),
                                                hour__gte=start, hour__lt=end,
                                                borrowed_s__gt=0)}


def _record_hours(start: dt.datetime, end: dt.datetime,
                  measured: dict[dt.datetime, dict[str, Decimal] | None]) -> int:
    allocations = list(_billed_between(start, end).select_related("pool")
                       .prefetch_related("nodes"))
    rates = rate_history({a.pool_id for a in allocations})
    outages = defaultdict(list)
    node_ids = {n.pk for a in allocations for n in a.nodes.all()}
    for o in NodeOutage.objects.filter(node_id__in=node_ids).select_related("node"):
        outages[o.node_id].append((o.started_at, o.ended_at, o.node.gpu_count))
    existing = {(u.allocation_id, u.hour): u.used_s for u in UsageHour.objects.filter(
        allocation__in=allocations, hour__gte=start, hour__lt=end)}
    borrowed = borrowed_device_seconds(allocations, start, end)
    resizes = defaultdict(list)
    for r in AllocationResize.objects.filter(allocation__in=allocations).order_by("at", "pk"):
        resizes[r.allocation_id].append((r.at, r.devices_before, r.devices_after))
    rows: list[UsageHour] = []
    touched: set[tuple[int, dt.date]] = set()
    for hour, used_by_ns in measured.items():
        for alloc in allocations:
            if used_by_ns is None:
                used = existing.get((alloc.pk, hour))  # keep what an earlier run measured
            else:
                used = used_by_ns.get(alloc.namespace, Decimal(0))
            figures = allocation_hour(
                route=alloc.route, starts_at=alloc.starts_at, ends_at=alloc.ends_at,
                devices=alloc.device_equivalents, hour=hour, used=used,
                outages=[o for n in alloc.nodes.all() for o in outages.get(n.pk, [])],
                rate=rate_at(rates.get(alloc.pool_id, []), hour),
                borrowed=borrowed.get((alloc.pk, hour), Decimal(0)),
                resizes=resizes.get(alloc.pk, ()))
            if figures is None:
                continue
            rows.append(UsageHour(
                allocation=alloc, tenant_id=alloc.tenant_id, pool_id=alloc.pool_id, hour=hour,
                allocated_s=figures.allocated, used_s=figures.used, credit_s=figures.credit,
                borrowed_s=figures.borrowed, charged_s=figures.charged, rate=figures.rate,
                amount=figures.amount))
            touched.add((alloc.pk, month_start(hour)))
    UsageHour.objects.bulk_create(
        rows, batch_size=1000, update_conflicts=True, unique_fields=["allocation", "hour"],
        update_fields=["allocated_s", "used_s", "credit_s", "borrowed_s", "charged_s", "rate",
                       "amount"])
    refresh_months(touched)
    return len(rows)


@transaction.atomic
def refresh_months(keys: set[tuple[int, dt.date]]) -> None:
    """Rebuild the monthly totals of these (allocation, month) pairs from their hours, and
    the tenant-month totals they add up to (billing.totals), in one transaction."""
    tenant_months: set[tuple[int, dt.date]] = set()
    by_month: dict[dt.date, set[int]] = defaultdict(set)
    for alloc_id, month in keys:
        by_month[month].add(alloc_id)
    for month, alloc_ids in by_month.items():
        m_start, m_end = month_bounds(month)
        totals = (UsageHour.objects.filter(allocation_id__in=alloc_ids, hour__gte=m_start,
                                           hour__lt=m_end)
                  .values("allocation_id", "tenant_id", "pool_id")
                  .annotate(allocated=Sum("allocated_s"), used=Sum("used_s"),
                            credit=Sum("credit_s"), borrowed=Sum("borrowed_s"),
                            charged=Sum("charged_s"),
                            amt=Sum("amount"), hours=Count("id"),
                            pending=Count("id", filter=Q(used_s__isnull=True))))
        UsageMonth.objects.bulk_create([UsageMonth(
            allocation_id=t["allocation_id"], tenant_id=t["tenant_id"], pool_id=t["pool_id"],
            month=month, allocated_s=t["allocated"] or 0, used_s=t["used"] or 0,
            credit_s=t["credit"] or 0, borrowed_s=t["borrowed"] or 0,
            charged_s=t["charged"] or 0, amount=t["amt"] or 0,
            hours=t["hours"], pending_hours=t["pending"]) for t in totals],
            update_conflicts=True, unique_fields=["allocation", "month"],
            update_fields=["allocated_s", "used_s", "credit_s", "borrowed_s", "charged_s",
                           "amount", "hours", "pending_hours"])
        tenant_months |= {(t["tenant_id"], month) for t in totals}
    refresh_totals(tenant_months)


def rollup_recent(hours: int = 6) -> RollupReport:
    """The beat task's window: the last few finished hours (re-filling pending ones)."""
    now = floor_hour(timezone.now())
    pending = UsageHour.objects.filter(used_s__isnull=True).order_by("hour").values_list(
        "hour", flat=True).first()
    start = min(now - HOUR * hours, pending) if pending else now - HOUR * hours
    return rollup_usage(start=start, end=now)


# ---------------------------------------------------------------------------------------
# Statements


@dataclass(frozen=True)
class Line:
    allocation_id: int
    description: str
    route: str
    policy: str
    allocated_h: Decimal
    used_h: Decimal
    idle_h: Decimal
    credit_h: Decimal
    charged_h: Decimal
    amount: Decimal
    pending_hours: int

    @property
    def utilisation(self) -> Decimal | None:
        return utilisation(self.used_h, self.allocated_h)

    @property
    def right_sizing(self) -> str:
        return right_sizing(self.route, self.allocated_h, self.used_h)


def _h(seconds) -> Decimal:
    return hours(seconds)


def _size_text(alloc: Allocation, resizes: list, start: dt.datetime, end: dt.datetime) -> str:
    """What the line held over the month: "3 × 2g.20gb", "4 device(s)", "4 → 3 device(s)"."""
    if alloc.mig_profile:
        counts = sizes_held(alloc.mig_count, [(r.at, r.mig_count_before, r.mig_count_after)
                                              for r in resizes], start, end)
        return " → ".join(str(c) for c in counts) + f" × {alloc.mig_profile}"
    held = sizes_held(alloc.device_equivalents, [(r.at, r.devices_before, r.devices_after)
                                                 for r in resizes], start, end)
    return " → ".join(devices_text(d) for d in held) + " device(s)"


def live_lines(tenant: Tenant | int, month: dt.date) -> list[Line]:
    months = list(UsageMonth.objects.filter(tenant=tenant, month=month)
                  .select_related("allocation", "pool").order_by("allocation_id"))
    resizes = defaultdict(list)
    for r in AllocationResize.objects.filter(
            allocation_id__in=[m.allocation_id for m in months]).order_by("at", "pk"):
        resizes[r.allocation_id].append(r)
    start, end = month_bounds(month)
    out = []
    for m in months:
        alloc = m.allocation
        used = Decimal(m.used_s)
        out.append(Line(
            allocation_id=alloc.pk,
            description=f"{alloc.namespace} · {m.pool.name} · "
                        + _size_text(alloc, resizes[alloc.pk], start, end),
            route=alloc.route, policy=POLICIES.get(alloc.route, ""),
            allocated_h=_h(m.allocated_s), used_h=_h(used),
            idle_h=max(Decimal(0), _h(m.allocated_s) - _h(used)),  # as figures count it
            credit_h=_h(m.credit_s), charged_h=_h(m.charged_s), amount=money(m.amount),
            pending_hours=m.pending_hours))
    return out


def statement_for(tenant: Tenant | int, month: dt.date) -> tuple[Statement | None, list]:
    statement = Statement.objects.filter(tenant=tenant, month=month).select_related(
        "closed_by").first()
    if statement and statement.closed:
        return statement, list(statement.lines.all())
    return statement, live_lines(tenant, month)


@transaction.atomic
def statement_close(*, tenant: Tenant, month: dt.date, by) -> Statement:
    """Freeze a month: its lines are copied and never change again."""
    require_billing_role(by)
    if month >= month_start(timezone.now()):
        raise BillingError("Only a month that has ended can be closed.")
    statement, _ = Statement.objects.select_for_update().get_or_create(tenant=tenant,
                                                                      month=month)
    if statement.closed:
        raise BillingError(f"{month:%B %Y} is closed already; correct it with an adjustment.")
    earlier = open_months_before(tenant, month)
    if earlier:
        # Months close in order: a later month closed over an open earlier one would freeze
        # figures that the earlier month's corrections could still change.
        raise BillingError(f"Close {earlier[0]:%B %Y} first: months are closed in order "
                           f"({len(earlier)} earlier month(s) with usage are still open).")
    lines = live_lines(tenant, month)
    pending = sum(line.pending_hours for line in lines)
    if pending:
        raise BillingError(f"{pending} hour(s) still wait for Prometheus; close the month "
                           "once usage is complete.")
    StatementLine.objects.bulk_create([StatementLine(
        statement=statement, allocation_id=line.allocation_id, description=line.description,
        route=line.route, policy=line.policy, allocated_h=line.allocated_h, used_h=line.used_h,
        idle_h=line.idle_h, credit_h=line.credit_h, charged_h=line.charged_h,
        amount=line.amount, pending_hours=0) for line in lines])
    statement.closed_at, statement.closed_by = timezone.now(), by
    statement.save(update_fields=["closed_at", "closed_by"])
    refresh_totals({(tenant.pk, month)})  # the month now adds up its frozen lines
    total = sum((line.amount for line in lines), Decimal(0))
    audit_record(actor=by, subject=statement, tenant=tenant, action="statement.closed",
                 reason=f"Closed {month:%B %Y} at {total:.2f} over {len(lines)} line(s).")
    return statement


def open_months_before(tenant: Tenant | int, month: dt.date) -> list[dt.date]:
    """Earlier months of the tenant with usage that are not closed, oldest first."""
    closed = set(Statement.objects.filter(tenant=tenant, closed_at__isnull=False,
                                          month__lt=month).values_list("month", flat=True))
    used = UsageMonth.objects.filter(tenant=tenant, month__lt=month).values_list(
        "month", flat=True).distinct()
    return sorted(m for m in set(used) if m not in closed)


@transaction.atomic
def statement_reopen(*, statement: Statement, by, reason: str) -> Statement:
    """Open a closed month again (a wrong close), with a reason kept in the audit trail.
    Only the latest closed month, and only before any adjustment: after that, corrections
    are adjustments. Its frozen lines are dropped (their total is in the audit row); the
    month is live again until it is closed anew."""
    require_billing_role(by)
    statement = Statement.objects.select_for_update().get(pk=statement.pk)
    if not statement.closed:
        raise BillingError(f"{statement.month:%B %Y} is open already.")
    if problem := reason_error(reason, required=True):
        raise BillingError(f"Reopening: {problem}")
    later = Statement.objects.filter(tenant=statement.tenant, month__gt=statement.month,
                                     closed_at__isnull=False).order_by("month").first()
    if later:
        raise BillingError(f"{later.month:%B %Y} is closed after it: reopen that first.")
    if statement.adjustments.exists():
        raise BillingError("This month has adjustments: correct it with another adjustment "
                           "instead of reopening it.")
    lines = list(statement.lines.all())
    total = sum((line.amount for line in lines), Decimal(0))
    statement.lines.all().delete()
    statement.closed_at, statement.closed_by = None, None
    statement.save(update_fields=["closed_at", "closed_by"])
    refresh_totals({(statement.tenant_id, statement.month)})  # live again: its usage
    audit_record(actor=by, subject=statement, tenant=statement.tenant,
                 action="statement.reopened", reason=reason.strip(),
                 data={"closed_total": f"{total:.2f}", "lines": len(lines)})
    return statement


def _locked_closed(statement: Statement, what: str) -> Statement:
    statement = Statement.objects.select_for_update().select_related("tenant").get(
        pk=statement.pk)
    if not statement.closed:
        raise BillingError(f"{what} only a closed month; an open one is recomputed from "
                           "usage.")
    return statement


@transaction.atomic
def statement_adjust(*, statement: Statement, by, amount_value, reason: str,
                     confirm="") -> Adjustment:
    """A correction to a closed month, with its reason. One that would take the final below
    zero, or exceeds half of it, is refused on its amount until `confirm` repeats the amount
    (billing.validation.adjustment_errors, asked here again under the statement's lock: two
    credits at once cannot both pass a limit each passes alone)."""
    require_billing_role(by)
    statement = _locked_closed(statement, "Adjust")
    final = tenant_month(statement.tenant_id, statement.month).final
    verdict = adjustment_errors(amount_value=amount_value, reason=reason, confirm=confirm,
                                final_before=final)
    if verdict.errors:
        raise BillingError(next(iter(verdict.errors.values())), fields=verdict.errors)
    amount = verdict.amount
    adj = Adjustment.objects.create(statement=statement, amount=amount,
                                    reason=reason.strip(), by=by)
    confirmed = verdict.check.needs_confirmation
    audit_record(actor=by, subject=statement, tenant=statement.tenant,
                 action="statement.adjusted",
                 reason=f"Adjusted by {amount:+.2f}"
                        + (" (confirmed)" if confirmed else "")
                        + f": {reason.strip()} Final {final:.2f} → "
                          f"{verdict.check.final_after:.2f}.",
                 data={"adjustment": adj.pk, "amount": f"{amount:.2f}",
                       "final_before": f"{final:.2f}",
                       "final_after": f"{verdict.check.final_after:.2f}",
                       "confirmed": confirmed})
    return adj


@transaction.atomic
def adjustment_withdraw(*, adjustment: Adjustment, by, reason: str) -> Adjustment:
    """Withdraw an adjustment: a new adjustment of the opposite amount that names it (never
    an edit or a delete), audited with its reason. Once per adjustment; a withdrawal is not
    itself withdrawn (adjust again instead); refused where it would take the final below
    zero (withdraw the later credits first)."""
    require_billing_role(by)
    if problem := reason_error(reason, required=True):
        raise BillingError(f"Withdrawing: {problem}", fields={"reason": problem})
    statement = _locked_closed(adjustment.statement, "Withdraw adjustments of")
    adjustment = Adjustment.objects.get(pk=adjustment.pk)
    if adjustment.withdraws_id:
        raise BillingError(f"Adjustment #{adjustment.pk} is itself a withdrawal: record a "
                           "new adjustment instead.")
    done = Adjustment.objects.filter(withdraws=adjustment).first()
    if done is not None:
        raise BillingError(f"Adjustment #{adjustment.pk} was withdrawn already "
                           f"({done.at:%Y-%m-%d %H:%M} by {done.by}).")
    final = tenant_month(statement.tenant_id, statement.month).final
    check = adjustment_check(-adjustment.amount, final)
    if check.below_zero:
        raise BillingError(f"Withdrawing adjustment #{adjustment.pk} would take the final "
                           f"from {final:.2f} to {check.final_after:.2f}, below zero: "
                           "withdraw the credits recorded after it first.")
    try:
        with transaction.atomic():
            withdrawal = Adjustment.objects.create(
                statement=statement, amount=-adjustment.amount, reason=reason.strip(), by=by,
                withdraws=adjustment)
    except IntegrityError:  # another withdrawal of it committed first
        raise BillingError(f"Adjustment #{adjustment.pk} was withdrawn already.") from None
    audit_record(actor=by, subject=statement, tenant=statement.tenant,
                 action="statement.adjustment_withdrawn",
                 reason=f"Withdrew adjustment #{adjustment.pk} ({adjustment.amount:+.2f}, "
                        f"{adjustment.reason}): {reason.strip()} Final {final:.2f} → "
                        f"{check.final_after:.2f}.",
                 data={"adjustment": adjustment.pk, "withdrawal": withdrawal.pk,
                       "amount": f"{withdrawal.amount:.2f}", "final_before": f"{final:.2f}",
                       "final_after": f"{check.final_after:.2f}"})
    return withdrawal


def require_billing_role(user) -> None:
    require_billing_writer(user)


class RepriceUnconfirmed(BillingError):
    """A back-dated rate re-prices hours already billed: asked once before it is recorded."""


@transaction.atomic
def ratecard_create(*, pool, rate: Decimal, effective_from: dt.datetime, by,
                    gpu_model: str = "", reprice_confirmed: bool = False) -> RateCard:
    """A new price from a moment on. Hours before it keep their price; a re-run of the rollup
    over hours after it reprices them (closed months never change, so it may not start in
    one; one that starts in the past needs `reprice_confirmed`). The card itself is written
    by the fleet's one writer, with its checks."""
    require_platform_admin(by)
    # Name the month that is closed (an earlier one may be open again, reopened after a
    # wrong close, while a later one stays closed).
    closed = Statement.objects.filter(closed_at__isnull=False, month__gte=month_start(
        effective_from)).order_by("-month").values_list("month", flat=True).first()
    if closed:
        after = month_start(closed + dt.timedelta(days=32))
        raise BillingError(f"{closed:%B %Y} is closed, and a rate from "
                           f"{effective_from:%Y-%m-%d %H:%M} UTC would re-price it; start the "
                           f"new rate on {after:%Y-%m-%d} or later.")
    try:
        # A bad card is refused with its own words before any question is asked about it.
        rate_card_checked(pool=pool, rate=rate, effective_from=effective_from,
                          gpu_model=gpu_model)
        reprices = rate_reprices(effective_from, timezone.now())
        if reprices and not reprice_confirmed:
            raise RepriceUnconfirmed(reprices.strip() + " Record it anyway?")
        return rate_card_create(pool=pool, rate=rate, by=by, effective_from=effective_from,
                                gpu_model=gpu_model)
    except FleetError as exc:
        raise BillingError(exc.message, fields=exc.fields) from None
