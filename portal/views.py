"""Project-level pages: the landing page/dashboard and the health check."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from intake.domain import Status
from intake.models import CapacityRequest
from intake.selectors import pool_facts
from tenants.access import roles_for, scope_to_tenants, visible_tenants
from tenants.models import Allocation, Pool, WorkerHeartbeat


def home(request):
    roles = roles_for(request.user)
    if not roles.authenticated:
        return render(request, "home.html", {})
    requests_qs = scope_to_tenants(request.user, CapacityRequest.objects.all())
    counts = dict(requests_qs.values_list("status").annotate(n=Count("id")))
    recent = requests_qs.select_related("tenant", "pool")[:6]
    pools = [(p, pool_facts(p)) for p in Pool.objects.filter(active=True)]
    # Allocations about to end: the notice a lead needs to renew in time.
    expiring = scope_to_tenants(request.user, Allocation.objects.filter(
        status=Allocation.Status.EXPIRING).select_related("tenant", "request"))
    return render(request, "dashboard.html", {
        "expiring": expiring,
        "counts": counts, "recent": recent, "pools": pools,
        "tenants": visible_tenants(request.user),
        "queue": counts.get(Status.SUBMITTED.value, 0) if roles.platform_admin else None,
    })


def _check_broker() -> tuple[bool, str]:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return True, "eager (tasks run in the web process; no broker)"
    from portal.celery import app

    try:
        with app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True, "reachable"
    except Exception as exc:  # any transport error means the broker is not usable
        return False, f"unreachable: {exc.__class__.__name__}: {exc}"


@never_cache
def healthz(request):
    """Database and broker reachability, and when a worker last reported in."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        db_ok, db_detail = True, connection.vendor
    except Exception as exc:  # report, never raise: this page is for probes
        db_ok, db_detail = False, f"{exc.__class__.__name__}: {exc}"
    broker_ok, broker_detail = _check_broker()
    last = None
    if db_ok:
        beat = WorkerHeartbeat.objects.order_by("-at").first()
        if beat:
            last = {"hostname": beat.hostname,
                    "seconds_ago": int((timezone.now() - beat.at).total_seconds())}
    ok = db_ok and broker_ok
    return JsonResponse({
        "status": "ok" if ok else "unavailable",
        "database": {"ok": db_ok, "detail": db_detail},
        "broker": {"ok": broker_ok, "detail": broker_detail},
        "worker_last_seen": last,
    }, status=200 if ok else 503)
