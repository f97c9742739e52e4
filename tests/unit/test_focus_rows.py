"""A FOCUS row, built from plain values: a MIG slice's hours are a fraction of a GPU-hour in
the quantities, each charge is invoiced on its month's statement, and every row carries
FOCUS 1.2's service subcategory and SKU meter (the validator's run: tests/db)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from billing.focus import (
    FOCUS_COLUMNS,
    METER,
    METER_MIG,
    AdjustmentCharge,
    ChargeDay,
    focus_adjustment_row,
    focus_row,
)

DAY = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
MONTH = (dt.datetime(2026, 11, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 1, tzinfo=dt.UTC))


def _day(route: str, charged_s: Decimal, used_s: Decimal, rate: str = "1.60") -> ChargeDay:
    return ChargeDay(
        tenant_slug="globex", tenant_name="Globex", cost_centre="CC-7", allocation_id=4,
        namespace="globex-r4", route=route, route_label="MIG under vCluster",
        policy="allocated slice-hours", pool_slug="mig-a100", pool_name="MIG A100",
        gpu_model="A100", period_start=DAY, period_end=DAY + dt.timedelta(days=1),
        billing_start=MONTH[0], billing_end=MONTH[1], used_seconds=used_s,
        charged_seconds=charged_s, rate=Decimal(rate),
        amount=Decimal(rate) * charged_s / 3600)


def test_a_mig_slices_hours_are_its_fraction_of_a_gpu_hour():
    # two 3g.40gb slices (3/7 of a device each) held for a whole day, one used for 7 hours
    share = Decimal(3) / 7
    row = focus_row(_day("mig_vcluster", 2 * share * 24 * 3600, share * 7 * 3600),
                    currency="EUR", provider="AI Factory")
    assert row["PricingQuantity"] == "20.571429" and row["PricingUnit"] == "GPU-Hours"
    assert row["ConsumedQuantity"] == "3.000000" and row["ConsumedUnit"] == "GPU-Hours"
    assert row["ListCost"] == "32.91"  # 20.571429 GPU-hours × 1.60, to the cent
    assert row["SkuMeter"] == METER_MIG and row["SkuPriceDetails"] == ""


def test_every_row_is_on_its_months_statement_in_a_service_subcategory():
    usage = focus_row(_day("shared_pool", Decimal(7200), Decimal(3600)), currency="EUR",
                      provider="AI Factory")
    credit = focus_adjustment_row(AdjustmentCharge(
        tenant_slug="globex", tenant_name="Globex", cost_centre="CC-7", adjustment_id=9,
        billing_start=MONTH[0], billing_end=MONTH[1], amount=Decimal("-5"), reason="outage"),
        currency="EUR", provider="AI Factory")
    for row in (usage, credit):
        assert list(row) == [name for name, _ in FOCUS_COLUMNS]
        assert row["InvoiceId"] == "globex:2026-11"
        assert (row["ServiceCategory"], row["ServiceSubcategory"]) == (
            "AI and Machine Learning", "Machine Learning")
    assert usage["SkuMeter"] == METER
    assert credit["SkuId"] == credit["SkuMeter"] == ""  # no SKU, so no meter
