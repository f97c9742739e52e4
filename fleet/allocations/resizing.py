"""A resize of an allocation in use: whether it may go to a new size, and what that size
holds. Pure: plain facts in, a plan out (no ORM, no clock), so every rule is tested over
generated holds (`tests/unit/test_resizing.py`); `fleet.allocations.resize` reads the facts
under the pool's lock and writes the plan.

The size is counted in the allocation's own unit: whole devices (a shared or confidential
pool's quota; a dedicated block's devices, whole nodes of them), or slices of its MIG
profile. A profile change is a new request (the finding's "convert"), not a resize.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from ..domain import DEVICE_PLACES, Route, devices_text, mig_device_equivalents, size_unit
from . import lifecycle

MAX_SIZE = 10_000  # far above any pool; a typo such as 80000 is refused, not priced


@dataclass(frozen=True)
class Held:
    """The allocation as it stands."""

    route: Route
    status: str
    whole_devices: int
    mig_profile: str
    mig_count: int
    device_equivalents: Decimal
    nodes: tuple[str, ...] = ()  # a dedicated block's reserved nodes, in the order kept
    devices_per_node: int = 0  # a dedicated block's node size
    ended: bool = False  # its end has passed (released, retirement not run yet)

    @property
    def size(self) -> int:
        return self.mig_count if self.route == Route.MIG_VCLUSTER else self.whole_devices


@dataclass(frozen=True)
class ResizeFacts:
    """What the pool and the allocation's queue say now (read under the pool's lock)."""

    in_use: Decimal  # admitted to its queue now, in its unit (borrowed included)
    running: tuple[str, ...]  # the workloads holding it
    free_devices: Decimal  # the pool's promisable free device-equivalents
    free_slices: int | None = None  # free slices of its profile (MIG); None: not reported
    free_nodes: tuple[str, ...] = ()  # free validated nodes, in the order a block gets them
    mig_weights: Mapping[str, Decimal | str] | None = None
    # When Kueue's answer about its queue was last read; None: never. A shrink needs a
    # current read (queue_is_current), else what runs is not known.
    queue_read_at: dt.datetime | None = None
    now: dt.datetime | None = None
    read_every_seconds: int = 0  # 0: nothing reads a cluster here (a dry run): not asked
    # A dispatched allocation: what runs on each worker now, and each worker's share of a
    # new size (fleet.allocations.dispatch.split_shares), by worker slug.
    worker_use: Mapping[str, Decimal] = field(default_factory=dict)
    worker_names: Mapping[str, str] = field(default_factory=dict)
    shares_after: Callable[[int], Mapping[str, int]] | None = None


MISSED_READS = 3  # queue reads missed in a row before what runs counts as unknown


def queue_is_current(read_at: dt.datetime | None, now: dt.datetime | None,
                     every_seconds: int) -> bool:
    if not every_seconds:
        return True
    return read_at is not None and now is not None and \
        (now - read_at).total_seconds() <= MISSED_READS * every_seconds + 5


@dataclass(frozen=True)
class ResizePlan:
    ok: bool
    reason: str
    size: int = 0
    whole_devices: int = 0
    mig_count: int = 0
    device_equivalents: Decimal = Decimal(0)
    add_nodes: tuple[str, ...] = ()
    release_nodes: tuple[str, ...] = ()

    @property
    def data(self) -> dict:
        return {"size": self.size, "whole_devices": self.whole_devices,
                "mig_count": self.mig_count,
                "device_equivalents": str(self.device_equivalents),
                "add_nodes": list(self.add_nodes), "release_nodes": list(self.release_nodes)}


def size_words(held: Held, size: int) -> str:
    """'4 devices', '2 × 3g.40gb slices'."""
    times = " ×" if held.route == Route.MIG_VCLUSTER else ""
    return f"{size}{times} {size_unit(held.route, held.mig_profile, size)}"


def _refused(reason: str) -> ResizePlan:
    return ResizePlan(False, reason)


def resize_plan(held: Held, size, facts: ResizeFacts, *, may_grow: bool) -> ResizePlan:
    """The new size's plan, or a refusal that says why. A shrink never takes what its running
    work holds; a grow is a new promise (a platform admin's, from the pool's free capacity,
    as an approval is)."""
    if held.status not in lifecycle.RESIZABLE:
        return _refused(f"Only an active or expiring allocation is resized; this one is "
                        f"{lifecycle.AllocationStatus(held.status).label.lower()}.")
    if held.ended:
        return _refused("Its end has passed (it is being retired): there is nothing to "
                        "resize.")
    if isinstance(size, bool) or not isinstance(size, int):
        return _refused("The new size is a whole number.")
    unit = "slices" if held.route == Route.MIG_VCLUSTER else "devices"
    if size < 1:
        return _refused(f"The new size is at least 1 ({unit}); to give everything back, "
                        "release the allocation.")
    if size > MAX_SIZE:
        return _refused(f"{size} {unit} is more than any pool holds.")
    if size == held.size:
        return _refused(f"It holds {size_words(held, size)} already.")
    per_node = max(1, held.devices_per_node)
    dedicated = held.route == Route.DEDICATED_BLOCK
    if dedicated and size % per_node:
        near = sorted({max(per_node, size // per_node * per_node),
                       (size // per_node + 1) * per_node} - {held.size})
        return _refused(f"A dedicated block is whole nodes of {per_node} devices: "
                        f"{' or '.join(str(n) for n in near)} devices, not {size}.")
    mig = held.route == Route.MIG_VCLUSTER
    after = (mig_device_equivalents(held.mig_profile, size, facts.mig_weights) if mig
             else Decimal(size).quantize(DEVICE_PLACES))
    plan = dict(size=size, whole_devices=0 if mig else size, mig_count=size if mig else 0,
                device_equivalents=after)
    words = f"{size_words(held, held.size)} → {size_words(held, size)}"
    if size > held.size:
        return _grow(held, size, facts, may_grow=may_grow, words=words, plan=plan)
    if not queue_is_current(facts.queue_read_at, facts.now, facts.read_every_seconds):
        return _refused(f"{words} must leave running work its devices, and Kueue's answer "
                        "about its queue has not been read lately, so what runs is not "
                        "known. Try again once the queue page shows a current read.")
    if facts.in_use > size:
        jobs = ", ".join(facts.running[:5]) + (" …" if len(facts.running) > 5 else "")
        admitted = f"{_amount(held, facts.in_use)} are admitted now ({jobs})"
        if facts.in_use >= held.size:  # all it holds, and perhaps borrowed devices too
            borrowed = facts.in_use - held.size
            return _refused(f"{words} would take what running work holds: {admitted}"
                            + (f", {_amount(held, borrowed)} of them borrowed from the "
                               "cohort" if borrowed else "") +
                            ". Every device it holds is in use: shrink it when some of that "
                            "work has finished.")
        return _refused(f"{words} would take what running work holds: {admitted}. "
                        f"Shrink to at least {_amount(held, facts.in_use)}, or wait until "
                        "they finish.")
    if dedicated and facts.in_use > 0:
        # The portal cannot tell which node a pod runs on; a node leaving the block while
        # the tenant's pods run on it would be shared with others under them.
        return _refused(f"{words} releases whole nodes, and a job of yours may run on any "
                        f"of them: {_amount(held, facts.in_use)} are admitted now. Shrink "
                        "the block when its queue is empty.")
    if facts.shares_after is not None and facts.worker_use:
        shares = facts.shares_after(size)
        short = [(w, use, shares.get(w, 0)) for w, use in sorted(facts.worker_use.items())
                 if use > shares.get(w, 0)]
        if short:
            w, use, share = short[0]
            return _refused(f"{words} would give {facts.worker_names.get(w, w)} a share of "
                            f"{_amount(held, share)}, while {_amount(held, use)} run there "
                            "now. Shrink it when that work has finished.")
    keep = size // per_node if dedicated else 0
    return ResizePlan(True, f"Resized {words}: {devices_text(held.device_equivalents - after)}"
                      " device(s) given back to the pool; billing follows from now.", **plan,
                      release_nodes=held.nodes[keep:] if dedicated else ())


def _grow(held: Held, size: int, facts: ResizeFacts, *, may_grow: bool, words: str,
          plan: dict) -> ResizePlan:
    if not may_grow:
        return _refused(f"{words} is more capacity, which only a platform admin can "
                        "promise: ask one, or file a request for more.")
    extra = plan["device_equivalents"] - held.device_equivalents
    if extra > facts.free_devices:
        return _refused(f"{words} needs {devices_text(extra)} more device(s); the pool has "
                        f"{devices_text(facts.free_devices)} free to promise.")
    if held.route == Route.MIG_VCLUSTER and facts.free_slices is not None \
            and size - held.size > facts.free_slices:
        return _refused(f"{words} needs {size - held.size} more {held.mig_profile} "
                        f"slice(s); the pool has {facts.free_slices} free.")
    add: tuple[str, ...] = ()
    if held.route == Route.DEDICATED_BLOCK:
        more = (size - held.size) // max(1, held.devices_per_node)
        if more > len(facts.free_nodes):
            return _refused(f"{words} needs {more} more whole node(s); the pool has "
                            f"{len(facts.free_nodes)} free validated node(s).")
        add = facts.free_nodes[:more]
    return ResizePlan(True, f"Resized {words}: {devices_text(extra)} more device(s) "
                      "promised from the pool; billing follows from now." +
                      # Tenants read this: the count of nodes, never their names.
                      (f" {len(add)} more whole validated node(s) reserved." if add else ""),
                      **plan, add_nodes=add)


def _amount(held: Held, amount: Decimal) -> str:
    n = int(amount) if amount == int(amount) else amount
    return size_words(held, n) if isinstance(n, int) else f"{amount} {held.mig_profile} slices"
