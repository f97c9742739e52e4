"""Words of the fleet that every app shares, as pure values: the routes, a MIG slice's share
of a device and Kubernetes quantities. Decided here once; manifests, queues, intake and
billing read them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache

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


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_gb: int

    @property
    def share(self) -> Decimal:
        """The share of one device this slice counts as (compute slices / 7)."""
        return Decimal(self.compute_slices) / Decimal(SLICES_PER_DEVICE)

    @property
    def is_fraction(self) -> bool:
        return self.compute_slices < SLICES_PER_DEVICE


def _profiles(*rows: tuple[str, int, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, c, m) for n, c, m in rows)


# MIG profiles by GPU memory size (the families NVIDIA publishes for 80 GB and 141 GB parts),
# once for the fleet: intake sizes requests by them, billing's stranded findings propose them.
MIG_PROFILES_BY_MEMORY: dict[int, tuple[MigProfile, ...]] = {
    80: _profiles(("1g.10gb", 1, 10), ("1g.20gb", 1, 20), ("2g.20gb", 2, 20),
                  ("3g.40gb", 3, 40), ("4g.40gb", 4, 40), ("7g.80gb", 7, 80)),
    141: _profiles(("1g.18gb", 1, 18), ("1g.35gb", 1, 35), ("2g.35gb", 2, 35),
                   ("3g.71gb", 3, 71), ("4g.71gb", 4, 71), ("7g.141gb", 7, 141)),
}
ALL_MIG_PROFILES: dict[str, MigProfile] = {
    p.name: p for family in MIG_PROFILES_BY_MEMORY.values() for p in family
}


def mig_profile(name: str) -> MigProfile | None:
    return ALL_MIG_PROFILES.get(name)


def smallest_profile_for_memory(memory_gb: int, *, gpu_memory_gb: int = 80,
                                offered: tuple[str, ...] = ()) -> MigProfile | None:
    """The smallest fractional MIG profile with at least `memory_gb`, or None if none fits."""
    family = MIG_PROFILES_BY_MEMORY.get(gpu_memory_gb, MIG_PROFILES_BY_MEMORY[80])
    candidates = [p for p in family if p.is_fraction and p.memory_gb >= memory_gb
                  and (not offered or p.name in offered)]
    candidates.sort(key=lambda p: (p.compute_slices, p.memory_gb))
    return candidates[0] if candidates else None


def mig_device_equivalents(profile: str, count: int,
                           weights: Mapping[str, Decimal | str] | None = None) -> Decimal:
    """`count` slices of `profile` as device-equivalents, to the places allocations store."""
    return (mig_share(profile, weights) * count).quantize(DEVICE_PLACES, rounding=ROUND_HALF_UP)


def in_devices(amount, profile: str, weights: Mapping[str, Decimal | str] | None = None
               ) -> Decimal:
    """An amount in a queue's own unit (whole devices, or slices of its MIG profile) as
    device-equivalents: what billing charges for borrowing and the queue page prices."""
    return Decimal(amount) * mig_share(profile, weights)


def size_unit(route: str, mig_profile: str, n: int = 2) -> str:
    """An allocation's own unit, for `n` of it: "devices", "3g.40gb slice" (the resize, its
    form and its messages all say it so)."""
    plural = "" if n == 1 else "s"
    if route == Route.MIG_VCLUSTER:
        return f"{mig_profile} slice{plural}"
    return f"device{plural}"


class FleetError(DomainError, ValueError):
    """A refusal of the fleet (a ValueError too, for callers that catch it so)."""


# -- numbers as people read them: one rule per kind, for templates and code alike ---------

TWO_PLACES, ONE_PLACE = Decimal("0.01"), Decimal("0.1")


def devices_text(value) -> str:
    """A device count: whole numbers bare ("8"), fractions to two places, half up ("0.14");
    "—" if not a number."""
    try:
        q = Decimal(value).quantize(TWO_PLACES, rounding=ROUND_HALF_UP)
    except (InvalidOperation, TypeError, ValueError):
        return "—"
    return f"{q.normalize():f}"


def percent_of(part, whole) -> Decimal | None:
    """`part` of `whole` in percent, to one place, half up; None when there is no whole."""
    try:
        part, whole = Decimal(part), Decimal(whole)
    except (InvalidOperation, TypeError, ValueError):
        return None
    if whole <= 0:
        return None
    return (part / whole * 100).quantize(ONE_PLACE, rounding=ROUND_HALF_UP)


def largest_job(shares: dict[str, int]) -> int:
    """The most devices one job of a dispatched allocation may ask for and still run: a job
    runs on one worker, within that worker's share."""
    return max((int(v) for v in shares.values()), default=0)


_SUFFIXES = {"m": Decimal("0.001"), "k": Decimal(1000), "Ki": Decimal(1024),
             "M": Decimal(10**6), "Mi": Decimal(2**20), "G": Decimal(10**9),
             "Gi": Decimal(2**30), "T": Decimal(10**12), "Ti": Decimal(2**40),
             "P": Decimal(10**15), "Pi": Decimal(2**50), "E": Decimal(10**18),
             "Ei": Decimal(2**60)}
_LONGEST_FIRST = sorted(_SUFFIXES, key=len, reverse=True)
# Kubernetes' quantity grammar: a signed decimal, then a suffix or a decimal exponent.
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)("
                       + "|".join(_LONGEST_FIRST) + r"|[eE][+-]?[0-9]+)?$")


def quantity(value) -> Decimal:
    """A Kubernetes quantity as a number, 0 for what is none (devices are plain integers;
    CPU and memory suffixes are read too)."""
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return Decimal(0)
    parsed = parse_quantity(str(value).strip())
    return Decimal(0) if parsed is None else parsed


@lru_cache(maxsize=4096)  # a list of 5,000 Workloads repeats a handful of quantities
def parse_quantity(text: str) -> Decimal | None:
    """A quantity's value ("1Ti" and "1024Gi" alike), or None for text that is not one."""
    if not _QUANTITY.match(text):
        return None
    for suffix in _LONGEST_FIRST:
        if text.endswith(suffix):
            text, factor = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        factor = Decimal(1)
    try:
        number = Decimal(text) * factor
    except (ArithmeticError, ValueError):
        return None
    return number if number.is_finite() else None
