"""The guard protocol: an allocation's admission guards are in force once the API server
refuses the guard check's probe; until then neither its nodes nor anyone's access are
applied. Asked in place (with a deadline) or, in a worker, handed back between asks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from django.conf import settings

from ..kube import KubeBackend, KubeError
from .guard_check import guard_check_answer, refused_by_admission

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardsPending:
    """Where provisioning stopped while the API server compiles the allocation's guards:
    the probe to ask with, when the asking began (seconds since the epoch), how many objects
    were applied and how often it asked. Plain data, so a task can carry it."""

    probe: dict
    since: float
    done: int
    asked: int = 1
    other: str = ""  # another admission control's refusal of the probe, quoted if it lasts

    def as_task_kwargs(self) -> dict:
        return asdict(self)

    def pause(self) -> float:
        return min(0.05 * 2 ** (self.asked - 1), 0.25)


# Called instead of sleeping while the guards compile: it must arrange for
# allocation_provision(id, resume=pending) to run again (the task queues itself with a short
# countdown, so the worker process takes other work meanwhile). Without one, provisioning
# waits in place (the embedded run, tests, the reconcile loop).
Defer = Callable[[GuardsPending], None]


def ask_guards_once(backend: KubeBackend, probe: dict) -> tuple[bool, str]:
    """One dry-run of the guard check's probe: (whether the allocation's own check refused
    it, another admission control's refusal if one answered instead). An answer that is
    neither — RBAC, the server away — is raised as it came."""
    try:
        backend.apply(probe, dry_run=True)
    except KubeError as exc:
        answer = guard_check_answer(probe, exc.status, exc.message)
        if answer == "current":
            return True, ""
        if answer == "other" and not refused_by_admission(exc.status, exc.message):
            raise  # the portal may not ask (RBAC), or the server is away: as it came
        # "older": the check as it was before these guards is still in force. Another
        # admission control refusing the probe namespace (e.g. a policy requiring labels)
        # answers before the check is compiled, and may be quoted instead of it after:
        # not yet, and said if it lasts.
        return False, exc.message if answer == "other" else ""
    return False, ""


def _not_in_force(waited: float, other: str) -> KubeError:
    also = f"; another admission control refused it: {other}" if other else ""
    return KubeError(
        f"The allocation's admission guards were not in force {waited:.0f} s after they "
        f"were applied (the API server did not give the refusal only they give{also})",
        retriable=True)


def guards_in_force(backend: KubeBackend, probe: dict, *,
                    timeout: float | None = None) -> float | None:
    """Dry-run the guard check's probe until the API server refuses it: the seconds that
    took, or None for a backend that runs no admission (the dry-run record). Not refused in
    time is a retriable error: the task tries again, and nobody has access meanwhile."""
    if not backend.enforces_admission:
        return None
    timeout = settings.PORTAL_GUARD_WAIT_SECONDS if timeout is None else timeout
    start, pause, other = time.monotonic(), 0.05, ""
    while True:
        in_force, said = ask_guards_once(backend, probe)
        if in_force:
            return time.monotonic() - start
        other = said or other
        waited = time.monotonic() - start
        if waited >= timeout:
            raise _not_in_force(waited, other)
        time.sleep(min(pause, max(timeout - waited, 0.01)))
        pause = min(pause * 2, 0.25)


def ask_guards_deferring(backend: KubeBackend, pending: GuardsPending,
                          defer: Defer) -> float | None:
    """guards_in_force without sleeping: the seconds since the asking began once they are
    in force, else None after handing `defer` the next ask (a retriable error once
    PORTAL_GUARD_WAIT_SECONDS have passed)."""
    in_force, said = ask_guards_once(backend, pending.probe)
    limit = settings.PORTAL_GUARD_WAIT_SECONDS
    waited = max(time.time() - pending.since, 0.0)
    if in_force:
        return waited
    other = said or pending.other
    # Also bounded by the number of asks: `since` is another process's clock.
    if waited >= limit or pending.asked > limit / 0.05:
        raise _not_in_force(waited, other)
    try:
        defer(replace(pending, asked=pending.asked + 1, other=other))
    except Exception as exc:  # the broker away: wait here as before rather than fail
        log.warning("could not hand the guards' wait back (%s); waiting in place", exc)
        return waited + guards_in_force(backend, pending.probe,
                                        timeout=max(limit - waited, 0.0))
    return None
