"""Intake's scheduled work."""

from celery import shared_task

from . import trace


@shared_task(name="intake.tasks.export_allocation_traces", ignore_result=True)
def export_allocation_traces() -> int:
    """Send the traces that became due (an allocation's first workload is running)."""
    return trace.export_due_traces()
