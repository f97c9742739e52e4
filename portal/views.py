"""The composition root's pages: the overview, the health check and /metrics."""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError, connection
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.defaults import page_not_found

from billing.figures import FIGURE_MODELS, metric_sums
from billing.stranded_board import given_back_devices, open_stranded_device_hours, standing_in
from fleet.allocations.selectors import usable_by_status
from fleet.models import Allocation, Cluster, Pool, QueueEvent, QueueWorkload
from fleet.queues.seams import seam_histograms
from fleet.queues.utilisation import utilisation_histograms
from intake.domain import Status
from intake.models import RequestTally
from intake.selectors import active_pools_facts, ending_soon, recent_requests
from intake.tally import request_counts, request_counts_by_tenant
from portal.celery import app
from tenants.access import (
    billing_scope,
    roles_for,
    tenant_scope,
    visible_tenants,
)
from tenants.kept_reads import kept_across_requests
from tenants.models import Tenant, WorkerHeartbeat

from .context_processors import layout


def home(request):
    roles = roles_for(request.user)
    if not roles.authenticated:
        return render(request, "home.html", {})
    scope = tenant_scope(request.user)
    counts = request_counts(request.user)
    recent = recent_requests(scope)
    pools = active_pools_facts()
    held = dict(usable_by_status(scope))
    return render(request, "dashboard.html", {
        # Allocations about to end: the notice a lead needs to renew in time.
        "expiring": ending_soon(scope),
        # What matters at a glance: what runs, what waits for review, what ends soon.
        "active_allocations": sum(held.values()),
        "expiring_soon": held.get(Allocation.Status.EXPIRING, 0),
        "counts": counts, "recent": recent, "pools": pools,
        "tenants": visible_tenants(request.user),
        "queue": counts.get(Status.SUBMITTED.value, 0) if roles.platform_admin else None,
        "stranded": _standing(request.user),
    })


def _standing(user):
    """The open stranded findings this person may see, at a glance (None: none, or nobody
    whose billing they read)."""
    try:
        scope = billing_scope(user)
    except PermissionDenied:
        return None
    return standing_in(scope)


def _check_broker() -> tuple[bool, str]:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return True, "eager (tasks run in the web process; no broker)"

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


def metrics(request):
    """Prometheus exposition: per-tenant device-hours and request counts (for Grafana,
    OpenCost). Needs the bearer token PORTAL_METRICS_TOKEN; open only in the embedded run."""
    token = settings.PORTAL_METRICS_TOKEN
    if token:
        if request.headers.get("Authorization", "") != f"Bearer {token}":
            return HttpResponse("metrics token required\n", status=401,
                                content_type="text/plain")
    elif settings.PRODUCTION:
        raise Http404("Set PORTAL_METRICS_TOKEN to expose /metrics")
    # Each part kept across scrapes until a write to what it sums (tenants.kept_reads), but
    # the stranded device-hours, which grow with the clock. The kept parts are kept encoded:
    # at 5,000 tenants the body is megabytes, and joining, appending to and encoding it
    # again at every scrape made a warm scrape grow with the tenants.
    stranded = "\n".join(_stranded_lines()) + "\n"
    body = b"\n".join([_billing_lines(), _request_lines(), _seam_lines(), stranded.encode()])
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")


@kept_across_requests(*FIGURE_MODELS)
def _billing_lines() -> bytes:
    lines = [
        "# HELP aifactory_allocated_device_hours Validated device-hours allocated, by tenant.",
        "# TYPE aifactory_allocated_device_hours counter",
    ]
    # The one number (billing.figures): the same lines, cents and adjustments as statements,
    # summed by the database (a scrape reads sums, not every tenant's every month).
    per_pool, tenants = metric_sums()
    per_tenant = {tenant: t["amount"] for (tenant,), t in tenants.items()}
    used_lines, amount_lines = [], []
    for (tenant, pool), t in sorted(per_pool.items()):
        labels = f'tenant="{tenant}",pool="{pool}"'
        lines.append(f"aifactory_allocated_device_hours{{{labels}}} {t['allocated_h']:.4f}")
        used_lines.append(f"aifactory_used_device_hours{{{labels}}} {t['used_h']:.4f}")
        amount_lines.append(f"aifactory_charged_amount{{{labels}}} {t['amount']:.2f}")
    statement_lines = [f'aifactory_statement_amount{{tenant="{tenant}"}} {amount:.2f}'
                       for tenant, amount in sorted(per_tenant.items())]
    lines += ["# HELP aifactory_used_device_hours Device-hours measured busy (DCGM), by tenant.",
              "# TYPE aifactory_used_device_hours counter", *used_lines,
              "# HELP aifactory_charged_amount Charges at the rate card (lines to the cent), "
              "by tenant and pool.",
              "# TYPE aifactory_charged_amount counter", *amount_lines,
              "# HELP aifactory_statement_amount What the tenant's statements add up to, "
              "adjustments included (every month).",
              "# TYPE aifactory_statement_amount counter", *statement_lines]
    return "\n".join(lines).encode()


@kept_across_requests(RequestTally, Tenant)
def _request_lines() -> bytes:
    lines = ["# HELP aifactory_capacity_requests Capacity requests by tenant and status.",
             "# TYPE aifactory_capacity_requests gauge"]
    lines += [f'aifactory_capacity_requests{{tenant="{slug}",status="{status}"}} {n}'
              for slug, status, n in request_counts_by_tenant()]
    return "\n".join(lines).encode()


