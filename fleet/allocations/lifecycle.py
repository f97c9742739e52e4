"""The allocation's lifecycle, once: its statuses, which moves between them are allowed, and
the named sets every caller (services, tasks, selectors, templates, the API) asks about.

Pure: no ORM, no clock. `fleet.allocations.transitions.allocation_transition` refuses any
move this table does not list, so no caller can write a status some other way.
"""

from __future__ import annotations

from django.db import models


class AllocationStatus(models.TextChoices):
    PENDING = "pending", "Approved, not yet provisioned"
    PROVISIONING = "provisioning", "Provisioning"
    ACTIVE = "active", "Active"
    EXPIRING = "expiring", "Expiring"
    RETIRED = "retired", "Retired"
    FAILED = "failed", "Failed (retriable)"


S = AllocationStatus

# from → the statuses it may move to
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.PROVISIONING, S.RETIRED, S.FAILED}),
    S.PROVISIONING: frozenset({S.ACTIVE, S.FAILED, S.RETIRED}),
    # In place (active → active, expiring → expiring): a renewal or a resize.
    S.ACTIVE: frozenset({S.EXPIRING, S.RETIRED, S.ACTIVE}),
    S.EXPIRING: frozenset({S.ACTIVE, S.RETIRED, S.EXPIRING}),  # back to active: renewed
    S.FAILED: frozenset({S.PENDING, S.PROVISIONING, S.RETIRED}),
    S.RETIRED: frozenset(),
}

# Holds capacity in its pool (a failed allocation keeps its place until retired or retried).
HOLDING = frozenset({S.PENDING, S.PROVISIONING, S.ACTIVE, S.EXPIRING, S.FAILED})
# Its namespace, quota and queue are there to use.
USABLE = frozenset({S.ACTIVE, S.EXPIRING})
# May be given a later end.
RENEWABLE = USABLE
# May change size in place (fleet.allocations.resizing).
RESIZABLE = USABLE
# Provisioned, so its objects are reconciled against drift.
RECONCILED = USABLE
# Its queue is followed (Kueue's Workloads read back).
FOLLOWED = frozenset({S.PROVISIONING, S.ACTIVE, S.EXPIRING})
# Its hours are billed (validated time between start and end).
BILLED = frozenset({S.ACTIVE, S.EXPIRING, S.RETIRED})
# Provisioning has nothing more to do.
PROVISIONED = frozenset({S.ACTIVE, S.EXPIRING, S.RETIRED})
# Approved and on its way: pages poll for progress.
IN_PROGRESS = frozenset({S.PENDING, S.PROVISIONING})
# Provisioning may (re)start from here.
STARTABLE = frozenset({S.PENDING, S.FAILED})
# Its end has come: retire it (everything that is not retired yet).
RETIRABLE = frozenset({S.PENDING, S.PROVISIONING, S.ACTIVE, S.EXPIRING, S.FAILED})


def can_move(old: str, new: str) -> bool:
    return new in TRANSITIONS.get(old, frozenset())


def sources_of(new: str) -> tuple[str, ...]:
    """Every status from which `new` can be reached (for conditional updates)."""
    return tuple(sorted(old for old, targets in TRANSITIONS.items() if new in targets))


# The request's lifecycle continues past approval by following its allocation.
REQUEST_STATUS_OF = {S.PENDING: "approved", S.PROVISIONING: "provisioning",
                     S.ACTIVE: "active", S.EXPIRING: "expiring", S.RETIRED: "retired",
                     S.FAILED: "failed"}
