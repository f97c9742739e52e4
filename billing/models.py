"""Usage, rates and statements over allocations and fleet history."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from fleet.inventory.pricing import money_text
from fleet.models import Allocation, Pool, RateCard  # noqa: F401 - RateCard lives in fleet
from tenants.models import AppendOnlyModel, Tenant

from .domain import month_start, right_sizing


class UsageHour(models.Model):
    """One allocation in one hour: device-seconds allocated, used, credited and charged."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="hours")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField()
    allocated_s = models.DecimalField(max_digits=16, decimal_places=4)
    used_s = models.DecimalField(max_digits=16, decimal_places=4, null=True, blank=True)
    credit_s = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    # Device-seconds Kueue admitted above the queue's quota (shared pool: charged).
    borrowed_s = models.DecimalField(max_digits=16, decimal_places=4, default=0, db_default=0)
    charged_s = models.DecimalField(max_digits=16, decimal_places=4)
    rate = models.DecimalField(max_digits=10, decimal_places=4)
    amount = models.DecimalField(max_digits=14, decimal_places=4)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["allocation", "hour"],
                                               name="one_row_per_allocation_hour")]
        # (hour): how far the rollup has come (billing.budgets.rolled_up_until), one probe.
        indexes = [models.Index(fields=["tenant", "hour"]),
                   models.Index(fields=["hour"], name="usage_hour_by_hour")]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.hour:%Y-%m-%d %H:00}"

    @property
    def pending(self) -> bool:
        return self.used_s is None


class ClusterUsageHour(models.Model):
    """A dispatched allocation's hour in one cluster (billing.clusters): its part of the
    quota, of the use measured and of the amount. The parts add up to the UsageHour."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField()
    cluster = models.CharField(max_length=63)  # the registry's slug; kept after a retire
    allocated_s = models.DecimalField(max_digits=16, decimal_places=4)
    used_s = models.DecimalField(max_digits=16, decimal_places=4, null=True, blank=True)
    amount = models.DecimalField(max_digits=14, decimal_places=4)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["allocation", "hour", "cluster"],
                                               name="one_row_per_allocation_hour_cluster")]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.hour:%Y-%m-%d %H:00} {self.cluster}"


class UsageMonth(models.Model):
    """Monthly totals per allocation, refreshed from UsageHour by every rollup."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="months")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="usage_months")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="+")
    month = models.DateField()
    allocated_s = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    used_s = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    credit_s = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    borrowed_s = models.DecimalField(max_digits=18, decimal_places=4, default=0, db_default=0)
    charged_s = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    amount = models.DecimalField(max_digits=16, decimal_places=4, default=0)
    hours = models.PositiveIntegerField(default=0)
    pending_hours = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["allocation", "month"],
                                               name="one_row_per_allocation_month")]
        indexes = [models.Index(fields=["month", "tenant"])]

    def __str__(self) -> str:
        return f"{self.allocation_id} {self.month:%Y-%m}"


class TenantMonthTotal(models.Model):
    """A tenant's month in one pool, added up at write time: its lines' hours (each to 4
    places) and amounts (each to the cent), as billing.figures.month_figures counts them (an
    open month from its usage months, a closed one from its frozen lines). Pages and
    /metrics that sum every tenant's months read these rows, not every line. Written only by
    billing.totals.refresh_totals (the rollup, closing and reopening a month call it);
    adjustments are not here (they belong to no pool; few, they are summed where read).
    tests/db/test_invariants.py holds every row equal to the sum it replaces."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="+")
    month = models.DateField()
    allocated_h = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    used_h = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    amount = models.DecimalField(max_digits=16, decimal_places=2, default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "pool", "month"],
                                               name="one_total_per_tenant_pool_month")]
        indexes = [models.Index(fields=["month", "tenant"], name="total_by_month_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.pool_id} {self.month:%Y-%m}"


class TenantPoolTotal(models.Model):
    """A tenant's every month in one pool: the sum of its TenantMonthTotal rows, rebuilt by
    billing.totals.refresh_totals whenever one of them is. /metrics exports these, so a
    scrape reads one row per tenant and pool, however many months there are.
    tests/db/test_invariants.py holds every row equal to the sum it replaces."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="+")
    allocated_h = models.DecimalField(max_digits=20, decimal_places=4, default=0)
    used_h = models.DecimalField(max_digits=20, decimal_places=4, default=0)
    amount = models.DecimalField(max_digits=18, decimal_places=2, default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "pool"],
                                               name="one_total_per_tenant_pool")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.pool_id}"


