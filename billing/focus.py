"""FinOps FOCUS export, the pure part: one row per allocation and charge period (a day, at
one price), in the columns the FOCUS specification defines for usage-based charges (1.0's,
with 1.2's InvoiceId and ServiceSubcategory: the FinOps Foundation's validator runs FOCUS
1.2's rules on it in the suite, tests/db/test_focus_validator.py).

The portal is the provider and invoice issuer; a tenant is the billing account (its cost
centre) and sub-account; an allocation is the resource; a pool at its rate is the SKU price.
Quantities are GPU-hours (a MIG slice counts as its share of a device, as everywhere: a
3g.40gb slice's hour is 3/7 of a GPU-hour, a fraction and not a whole device). The invoice is
the tenant's statement for the month (`<tenant>:<YYYY-MM>`, as the statement API names it):
a closed month's is issued, an open month's the provisional one its statement page shows.

Costs are in cents and add up to the statement: an allocation's days share its statement
line's amount (largest remainder), and a closed month's adjustments are rows of their own
(ChargeCategory "Adjustment"), so Σ BilledCost per tenant and month is the statement's final.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, replace
from decimal import Decimal

from fleet.domain import Route

from .clusters import split_exactly

# The columns, in the specification's order of mention, with their FOCUS data types.
FOCUS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("AvailabilityZone", "String"), ("BilledCost", "Decimal"),
    ("BillingAccountId", "String"), ("BillingAccountName", "String"),
    ("BillingCurrency", "String"), ("BillingPeriodEnd", "DateTime"),
    ("BillingPeriodStart", "DateTime"), ("ChargeCategory", "String"),
    ("ChargeClass", "String"), ("ChargeDescription", "String"),
    ("ChargeFrequency", "String"), ("ChargePeriodEnd", "DateTime"),
    ("ChargePeriodStart", "DateTime"), ("CommitmentDiscountCategory", "String"),
    ("CommitmentDiscountId", "String"), ("CommitmentDiscountName", "String"),
    ("CommitmentDiscountStatus", "String"), ("CommitmentDiscountType", "String"),
    ("ConsumedQuantity", "Decimal"), ("ConsumedUnit", "String"),
    ("ContractedCost", "Decimal"), ("ContractedUnitPrice", "Decimal"),
    ("EffectiveCost", "Decimal"), ("InvoiceId", "String"), ("InvoiceIssuerName", "String"),
    ("ListCost", "Decimal"), ("ListUnitPrice", "Decimal"),
    ("PricingCategory", "String"), ("PricingQuantity", "Decimal"),
    ("PricingUnit", "String"), ("ProviderName", "String"), ("PublisherName", "String"),
    ("RegionId", "String"), ("RegionName", "String"), ("ResourceId", "String"),
    ("ResourceName", "String"), ("ResourceType", "String"),
    ("ServiceCategory", "String"), ("ServiceName", "String"),
    ("ServiceSubcategory", "String"), ("SkuId", "String"), ("SkuMeter", "String"),
    ("SkuPriceDetails", "JSON"), ("SkuPriceId", "String"), ("SubAccountId", "String"),
    ("SubAccountName", "String"),
    ("Tags", "JSON"),
)
UNIT = "GPU-Hours"
# FOCUS's service taxonomy: GPU capacity for training and serving models, in one subcategory
# (a service name has one and only one).
SERVICE_CATEGORY = "AI and Machine Learning"
SERVICE_SUBCATEGORY = "Machine Learning"
# What a SKU meters: device time, whole or in MIG slices (each slice-hour priced as its share
# of a GPU-hour, so the quantity of a slice is a fraction of a GPU-hour).
METER = "GPU time"
METER_MIG = "GPU time in MIG slices (a slice-hour as its share of a GPU-hour)"


@dataclass(frozen=True)
class ChargeDay:
    """One allocation's charges over one charge period at one rate, as plain values."""

    tenant_slug: str
    tenant_name: str
    cost_centre: str
    allocation_id: int
    namespace: str
    route: str
    route_label: str
    policy: str
    pool_slug: str
    pool_name: str
    gpu_model: str
    period_start: dt.datetime
    period_end: dt.datetime
    billing_start: dt.datetime
    billing_end: dt.datetime
    used_seconds: Decimal
    charged_seconds: Decimal
    rate: Decimal
    amount: Decimal  # exact (the hours' sum)
    billed: Decimal | None = None  # to the cent, the days summing to the statement line
    # Where it ran: FOCUS's region columns (the tenant is the sub-account already).
    cluster_slug: str = ""
    cluster_name: str = ""
    cluster_region: str = ""


