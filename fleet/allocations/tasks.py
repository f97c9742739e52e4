"""Background work of allocations: provisioning, expiry, reconcile, GitOps follow-up. Tasks
take ids and are safe to run twice."""

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from tenants.audit import audit_record

from ..inventory.connections import backend_of, live_clusters
from ..kube import DryRunBackend, KubeError
from ..models import Allocation
from .git_sink import gitops_mode, gitops_progress
from .lifecycle import RECONCILED
from .provisioning import allocation_provision
from .reconcile import allocation_reconcile, prune_leftovers
from .retirement import allocation_mark_expiring, allocation_retire, allocations_due
from .selectors import stalled_provisioning
from .transitions import allocation_fail

UNEXPECTED_ERROR_RETRIES = 2
log = logging.getLogger(__name__)


# max_retries=None: the task counts retries itself (PORTAL_PROVISION_MAX_RETRIES) and then
# fails the allocation with the message, rather than letting Celery raise.
@shared_task(bind=True, name="fleet.tasks.provision_allocation", acks_late=True,
             max_retries=None)
def provision_allocation(self, allocation_id: int, resume: dict | None = None) -> str:
    """Apply an allocation's objects; retry transient errors with back-off, fail on the rest.

    While the API server compiles the allocation's guards the task does not sleep: it queues
    itself again with `resume` (where it stopped) and a countdown of 50–250 ms, so the worker
    process provisions other allocations meanwhile. Run eagerly it waits in place."""
    def defer(pending) -> None:
        # The count of retries goes along: a resumed run that fails retries as the next of
        # this allocation's attempts, so PORTAL_PROVISION_MAX_RETRIES still ends them.
        provision_allocation.apply_async((allocation_id,), {"resume": pending.as_task_kwargs()},
                                         countdown=pending.pause(),
                                         retries=self.request.retries,
                                         queue=settings.PROVISIONING_RESUME_QUEUE)

    try:
        return allocation_provision(allocation_id, resume=resume,
                                    defer=None if self.request.is_eager else defer).status
    except Exception as exc:
        retries = settings.PORTAL_PROVISION_MAX_RETRIES
        if not isinstance(exc, KubeError):
            # Not the cluster's answer but our own failure (a library error, the database
            # away): retried a couple of times, then the allocation fails with the message
            # instead of hanging in "provisioning" until the stall check.
            retries = min(retries, UNEXPECTED_ERROR_RETRIES)
            exc = KubeError(f"Unexpected error while provisioning: "
                            f"{exc.__class__.__name__}: {exc}", retriable=True)
        if exc.retriable and self.request.retries < retries:
            Allocation.objects.filter(pk=allocation_id).update(
                status_message=f"Retrying after a transient error: {exc.message}")
            delay = min(300, settings.PORTAL_PROVISION_RETRY_SECONDS * 2 ** self.request.retries)
            # A retry starts over (from the first wave), never from an old `resume`.
            raise self.retry(args=(allocation_id,), kwargs={}, exc=exc,
                             countdown=delay) from exc
        allocation_fail(allocation_id, exc.message if not exc.retriable else
                        f"Gave up after {self.request.retries} retries: {exc.message}")
        return "failed"


@shared_task(name="fleet.tasks.requeue_stalled")
def requeue_stalled() -> str:
    """Queue provisioning again where its task was lost (beat, every minute)."""
    stall = timezone.timedelta(seconds=settings.PORTAL_PROVISION_STALL_SECONDS)
    pks = stalled_provisioning(timezone.now(), stall)
    for alloc in Allocation.objects.filter(pk__in=pks).select_related("tenant"):
        audit_record(actor=None, subject=alloc, tenant=alloc.tenant,
                     action="allocation.requeued",
                     reason=f"Provisioning queued again: no progress for "
                            f"{settings.PORTAL_PROVISION_STALL_SECONDS} s "
                            f"(status {alloc.status}).")
        provision_allocation.delay(alloc.pk)
    return f"{len(pks)} stalled allocation(s) queued again"


@shared_task(name="fleet.tasks.expire_allocations")
def expire_allocations() -> str:
    notice = timezone.timedelta(days=settings.PORTAL_EXPIRY_NOTICE_DAYS)
    expiring, retire = allocations_due(timezone.now(), notice)
    for pk in expiring:
        allocation_mark_expiring(pk)
    for pk in retire:
        allocation_retire(pk)
    return f"{len(expiring)} expiring, {len(retire)} retired"


@shared_task(name="fleet.tasks.reconcile_allocations", autoretry_for=(KubeError,),
             retry_backoff=True, max_retries=3)
def reconcile_allocations() -> str:
    """Every cluster that answers: its allocations re-applied, its leftovers pruned. A dry
    run's record lives in one process: a fresh one would report every object "deleted" and
    write a drift repair into each allocation's trail, so dry-run clusters are left alone; a
    cluster that does not answer is retried next time while the others go on."""
    drifted, failed, removed, skipped = 0, [], [], []
    for cluster in live_clusters():
        try:
            backend = backend_of(cluster)
        except KubeError as exc:
            log.warning("reconcile of cluster %s: %s", cluster.slug, exc)
            skipped.append(f"{cluster.slug} (not reachable: {exc.message})")
            continue
        if isinstance(backend, DryRunBackend):
            skipped.append(f"{cluster.slug} (a dry run: no cluster to drift from)")
            continue
        d, f, r, problem = _reconcile_cluster(cluster, backend)
        drifted, failed, removed = drifted + d, failed + f, removed + r
        if problem:
            skipped.append(f"{cluster.slug}'s leftovers (not reachable: {problem})")
    return (f"{drifted} allocation(s) drifted, {len(removed)} leftover object(s) pruned"
            + (f", {len(failed)} not reconciled (tried again next time): {failed}"
               if failed else "")
            + (f"; reconcile skipped for {', '.join(skipped)}" if skipped else ""))


def _reconcile_cluster(cluster, backend) -> tuple[int, list[int], list, str]:
    drifted, failed = 0, []
    for pk in Allocation.objects.filter(status__in=RECONCILED, pool__cluster=cluster
                                        ).values_list("pk", flat=True):
        try:
            drifted += bool(allocation_reconcile(pk, backend=backend))
        except KubeError as exc:  # one allocation's trouble (its guards not in force yet,
            # a refused apply) does not hold up the others; the next pass tries it again
            log.warning("reconcile of allocation %s: %s", pk, exc)
            failed.append(pk)
    try:  # nothing in GitOps mode: its tool prunes what Git lost
        return drifted, failed, prune_leftovers(backend=backend), ""
    except KubeError as exc:  # its leftovers could not be listed: the next pass tries
        log.warning("pruning in cluster %s: %s", cluster.slug, exc)
        return drifted, failed, [], exc.message


@shared_task(name="fleet.tasks.follow_gitops", autoretry_for=(KubeError,), retry_backoff=True,
             max_retries=3)
def follow_gitops() -> str:
    """GitOps mode: committed allocations become active when the cluster has their objects."""
    if not gitops_mode():
        return "not in GitOps mode"
    ids = list(Allocation.objects.filter(status=Allocation.Status.PROVISIONING)
               .values_list("pk", flat=True))
    active = sum(gitops_progress(pk).status == Allocation.Status.ACTIVE for pk in ids)
    return f"{len(ids)} committed allocation(s) followed, {active} now active"
