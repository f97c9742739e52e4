"""The guard check as the portal before this one rendered it: every guarded allocation's
check entry in one GuardParams object, `aifactory-guard-checks`, each applied under a field
manager of the allocation's own (server-side apply then owns the map's keys one by one), and
the check's binding naming that object. What clusters provisioned by that portal hold: the
upgrade test starts from it, and the admission benchmark prints its cost per added block
beside the current shape's (one params object per allocation). Kept as it was; never used
by the portal itself."""

from __future__ import annotations

from fleet.allocations.admission import (
    LEGACY_CHECK_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
    guard_labels,
    params_entries,
)
from fleet.allocations.guard_check import UNSTAMPED, guard_check


def entries_manager(base: str, allocation_id: int) -> str:
    """The field manager that portal applied an allocation's key under."""
    return f"{base}-a{allocation_id}"


def one_object_check(fingerprint: str = UNSTAMPED) -> list[dict]:
    """That portal's check: the same policy, its binding naming the one params object."""
    policy, binding = guard_check(fingerprint)
    binding["spec"]["paramRef"] = {"name": LEGACY_CHECK_PARAMS,
                                   "parameterNotFoundAction": "Deny"}
    return [policy, binding]


def one_object_params(allocation_params: dict) -> dict:
    """An allocation's check entry as that portal applied it: into the one object."""
    return {"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
            "metadata": {"name": LEGACY_CHECK_PARAMS, "labels": guard_labels("params")},
            "spec": {"entries": params_entries(allocation_params)}}