@dataclass(frozen=True)
class AdjustmentCharge:
    """A closed month's correction, as finance entered it."""

    tenant_slug: str
    tenant_name: str
    cost_centre: str
    adjustment_id: int
    billing_start: dt.datetime
    billing_end: dt.datetime
    amount: Decimal
    reason: str  # the statement's words for it (a withdrawal names what it withdraws)
    withdraws: int | None = None  # a withdrawal: the adjustment it reverses


@dataclass(frozen=True)
class ClusterDay:
    """A dispatched allocation's charge period in one cluster: the sums of its hours' parts
    (billing.clusters), and the cluster in the registry's words."""

    cluster_slug: str
    cluster_name: str
    cluster_region: str
    allocated_seconds: Decimal
    used_seconds: Decimal | None  # None: use was not measured per cluster
    amount: Decimal


def by_cluster(day: ChargeDay, parts: list[ClusterDay]) -> list[ChargeDay]:
    """The charge period as one row per cluster it ran in, where use was measured per
    cluster (otherwise one row, in the cluster that holds the quota: a split of use nobody
    measured would be made up). The parts' amounts and use add up to the period's (the hours
    were split exactly); its priced quantity follows the quota held in each cluster."""
    if not parts or any(p.used_seconds is None for p in parts):
        return [day]
    charged = split_exactly(day.charged_seconds,
                            {p.cluster_slug: p.allocated_seconds for p in parts})
    if not charged:  # nothing held anywhere: the priced quantity follows the money
        charged = split_exactly(day.charged_seconds,
                                {p.cluster_slug: p.amount for p in parts})
    return [replace(day, used_seconds=p.used_seconds, amount=p.amount,
                    charged_seconds=charged.get(p.cluster_slug, Decimal(0)),
                    cluster_slug=p.cluster_slug, cluster_name=p.cluster_name,
                    cluster_region=p.cluster_region)
            for p in sorted(parts, key=lambda p: p.cluster_slug)]


def cents_by_day(amounts: list[Decimal], total: Decimal) -> list[Decimal]:
    """Round each day's exact amount to the cent so the days sum to `total` (the statement
    line): floor every day, then give the cents left to the days that lost most in rounding
    (ties: the earlier day). Each day moves by less than a cent from its exact amount as long
    as `total` is the exact sum rounded; a frozen line that differs absorbs the difference
    on its last day."""
    cent = Decimal("0.01")
    floors = [(a / cent).to_integral_value(rounding="ROUND_FLOOR") * cent for a in amounts]
    left = int(((total - sum(floors, Decimal(0))) / cent).to_integral_value())
    order = sorted(range(len(amounts)), key=lambda i: (-(amounts[i] - floors[i]), i))
    out = list(floors)
    if 0 <= left <= len(amounts):
        for i in order[:left]:
            out[i] += cent
    elif out:  # a frozen line no longer equal to the hours (late data): the last day absorbs
        out[-1] += left * cent
    return out


def _time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours(seconds: Decimal) -> str:
    return f"{(Decimal(seconds) / 3600).quantize(Decimal('0.000001')):f}"


def invoice_id(tenant_slug: str, billing_start: dt.datetime) -> str:
    """The statement a charge is invoiced on, named as the statement API names it."""
    return f"{tenant_slug}:{billing_start.astimezone(dt.UTC):%Y-%m}"


