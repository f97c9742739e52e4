"""Stranded capacity's thresholds: when a device counts as idle, for how long, how much room
a right-size keeps, and a pool's own values. Plain Python only (no Django), so the settings
read and check `PORTAL_STRANDED_POOL_THRESHOLDS` at start with the same rule the detectors
use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal


@dataclass(frozen=True)
class Thresholds:
    """When a device counts as idle, for how long, and how much room a right-size keeps."""

    window: dt.timedelta = dt.timedelta(hours=24)  # idle hold and oversized look this far back
    idle_activity: float = 0.05  # a device whose activity never reached this is idle
    stall_window: dt.timedelta = dt.timedelta(minutes=30)  # stalled run; quota's pending wait
    stall_activity: float = 0.02  # a running workload's devices never above this: stalled
    headroom: Decimal = Decimal("0.25")  # a right-size keeps this much above the measured peak

    def as_evidence(self) -> dict:
        return {"window_hours": self.window.total_seconds() / 3600,
                "idle_activity": self.idle_activity,
                "stall_minutes": self.stall_window.total_seconds() / 60,
                "stall_activity": self.stall_activity, "headroom": str(self.headroom)}


POOL_KEYS = ("window_hours", "idle_percent", "stall_minutes", "stall_percent",
             "headroom_percent")


def _percent(value: str, key: str) -> float:
    number = float(value)
    if not 0 <= number <= 100:
        raise ValueError(f"{key}={value}: a percentage from 0 to 100")
    return number / 100


def with_overrides(base: Thresholds, overrides: Mapping[str, str]) -> Thresholds:
    """`base` with a pool's own values (PORTAL_STRANDED_POOL_THRESHOLDS); ValueError names
    the key that is wrong."""
    changes: dict = {}
    for key, value in overrides.items():
        try:
            if key == "window_hours":
                hours = int(value)
                if hours < 1:
                    raise ValueError
                changes["window"] = dt.timedelta(hours=hours)
            elif key == "stall_minutes":
                minutes = int(value)
                if minutes < 1:
                    raise ValueError
                changes["stall_window"] = dt.timedelta(minutes=minutes)
            elif key == "idle_percent":
                changes["idle_activity"] = _percent(value, key)
            elif key == "stall_percent":
                changes["stall_activity"] = _percent(value, key)
            elif key == "headroom_percent":
                _percent(value, key)
                changes["headroom"] = Decimal(value) / 100
            else:
                raise KeyError(key)
        except KeyError:
            raise ValueError(f"{key}: not a threshold (one of {', '.join(POOL_KEYS)})") from None
        except (ValueError, ArithmeticError):
            raise ValueError(f"{key}={value!r} is not a valid value") from None
    return replace(base, **changes)


def parse_pool_thresholds(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """`pool-slug.key=value` items → {pool: {key: value}}; ValueError on a malformed item."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        pool, dot, key = name.strip().rpartition(".")
        if not (sep and dot and pool and key.strip() in POOL_KEYS and value.strip()):
            raise ValueError(f"{item!r}: write pool-slug.key=value, key one of "
                             f"{', '.join(POOL_KEYS)}")
        out.setdefault(pool, {})[key.strip()] = value.strip()
    for pool, keys in out.items():  # a bad value is refused at start, not at detection
        try:
            with_overrides(Thresholds(), keys)
        except ValueError as exc:
            raise ValueError(f"{pool}: {exc}") from None
    return out


def thresholds_for(pool: str, base: Thresholds, per_pool: Mapping[str, Mapping[str, str]]
                   ) -> Thresholds:
    return with_overrides(base, per_pool.get(pool, {}))
