from celery import shared_task
from django.utils import timezone

from .budgets import check_budgets
from .services import rollup_recent


@shared_task(name="billing.tasks.rollup_recent_usage")
def rollup_recent_usage() -> str:
    """Hourly usage rollup (beat): the last hours plus any hour still pending."""
    summary = rollup_recent().summary()
    alerts = check_budgets(timezone.now())  # spend changed: thresholds may be crossed
    return summary + (f"; {len(alerts)} budget threshold(s) notified" if alerts else "")
