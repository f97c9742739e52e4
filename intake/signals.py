"""The request follows its allocation through provisioning, without tenants importing us."""

from django.dispatch import receiver

from fleet.signals import allocation_status_changed

from .models import CapacityRequest

# Allocation status → request status (the request's lifecycle continues past approval).
MIRRORED = {"provisioning": "provisioning", "active": "active", "expiring": "expiring",
            "retired": "retired", "failed": "failed", "pending": "approved"}


@receiver(allocation_status_changed)
def follow_allocation(sender, allocation_id: int, old: str, new: str, **kwargs) -> None:
    status = MIRRORED.get(new)
    if status:
        CapacityRequest.objects.filter(allocation_id=allocation_id).update(status=status)
