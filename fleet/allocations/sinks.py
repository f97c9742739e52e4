"""Where desired state goes: one interface, two sinks (apply to the cluster, or commit to
Git), chosen by PORTAL_PROVISIONING; provisioning, retirement and reconcile never ask which."""

from __future__ import annotations

from typing import Protocol

from django.conf import settings

from ..kube import KubeBackend
from ..models import Allocation, Cluster
from .apply import ApplySink
from .git_sink import GitSink
from .guards import Defer, GuardsPending
from .repair import Repair


class ProvisioningSink(Protocol):
    def publish(self, alloc: Allocation, manifests: list[dict],
                backend: KubeBackend, defer: Defer | None = None) -> Allocation:
        """Make the desired state real (or committed); the allocation as it stands after."""

    def resume(self, alloc: Allocation, manifests: list[dict], backend: KubeBackend,
               pending: GuardsPending, defer: Defer | None = None) -> Allocation:
        """Go on from where publish deferred."""

    def withdraw(self, alloc: Allocation, backend: KubeBackend) -> list:
        """Remove the allocation's objects (or its directory); what was removed."""

    def withdrawn_words(self, withdrawn: list) -> str: ...

    def repair(self, alloc: Allocation, manifests: list[dict],
               backend: KubeBackend, cause: str = "") -> list[str]:
        """Bring desired state back; what had drifted (or, with a cause, what the portal's
        own change altered), in words."""

    def prune_leftovers(self, backend: KubeBackend) -> list: ...

    # A dispatched allocation's part on one MultiKueue worker (fleet/allocations/multikueue):
    # the same three steps, in the worker's cluster (or its directory in Git).
    def publish_part(self, alloc: Allocation, cluster: Cluster, manifests: list[dict]
                     ) -> None: ...

    def withdraw_part(self, alloc: Allocation, cluster: Cluster) -> list: ...

    def repair_part(self, alloc: Allocation, cluster: Cluster, manifests: list[dict]
                    ) -> Repair:
        """What differed in that cluster, named with it (no database write)."""


SINKS: dict[str, ProvisioningSink] = {"apply": ApplySink(), "gitops": GitSink()}


def provisioning_sink() -> ProvisioningSink:
    return SINKS[settings.PORTAL_PROVISIONING]
