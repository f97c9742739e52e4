import logging

from celery import shared_task
from django.utils import timezone

from fleet.prometheus import PrometheusError

from .budgets import check_budgets
from .services import rollup_recent
from .stranded_reading import detect
from .stranded_services import findings_record, grace_apply

log = logging.getLogger(__name__)


@shared_task(name="billing.tasks.rollup_recent_usage")
def rollup_recent_usage() -> str:
    """Hourly usage rollup (beat): the last hours plus any hour still pending."""
    summary = rollup_recent().summary()
    alerts = check_budgets(timezone.now())  # spend changed: thresholds may be crossed
    return summary + (f"; {len(alerts)} budget threshold(s) notified" if alerts else "")


@shared_task(name="billing.tasks.find_stranded_capacity")
def find_stranded_capacity() -> str:
    """Judge every usable hold against its DCGM series (beat, PORTAL_STRANDED_SECONDS) and
    record the findings: one open finding per allocation and kind, so a second run in the
    same hour refreshes instead of repeating. Prometheus away: nothing is judged. Then each
    tenant's grace policy is applied to what nobody answered in time."""
    now = timezone.now()
    try:
        findings, judged = detect(now)
    except PrometheusError as exc:
        log.warning("stranded capacity not judged: %s", exc)
        summary = f"not judged: {exc}"
    else:
        summary = findings_record(findings=findings, judged=judged, now=now).summary()
    return summary + f"; {grace_apply(now=now)} past their grace period"
