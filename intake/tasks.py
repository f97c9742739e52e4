"""Intake's scheduled work."""

from celery import shared_task

from . import trace
from .tally import compact_request_tally as compact


@shared_task(name="intake.tasks.export_allocation_traces", ignore_result=True)
def export_allocation_traces() -> int:
    """Send the traces that became due (an allocation's first workload is running)."""
    return trace.export_due_traces()


@shared_task(name="intake.tasks.compact_request_tally", ignore_result=True)
def compact_request_tally() -> int:
    """Keep the request tally at about one row per tenant and status."""
    return compact()
