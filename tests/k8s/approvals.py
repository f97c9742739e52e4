"""Requests approved and provisioned per route, as the k8s tests share them."""

from __future__ import annotations

from fleet.models import Allocation, Route
from intake import services
from tests.factories import make_request

VALID = {"aifactory.io/validated": "true"}


ROUTE_REQUESTS = {
    Route.SHARED_POOL: {"whole_devices": 4},
    Route.DEDICATED_BLOCK: {"whole_devices": 8, "isolation_origin": "contractual",
                            "isolation_reference": "MSA-900"},
    Route.CONFIDENTIAL_POOL: {"device_fill": "small", "replicas": 2, "mig_profile": "1g.10gb",
                              "whole_devices": 0, "isolation_origin": "regulatory",
                              "isolation_reference": "PCI DSS cardholder data"},
    Route.MIG_VCLUSTER: {"device_fill": "small", "replicas": 3, "mig_profile": "2g.20gb",
                         "whole_devices": 0},
}


def approve(tenant, lead, admin_user, route, django_capture_on_commit_callbacks, **extra):
    req = make_request(tenant, lead, submit=True, **{**ROUTE_REQUESTS[route], **extra})
    assert req.route == route
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    return req, Allocation.objects.get(pk=req.allocation_id)


def provisioned(tenant, lead, admin_user, route, capture, **extra):
    req, alloc = approve(tenant, lead, admin_user, route, capture, **extra)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    return alloc
