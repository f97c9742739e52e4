"""The request follows its allocation through provisioning, without tenants importing us."""

from django.dispatch import receiver

from fleet.allocations.lifecycle import REQUEST_STATUS_OF
from fleet.signals import allocation_status_changed
from tenants.notifications import Kind, notify, tenant_leads

from .models import CapacityRequest

MIRRORED = REQUEST_STATUS_OF  # the lifecycle's one map: allocation status → request status


@receiver(allocation_status_changed)
def follow_allocation(sender, allocation_id: int, old: str, new: str, **kwargs) -> None:
    status = MIRRORED.get(new)
    if status:
        CapacityRequest.objects.filter(allocation_id=allocation_id).update(status=status)


NOTICES = {
    "active": (Kind.PROVISIONING_DONE, "{ns} is ready",
               "Its namespace, quota and queue are in place: the request page says how to "
               "connect and run a first job."),
    "failed": (Kind.PROVISIONING_FAILED, "Provisioning {ns} failed",
               "Nothing is lost: the request page shows the error, and an admin can retry."),
    "expiring": (Kind.ALLOCATION_EXPIRING, "{ns} expires soon",
                 "Renew it from the request page before it ends, or its objects are removed."),
}


@receiver(allocation_status_changed)
def tell_leads(sender, allocation_id: int, old: str, new: str, reason: str = "",
               **kwargs) -> None:
    """The tenant's leads (and whoever filed it) hear when capacity is ready, failed, or
    about to end."""
    if new not in NOTICES:
        return
    request = (CapacityRequest.objects.filter(allocation_id=allocation_id)
               .select_related("tenant", "requester", "allocation").first())
    if request is None:
        return
    kind, subject, next_step = NOTICES[new]
    ns = request.allocation.namespace
    notify([request.requester, *tenant_leads(request.tenant)], kind, subject.format(ns=ns),
           f"{request.tenant.name}, request #{request.pk} ({request.title}): {reason}\n\n"
           f"{next_step}", link=f"/requests/{request.pk}/",
           # "Expires soon" is moot once it has ended (a mail outage must not send it after).
           moot_at=request.allocation.ends_at if new == "expiring" else None)
