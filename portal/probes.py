"""Kubernetes probes, answered before anything else in the request path.

The kubelet reaches a pod by its IP, a Host that ALLOWED_HOSTS rightly does not list, and
over plain HTTP; Django's host validation (CommonMiddleware) would answer 400 and the HTTPS
redirect 301, so no probe could ever pass. ProbeMiddleware sits first and answers only these
paths, only for GET and HEAD.

- `/livez`   liveness: this process still answers. No database, no broker: a slow database
             must take a pod out of rotation, never restart it.
- `/readyz`  readiness: this pod can serve users — the database answers. The broker is
             reported but does not decide: pages are served while Redis is away (work is
             queued again by the stall check once it is back).
- `/healthz` the full report for people and monitoring (503 when the database or the
             broker is unreachable), as before.
"""

from __future__ import annotations

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from .views import _check_broker, healthz


@never_cache
def livez(request):
    return HttpResponse("ok\n", content_type="text/plain")


def database_status(conn=None) -> tuple[bool, str]:
    """(reachable, detail) of a database connection (the default one if none is given)."""
    conn = conn or connection
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, conn.vendor
    except Exception as exc:  # report, never raise: this answer is for probes
        return False, f"{exc.__class__.__name__}: {exc}"


@never_cache
def readyz(request):
    db_ok, db_detail = database_status()
    broker_ok, broker_detail = _check_broker()
    return JsonResponse({"ready": db_ok, "database": {"ok": db_ok, "detail": db_detail},
                         "broker": {"ok": broker_ok, "detail": broker_detail,
                                    "decides": False}},
                        status=200 if db_ok else 503)


def _healthz(request):
    return healthz(request)


PROBES = {"/livez": livez, "/readyz": readyz, "/healthz": _healthz}


class ProbeMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = PROBES.get(request.path_info)
        if probe is not None and request.method in ("GET", "HEAD"):
            return probe(request)
        return self.get_response(request)