def _row(cost: str, slug: str, name: str, cost_centre: str, billing_start: dt.datetime,
         billing_end: dt.datetime, *, currency: str, provider: str) -> dict[str, str]:
    """The columns every row carries: the cost, the accounts, the billing period, who bills,
    the invoice (the month's statement) and the service."""
    row = {column: "" for column, _ in FOCUS_COLUMNS}
    row.update({
        "InvoiceId": invoice_id(slug, billing_start),
        "ServiceCategory": SERVICE_CATEGORY, "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
        "BillingAccountId": cost_centre or slug, "BillingAccountName": name,
        "SubAccountId": slug, "SubAccountName": name, "BillingCurrency": currency,
        "BillingPeriodStart": _time(billing_start), "BillingPeriodEnd": _time(billing_end),
        "ProviderName": provider, "PublisherName": provider, "InvoiceIssuerName": provider,
    })
    return row


def focus_row(c: ChargeDay, *, currency: str, provider: str) -> dict[str, str]:
    cost = f"{Decimal(c.amount if c.billed is None else c.billed).quantize(Decimal('0.01')):f}"
    rate = f"{Decimal(c.rate):f}"
    row = _row(cost, c.tenant_slug, c.tenant_name, c.cost_centre, c.billing_start,
               c.billing_end, currency=currency, provider=provider)
    row.update({
        "ChargePeriodStart": _time(c.period_start), "ChargePeriodEnd": _time(c.period_end),
        "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"{c.route_label} in {c.pool_name}: {c.policy}",
        "ConsumedQuantity": _hours(c.used_seconds), "ConsumedUnit": UNIT,
        "PricingQuantity": _hours(c.charged_seconds), "PricingUnit": UNIT,
        "ListUnitPrice": rate, "ContractedUnitPrice": rate, "PricingCategory": "Standard",
        "ResourceId": f"allocation/{c.allocation_id}", "ResourceName": c.namespace,
        "ResourceType": f"GPU allocation ({c.route_label})",
        "ServiceName": f"GPU capacity: {c.pool_name}",
        "SkuId": f"{c.pool_slug}:{c.gpu_model}",
        "SkuMeter": METER_MIG if c.route == Route.MIG_VCLUSTER else METER,
        # One price per GPU-hour, whatever the slice: nothing beyond the unit price to detail.
        "SkuPriceDetails": "",
        "SkuPriceId": f"{c.pool_slug}:{c.gpu_model}@{rate}",
        # The cluster is where the resource is provisioned: FOCUS's region (its id the
        # cluster's region label, or its slug when it has none; its name the cluster's).
        "RegionId": c.cluster_region or c.cluster_slug, "RegionName": c.cluster_name,
        "Tags": json.dumps({"tenant": c.tenant_slug, "route": c.route, "pool": c.pool_slug,
                            **({"cluster": c.cluster_slug} if c.cluster_slug else {})},
                           sort_keys=True),
    })
    return row


def focus_adjustment_row(a: AdjustmentCharge, *, currency: str, provider: str
                         ) -> dict[str, str]:
    cost = f"{Decimal(a.amount).quantize(Decimal('0.01')):f}"
    row = _row(cost, a.tenant_slug, a.tenant_name, a.cost_centre, a.billing_start,
               a.billing_end, currency=currency, provider=provider)
    row.update({
        "ChargePeriodStart": _time(a.billing_start), "ChargePeriodEnd": _time(a.billing_end),
        "ChargeCategory": "Adjustment", "ChargeClass": "Correction",
        "ChargeDescription": a.reason[:500], "ChargeFrequency": "One-Time",
        "ServiceName": "GPU capacity",
        "Tags": json.dumps({"tenant": a.tenant_slug, "adjustment": a.adjustment_id,
                            **({"withdraws": a.withdraws} if a.withdraws else {})},
                           sort_keys=True),
    })
    return row
