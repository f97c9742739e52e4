"""What a reconcile round found in a cluster against the desired objects, and how it is said:
drift (changed or deleted outside the portal) or a change the portal made, carried out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Repair:
    """One cluster's (or several clusters', added up) findings of one round."""

    applied: int = 0
    missing: list[str] = field(default_factory=list)
    changed: list[tuple[str, str]] = field(default_factory=list)  # (object, paths)
    removed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def on(self, cluster: str) -> Repair:
        """The same findings named with the cluster they were made in (a worker's)."""
        def there(key: str) -> str:
            return f"on {cluster}, {key}"
        return Repair(self.applied, [there(k) for k in self.missing],
                      [(there(k), p) for k, p in self.changed],
                      [there(k) for k in self.removed], [there(n) for n in self.released])

    def __add__(self, other: Repair) -> Repair:
        return Repair(self.applied + other.applied, self.missing + other.missing,
                      self.changed + other.changed, self.removed + other.removed,
                      self.released + other.released)

    @property
    def found(self) -> list[str]:
        """What differed from the desired state, one phrase per object (drift's words)."""
        return ([f"{key} was deleted" for key in self.missing]
                + [f"{key} changed at {paths}" for key, paths in self.changed]
                + [f"{key} is no longer part of it and was removed" for key in self.removed]
                + [f"node {name} is no longer reserved and was released"
                   for name in self.released])

    def brought_in_line(self, cause: str) -> str:
        """The one sentence of a change the portal made, carried out: every object applied
        again, which of them it altered, and what it removed or released. Objects that are
        re-applied are never called deleted."""
        parts = [f"re-applied all {self.applied} object(s)"]
        if self.changed:
            parts.append("updated " + "; ".join(f"{key} (at {paths})"
                                                for key, paths in self.changed))
        if self.missing:
            parts.append(f"made again {len(self.missing)} found missing "
                         f"({', '.join(self.missing)})")
        if self.removed:
            parts.append(f"removed {', '.join(self.removed)} (no longer part of it)")
        if self.released:
            parts.append(f"released node(s) {', '.join(self.released)}")
        return f"Cluster brought in line after {cause}: " + "; ".join(parts) + "."

    @property
    def data(self) -> dict:
        return {"applied": self.applied, "missing": self.missing,
                "changed": [key for key, _ in self.changed], "removed": self.removed,
                "released": self.released}