def _stranded_lines() -> list[str]:
    """Open stranded findings (billing.stranded_board) by tenant, pool and kind."""
    rows = open_stranded_device_hours(timezone.now())
    out = ["# HELP aifactory_stranded_device_hours Device-hours held and unused, of the open "
           "stranded findings (since the window that showed each), by tenant, pool and kind.",
           "# TYPE aifactory_stranded_device_hours gauge"]
    labels = [",".join(f'{k}="{_escape_label(r[k])}"' for k in ("tenant", "pool", "kind"))
              for r in rows]
    out += [f"aifactory_stranded_device_hours{{{la}}} {r['device_hours']:.4f}"
            for la, r in zip(labels, rows, strict=True)]
    out += ["# HELP aifactory_stranded_devices Devices the open stranded findings hold unused.",
            "# TYPE aifactory_stranded_devices gauge"]
    out += [f"aifactory_stranded_devices{{{la}}} {r['devices']:.4f}"
            for la, r in zip(labels, rows, strict=True)]
    out += ["# HELP aifactory_stranded_given_back_devices Devices accepted stranded findings "
            "gave back to their pool (released or shrunk in place), by tenant and pool.",
            "# TYPE aifactory_stranded_given_back_devices gauge"]
    out += [f'aifactory_stranded_given_back_devices{{tenant="{_escape_label(r["tenant"])}",'
            f'pool="{_escape_label(r["pool"])}"}} {r["devices"]:.4f}'
            for r in given_back_devices()]
    return out


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _histogram_lines(name: str, help_text: str, rows: list[dict], labels_of) -> list[str]:
    """One Prometheus histogram: rows with cumulative `buckets` [(bound, n)], `count`, `sum`."""
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for h in rows:
        labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels_of(h))
        for bound, n in h["buckets"]:
            out.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {n}')
        out += [f'{name}_bucket{{{labels},le="+Inf"}} {h["count"]}',
                f"{name}_sum{{{labels}}} {h['sum']:.3f}",
                f"{name}_count{{{labels}}} {h['count']}"]
    return out


@kept_across_requests(QueueEvent, QueueWorkload, Allocation, Tenant, Cluster, Pool)
def _seam_lines() -> bytes:
    """The workload ledger's seams and the finished workloads' GPU activity (DCGM), as
    Prometheus histograms by tenant and queue."""
    def queue_labels(h):
        return (("tenant", h["tenant"]), ("queue", h["queue"]))

    lines = _histogram_lines(
        "aifactory_workload_seam_seconds",
        "Time a workload spent at each seam from queued to running (seam: admitted = queue "
        "wait, pods, claimed, scheduled, running = pod start after admission), by tenant, "
        "queue and the cluster it is queued in.", seam_histograms(),
        lambda h: (*queue_labels(h), ("cluster", h["cluster"]), ("seam", h["seam"])))
    measured = utilisation_histograms()
    lines += _histogram_lines(
        "aifactory_workload_gpu_busy_ratio",
        "Mean GPU activity (DCGM graphics engine, 0-1) of each finished workload over its "
        "run, by tenant and queue.", [h for h in measured if h["metric"] == "busy"],
        queue_labels)
    lines += _histogram_lines(
        "aifactory_workload_gpu_memory_gigabytes",
        "The most GPU memory one of a finished workload's GPUs held (DCGM), by tenant and "
        "queue.", [h for h in measured if h["metric"] == "memory"], queue_labels)
    return "\n".join(lines).encode()


def server_error(request):
    """Django's 500 handler. A database that cannot be reached (restarting, failing over) is
    a 503 with Retry-After, said plainly (JSON on the API): the request can be sent again,
    and nothing was half-written — each write is one transaction."""
    exc = sys.exc_info()[1]
    unavailable = isinstance(exc, OperationalError | InterfaceError)
    status = 503 if unavailable else 500
    message = ("The portal's database is unavailable for a moment; nothing was saved. "
               "Try again shortly." if unavailable else
               "Something went wrong on our side; it has been logged.")
    if request.path.startswith("/api/"):
        response = JsonResponse({"message": message, "extra": {}}, status=status)
    else:
        try:  # the portal's own page, in its layout; no request: no database reads
            html = render_to_string("500.html", {
                **layout(None),
                "heading": "Back in a moment" if unavailable else "Server error",
                "message": message})
        except Exception:  # a broken template must not hide the error page itself
            html = f"<!doctype html><title>Server error</title><h1>Server error</h1><p>{message}"
        response = HttpResponse(html, status=status)
    if unavailable:
        response["Retry-After"] = "5"
    return response


def not_found(request, exception=None):
    """Django's 404 handler: the portal's page, or JSON on the API (a client of the API never
    gets HTML, whatever the address)."""
    if request.path.startswith("/api/"):
        return JsonResponse({"message": "Not found.", "extra": {}}, status=404)
    return page_not_found(request, exception)


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW: the portal's own page (JSON on the API), not Django's."""
    message = "The form has expired or was not sent from the portal; nothing was changed."
    if request.path.startswith("/api/"):
        return JsonResponse({"message": message, "extra": {}}, status=403)
    return HttpResponse(render_to_string("403_csrf.html", {}, request=request), status=403)
