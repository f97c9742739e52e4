"""Words of the fleet that every app shares, as pure values: the routes and a MIG slice's
share of a device. Decided here once; manifests, intake and billing read them."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import TextChoices

from tenants.errors import DomainError


class Route(TextChoices):
    """The four cells of the intake matrix; each pool serves exactly one."""

    DEDICATED_BLOCK = "dedicated_block", "Dedicated block"
    CONFIDENTIAL_POOL = "confidential_pool", "Confidential pool"
    MIG_VCLUSTER = "mig_vcluster", "MIG under vCluster"
    SHARED_POOL = "shared_pool", "Shared pool"


SLICES_PER_DEVICE = 7  # compute slices of a MIG-capable GPU
DEVICE_PLACES = Decimal("0.0001")  # device-equivalents are stored to 4 places


def mig_share(profile: str, weights: Mapping[str, Decimal | str] | None = None) -> Decimal:
    """The share of one device a MIG instance of `profile` counts as: its compute slices / 7,
    unless the platform set a weight for it (PORTAL_MIG_WEIGHTS). Allocated and used
    device-hours both come from here, so utilisation compares like with like."""
    if not profile:
        return Decimal(1)
    if weights and profile in weights:
        return Decimal(weights[profile])
    try:
        slices = int(profile.split("g.", 1)[0])
    except ValueError:
        return Decimal(1)
    return Decimal(slices) / SLICES_PER_DEVICE


def mig_device_equivalents(profile: str, count: int,
                           weights: Mapping[str, Decimal | str] | None = None) -> Decimal:
    """`count` slices of `profile` as device-equivalents, to the places allocations store."""
    return (mig_share(profile, weights) * count).quantize(DEVICE_PLACES, rounding=ROUND_HALF_UP)


class FleetError(DomainError, ValueError):
    """A refusal of the fleet (a ValueError too, for callers that catch it so)."""