class Statement(models.Model):
    """A tenant's month. Open: computed live. Closed: its lines are frozen."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="statements")
    month = models.DateField()
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                  on_delete=models.PROTECT, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "month"],
                                               name="one_statement_per_tenant_month")]

    def __str__(self) -> str:
        return f"{self.tenant.slug} {self.month:%Y-%m}"

    @property
    def closed(self) -> bool:
        return self.closed_at is not None


class StatementLine(models.Model):
    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="+")
    description = models.CharField(max_length=200)
    route = models.CharField(max_length=30)
    policy = models.CharField(max_length=200)
    allocated_h = models.DecimalField(max_digits=14, decimal_places=4)
    used_h = models.DecimalField(max_digits=14, decimal_places=4)
    idle_h = models.DecimalField(max_digits=14, decimal_places=4)
    credit_h = models.DecimalField(max_digits=14, decimal_places=4)
    charged_h = models.DecimalField(max_digits=14, decimal_places=4)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    pending_hours = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.description

    @property
    def right_sizing(self) -> str:
        return right_sizing(self.route, self.allocated_h, self.used_h)


class Adjustment(AppendOnlyModel):
    """A correction to a closed month, with its reason; closed lines are never edited, nor
    is an adjustment: a withdrawal is a new adjustment of the opposite amount that names the
    one it withdraws (`withdraws`; at most one each), so every sum of the month, in every
    export, nets the two to nothing while both stay on the record."""

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="adjustments")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    reason = models.TextField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(auto_now_add=True)
    withdraws = models.OneToOneField("self", null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="withdrawal")

    def __str__(self) -> str:
        return f"{self.amount} on {self.statement}"

    @property
    def kind(self) -> str:
        return "withdrawal" if self.withdraws_id else "adjustment"

    @property
    def description(self) -> str:
        """What statements, exports and the API call it: the reason, and for a withdrawal
        which adjustment it withdraws."""
        if self.withdraws_id:
            w = self.withdraws
            return (f"Withdrawal of the {money_text(w.amount)} adjustment of "
                    f"{w.at:%Y-%m-%d} ({w.reason}): {self.reason}")
        return self.reason


def this_month():
    return month_start(timezone.now())


class Budget(models.Model):
    """Finance's monthly spending budget for a tenant (in PORTAL_CURRENCY), from a month on:
    the budget in force in a month is the latest row that starts at or before it (a blank
    amount: no budget from then). Rows are history: a past statement shows the budget then."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    from_month = models.DateField(default=this_month)
    monthly_amount = models.DecimalField(max_digits=14, decimal_places=2, null=True,
                                         blank=True)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                               related_name="+")
    set_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "from_month"],
                                               name="one_budget_per_tenant_and_month")]
        ordering = ["tenant", "-from_month"]

    def __str__(self) -> str:
        return f"{self.tenant} {self.monthly_amount}/month from {self.from_month:%Y-%m}"


class BudgetAlert(models.Model):
    """A threshold crossed in a month: the unique key makes each one notify once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts")
    month = models.DateField()
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(max_digits=14, decimal_places=2)
    budget = models.DecimalField(max_digits=14, decimal_places=2)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Re-armed when the budget changes: a crossing is of one amount.
        constraints = [models.UniqueConstraint(fields=["tenant", "month", "threshold", "budget"],
                                               name="one_alert_per_month_threshold_budget")]

    def __str__(self) -> str:
        return f"{self.tenant} {self.threshold}% of {self.month:%Y-%m}"


class StrandedFinding(models.Model):
    """Capacity an allocation holds and does not use (billing.stranded), as found, priced and
    decided. One open finding per allocation and kind: each detection pass refreshes it, and
    closes it as resolved once the series no longer show it."""

    class Kind(models.TextChoices):  # the values of billing.stranded.Kind
        IDLE_HOLD = "idle_hold", "Idle hold"
        STALLED_RUN = "stalled_run", "Stalled run"
        OVERSIZED = "oversized", "Oversized hold"
        QUOTA_BLOCKED = "quota_blocked", "Quota says no while capacity idles"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined (kept)"
        RESOLVED = "resolved", "Resolved (no longer measured)"

    class Action(models.TextChoices):  # the values of billing.stranded.Action
        RELEASE = "release", "Release"
        SHRINK = "shrink", "Shrink"
        MOVE_TO_MIG = "move_to_mig", "Move to MIG"
        CHECK_RUN = "check_run", "Check the run"
        RAISE_QUOTA = "raise_quota", "Raise the quota"

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT,
                                   related_name="stranded_findings")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    stranded_devices = models.DecimalField(max_digits=12, decimal_places=4)
    cost_per_day = models.DecimalField(max_digits=14, decimal_places=2)
    action = models.CharField(max_length=20, choices=Action.choices)
    proposal = models.TextField()
    proposal_data = models.JSONField(default=dict, blank=True)
    cost_per_day_after = models.DecimalField(max_digits=14, decimal_places=2, null=True,
                                             blank=True)
    reason = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    needs_yes = models.BooleanField(default=False)  # a binding hold: only the lead's yes acts
    stranded_since = models.DateTimeField()  # the start of the window that showed it
    found_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)  # decided or resolved
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.PROTECT, related_name="+")
    decision_reason = models.TextField(blank=True)
    outcome = models.TextField(blank=True)  # what accepting did, in words
    given_back_devices = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    grace_ended_at = models.DateTimeField(null=True, blank=True)  # the policy was applied

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["allocation", "kind"], condition=models.Q(status="open"),
            name="one_open_finding_per_allocation_and_kind")]
        indexes = [models.Index(fields=["tenant", "status"]),
                   models.Index(fields=["status", "found_at"])]
        ordering = ["-found_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of allocation {self.allocation_id}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    @property
    def cost_text(self) -> str:
        return money_text(self.cost_per_day)

    @property
    def proposal_sentence(self) -> str:
        """The proposal as a sentence ending once ("… stops.", never "… stops..")."""
        text = self.proposal.strip()
        return text if text.endswith((".", "!", "?")) else f"{text}."


class StrandedPolicy(models.Model):
    """What happens to a tenant's finding nobody answered within the grace period: set by
    the tenant's leads. Holds under a contractual or regulatory origin are never changed
    this way (billing.stranded.grace_action)."""

    class WhenUnanswered(models.TextChoices):  # the values of billing.stranded.Unanswered
        NOTIFY = "notify", "Remind the leads only"
        SHRINK = "shrink", "Accept a proposed shrink"
        RELEASE = "release", "Accept a proposed shrink or release"

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE,
                                  related_name="stranded_policy")
    when_unanswered = models.CharField(max_length=10, choices=WhenUnanswered.choices,
                                       default=WhenUnanswered.NOTIFY)
    grace_days = models.PositiveSmallIntegerField(default=7)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"{self.tenant}: {self.get_when_unanswered_display()} after {self.grace_days} d"
