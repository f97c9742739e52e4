"""An allocation-hour split over the clusters it ran in (a MultiKueue-dispatched allocation:
its quota is held in shares on the workers). Pure: the rollup writes what this decides.

The quota's device-seconds and the hour's amount follow the shares (what each worker held
for the tenant); the used device-seconds are what each cluster's DCGM series measured. Every
part is rounded to the columns' 4 places by largest remainder, so the parts add up to the
hour exactly: the sum over clusters is the statement."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal

PLACES = Decimal("0.0001")


@dataclass(frozen=True)
class ClusterPart:
    cluster: str  # the cluster's slug (as the registry and the shares name it)
    allocated_s: Decimal
    used_s: Decimal | None  # None: use was not measured per cluster
    amount: Decimal


def split_exactly(total: Decimal, weights: dict[str, int | Decimal], places: Decimal = PLACES
                  ) -> dict[str, Decimal]:
    """`total` over the keys in proportion to `weights`, in `places`, adding up to `total`
    (the remainder's smallest units to the largest fractions, ties by name)."""
    names = sorted(weights)
    whole = sum(weights.values())
    if not names or whole <= 0:
        return {}
    exact = {n: total * weights[n] / whole for n in names}
    floored = {n: exact[n].quantize(places, rounding=ROUND_DOWN) for n in names}
    left = int(((total - sum(floored.values())) / places).to_integral_value())
    by_fraction = sorted(names, key=lambda n: (-(exact[n] - floored[n]), n))
    for n in by_fraction[:max(0, left)]:
        floored[n] += places
    return floored


def cluster_parts(*, allocated_s: Decimal, used_s: Decimal | None, amount: Decimal,
                  shares: dict[str, int], measured: dict[str, Decimal] | None
                  ) -> list[ClusterPart]:
    """The hour's parts per cluster: every cluster holding a share, and any other cluster
    use was measured in (a share moved away mid-hour: its use is still counted there). The
    hour's billed use (`used_s`, which billing may have capped) is split in proportion to
    what each cluster measured; without a per-cluster measurement it is not split."""
    held = split_exactly(allocated_s, shares)
    charged = split_exactly(amount, shares)
    per_cluster = measured is not None and used_s is not None
    used = split_exactly(used_s, {n: v for n, v in measured.items() if v > 0}
                         ) if per_cluster else {}
    names = sorted(set(held) | set(used))
    return [ClusterPart(cluster=n, allocated_s=held.get(n, Decimal(0)),
                        used_s=used.get(n, Decimal(0)) if per_cluster else None,
                        amount=charged.get(n, Decimal(0))) for n in names]
