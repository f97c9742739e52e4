"""The authorization matrix, generated from the URL resolver.

Every named URL of the portal (pages and API) has a row below: the method it is called with,
the objects it is called on (the tenant "acme"'s own), and the status each role must get.
A URL pattern without a row fails the test, so a new page or endpoint cannot arrive without
its answer for every role written down. The rule everywhere: not signed in → sign-in (pages)
or 401/403 (API); an action outside the role → 403; another tenant's object → 404.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from billing.domain import month_start
from billing.models import StrandedFinding, UsageHour
from billing.services import refresh_months
from fleet.models import GpuNode
from tests.factories import make_request

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "member", "lead", "other_lead", "admin", "finance")
SKIPPED_PREFIXES = ("django-admin/", "accounts/")  # Django's admin and allauth: theirs
LAST_MONTH = month_start(month_start(timezone.now()) - dt.timedelta(days=1))


@dataclass(frozen=True)
class Row:
    method: str
    args: str  # which fixture objects fill the URL: see _args
    expect: dict[str, int] = field(default_factory=dict)


def page(anonymous=302, **kw) -> dict[str, int]:
    return {"anonymous": anonymous, **kw}


def everyone(status: int, *, anonymous: int = 302) -> dict[str, int]:
    return {r: (anonymous if r == "anonymous" else status) for r in ROLES}


ADMIN_ONLY = {"member": 403, "lead": 403, "other_lead": 403, "finance": 403}
TENANT_OWN = {"member": 200, "lead": 200, "other_lead": 404, "admin": 200, "finance": 200}
API_ANON = 401  # the API offers bearer tokens: no credentials is 401 with a challenge

MATRIX: dict[str, Row] = {
    "home": Row("get", "", everyone(200, anonymous=200)),  # the landing page
    "healthz": Row("get", "", everyone(200, anonymous=200)),
    "livez": Row("get", "", everyone(200, anonymous=200)),
    "readyz": Row("get", "", everyone(200, anonymous=200)),
    "metrics": Row("get", "", everyone(200, anonymous=200)),  # token only in production
    "intake:list": Row("get", "", everyone(200)),
    "tenants:notifications": Row("get", "", everyone(200)),  # one's own settings
    "intake:new": Row("get", "", page(member=403, lead=200, other_lead=200, admin=403,
                                      finance=403)),
    "intake:preview": Row("post", "", page(member=403, lead=200, other_lead=200, admin=200,
                                           finance=403)),
    "intake:detail": Row("get", "request", page(**TENANT_OWN)),
    "intake:allocation": Row("get", "request", page(**TENANT_OWN)),
    "intake:manifests": Row("get", "request", page(**TENANT_OWN)),
    # Edit and submit: leads of the tenant only (the request is active: told so, redirected).
    "intake:edit": Row("get", "request", page(member=403, lead=302, other_lead=404,
                                              admin=403, finance=403)),
    "intake:submit": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                 admin=403, finance=403)),
    "intake:renew": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                admin=403, finance=403)),
    "intake:withdraw": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                   admin=403, finance=403)),
    "intake:delete": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                 admin=403, finance=403)),
    "intake:release": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                  admin=302, finance=403)),
    # The world's body has no size: refused (400 → the page, 302) once the role is checked.
    "intake:resize": Row("post", "request", page(member=403, lead=302, other_lead=404,
                                                 admin=302, finance=403)),
    "intake:retry": Row("post", "request", page(admin=302, **ADMIN_ONLY)),
    "intake:review_queue": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "intake:review_detail": Row("get", "request", page(admin=200, **ADMIN_ONLY)),
    "fleet:pools": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:pool_edit": Row("get", "pool", page(admin=200, **ADMIN_ONLY)),
    "fleet:pool_new": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:fleet": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:clusters": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:cluster_new": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:cluster": Row("get", "cluster", page(admin=200, **ADMIN_ONLY)),
    "fleet:cluster_check": Row("post", "cluster", page(admin=302, **ADMIN_ONLY)),
    "fleet:cluster_retire": Row("post", "cluster", page(admin=302, **ADMIN_ONLY)),
    "fleet:fleet_sync": Row("post", "", page(admin=302, **ADMIN_ONLY)),
    "fleet:cohorts": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:pending": Row("get", "", page(admin=200, **ADMIN_ONLY)),
    "fleet:node": Row("get", "node", page(admin=200, **ADMIN_ONLY)),
    "fleet:node_retire": Row("post", "node", page(admin=302, **ADMIN_ONLY)),
    "fleet:node_move_off": Row("post", "node", page(admin=302, **ADMIN_ONLY)),
    "fleet:queue": Row("get", "allocation", page(**TENANT_OWN)),
    "fleet:connect": Row("get", "allocation", page(**TENANT_OWN)),
    "fleet:kubeconfig": Row("get", "allocation", page(**TENANT_OWN)),
    "fleet:example": Row("get", "allocation", page(**TENANT_OWN)),
    "billing:overview": Row("get", "", everyone(200)),
    "billing:rates": Row("get", "", page(member=403, lead=403, other_lead=403, admin=200,
                                         finance=200)),
    "billing:budgets": Row("get", "", page(member=403, lead=403, other_lead=403, admin=200,
                                           finance=200)),
    "billing:statement": Row("get", "month", page(**TENANT_OWN)),
    "billing:hours": Row("get", "hours", page(**TENANT_OWN)),
    "billing:close": Row("post", "month", page(member=403, lead=403, other_lead=403,
                                               admin=302, finance=302)),
    # An empty form is refused with the page and its message (400), the typed text kept.
    "billing:adjust": Row("post", "month", page(member=403, lead=403, other_lead=403,
                                                admin=400, finance=400)),
    "billing:reopen": Row("post", "month", page(member=403, lead=403, other_lead=403,
                                                admin=400, finance=400)),
    # The world's month has no adjustment to withdraw: 404 to finance, the role first.
    "billing:withdraw": Row("post", "adjustment", page(member=403, lead=403, other_lead=403,
                                                       admin=404, finance=404)),
    "api-root": Row("get", "", everyone(200, anonymous=API_ANON)),
    "api-schema": Row("get", "", everyone(200, anonymous=200)),
    "api-docs": Row("get", "", everyone(200, anonymous=200)),
    "request-list": Row("get", "", everyone(200, anonymous=API_ANON)),
    "request-detail": Row("get", "request", {"anonymous": API_ANON, **TENANT_OWN}),
    # Another tenant's slug: the answer for a slug that does not exist (400, "No such tenant").
    "request-preview": Row("post", "preview", {"anonymous": API_ANON, "member": 403,
                                               "lead": 200, "other_lead": 400, "admin": 200,
                                               "finance": 403}),
    "request-submit": Row("post", "request", {"anonymous": API_ANON, "member": 403,
                                              "lead": 400, "other_lead": 404, "admin": 403,
                                              "finance": 403}),
    # The world's request is decided already: withdrawing it is refused (400) to its lead.
    "request-withdraw": Row("post", "request", {"anonymous": API_ANON, "member": 403,
                                                "lead": 400, "other_lead": 404, "admin": 403,
                                                "finance": 403}),
    "request-approve": Row("post", "request", {"anonymous": API_ANON, "admin": 400,
                                               **ADMIN_ONLY}),
    "request-deny": Row("post", "request", {"anonymous": API_ANON, "admin": 400,
                                            **ADMIN_ONLY}),
    "request-request-changes": Row("post", "request", {"anonymous": API_ANON, "admin": 400,
                                                       **ADMIN_ONLY}),
    "allocation-list": Row("get", "", everyone(200, anonymous=API_ANON)),
    "billing-list": Row("get", "", everyone(200, anonymous=API_ANON)),  # each its own tenants
    "billing-detail": Row("get", "statement", {"anonymous": API_ANON, **TENANT_OWN}),
    # Writes: the role first (403 to tenants' people, whichever tenant), then the month.
    "billing-statement-csv": Row("get", "statement", {"anonymous": API_ANON, **TENANT_OWN}),
    "billing-statement-pdf": Row("get", "statement", {"anonymous": API_ANON, **TENANT_OWN}),
    "billing-close": Row("post", "statement", {"anonymous": API_ANON, "member": 403,
                                               "lead": 403, "other_lead": 403, "admin": 200,
                                               "finance": 200}),
    "billing-reopen": Row("post", "statement", {"anonymous": API_ANON, "member": 403,
                                                "lead": 403, "other_lead": 403, "admin": 400,
                                                "finance": 400}),  # the month is open
    "billing-adjust": Row("post", "statement", {"anonymous": API_ANON, "member": 403,
                                                "lead": 403, "other_lead": 403, "admin": 400,
                                                "finance": 400}),  # only a closed month
    "billing-withdraw": Row("post", "statement", {"anonymous": API_ANON, "member": 403,
                                                  "lead": 403, "other_lead": 403,
                                                  "admin": 400, "finance": 400}),  # no id
    "allocation-detail": Row("get", "allocation", {"anonymous": API_ANON, **TENANT_OWN}),
    "allocation-queue": Row("get", "allocation", {"anonymous": API_ANON, **TENANT_OWN}),
    "allocation-connect": Row("get", "allocation", {"anonymous": API_ANON, **TENANT_OWN}),
    "allocation-release": Row("post", "allocation", {"anonymous": API_ANON, "member": 403,
                                                     "lead": 200, "other_lead": 404,
                                                     "admin": 200, "finance": 403}),
    # The world's body has no size: refused (400) once the role is checked.
    "allocation-resize": Row("post", "allocation", {"anonymous": API_ANON, "member": 403,
                                                    "lead": 400, "other_lead": 404,
                                                    "admin": 400, "finance": 403}),
    # The world's allocation is no dedicated block on that node: refused (400) to admins.
    "allocation-move": Row("post", "allocation", {"anonymous": API_ANON, "admin": 400,
                                                  **ADMIN_ONLY}),
    "cluster-list": Row("get", "", {"anonymous": API_ANON, "admin": 200, **ADMIN_ONLY}),
    "cluster-detail": Row("get", "cluster", {"anonymous": API_ANON, "admin": 200,
                                             **ADMIN_ONLY}),
    # The home cluster cannot be retired: the admin passes the role check and is told why.
    "cluster-check": Row("post", "cluster", {"anonymous": API_ANON, "admin": 200,
                                             **ADMIN_ONLY}),
    "cluster-retire": Row("post", "cluster", {"anonymous": API_ANON, "admin": 400,
                                              **ADMIN_ONLY}),
    "allocation-cohorts": Row("get", "", {"anonymous": API_ANON, "admin": 200,
                                          **ADMIN_ONLY}),
    # Stranded capacity: each their own tenant's findings (the other lead's list is empty),
    # the fleet board for admins and finance; the tenant's leads answer (the world's body
    # has no decision: refused, 400, once the role and tenant are passed).
    "billing:stranded": Row("get", "", everyone(200)),
    "billing:stranded_board": Row("get", "", page(member=403, lead=403, other_lead=403,
                                                  admin=200, finance=200)),
    "billing:stranded_finding": Row("get", "finding", page(**TENANT_OWN)),
    "billing:stranded_answer": Row("post", "finding", page(member=403, lead=400,
                                                           other_lead=404, admin=403,
                                                           finance=403)),
    # The world's body is no policy: refused (400) to acme's lead; another tenant's slug is
    # not found (404) for a lead of another tenant, forbidden to those who see every tenant.
    "billing:stranded_policy": Row("post", "tenant", page(member=403, lead=400, other_lead=404,
                                                         admin=403, finance=403)),
    "stranded-list": Row("get", "", everyone(200, anonymous=API_ANON)),
    "stranded-detail": Row("get", "finding", {"anonymous": API_ANON, **TENANT_OWN}),
    "stranded-answer": Row("post", "finding", {"anonymous": API_ANON, "member": 403,
                                               "lead": 400, "other_lead": 404, "admin": 403,
                                               "finance": 403}),
}


def _named_patterns() -> set[str]:
    names: set[str] = set()

    def walk(resolver, prefix: str, namespace: str | None) -> None:
        for p in resolver.url_patterns:
            route = prefix + str(p.pattern)
            if route.startswith(SKIPPED_PREFIXES):
                continue
            if isinstance(p, URLResolver):
                ns = p.namespace if p.namespace else namespace
                if p.namespace and namespace:
                    ns = f"{namespace}:{p.namespace}"
                walk(p, route, ns)
            elif isinstance(p, URLPattern):
                assert p.name, f"unnamed URL pattern {route}: name it and give it a row"
                names.add(f"{namespace}:{p.name}" if namespace else p.name)

    walk(get_resolver(), "", None)
    return names


def test_every_url_has_a_row_and_every_row_a_url():
    names = _named_patterns()
    assert names - set(MATRIX) == set(), "URLs without a row in the authorization matrix"
    assert set(MATRIX) - names == set(), "rows for URLs that no longer exist"
    for name, row in MATRIX.items():
        assert set(row.expect) == set(ROLES), f"{name}: a status for every role"


def build_world() -> dict:
    """acme's active allocation (from an approved request), a node, a month of usage."""
    from django.test import TestCase

    from intake import services
    from tenants.models import PlatformRole
    from tests.factories import (
        TenantFactory,
        make_lead,
        make_member,
        make_platform_user,
        make_pools,
    )

    tenant, other_tenant = (TenantFactory(slug="acme", name="Acme"),
                            TenantFactory(slug="globex", name="Globex"))
    make_pools()
    lead, member = make_lead(tenant, "lead"), make_member(tenant, "member")
    other_lead = make_lead(other_tenant, "outsider")
    admin_user = make_platform_user("padmin", PlatformRole.Role.PLATFORM_ADMIN)
    finance_user = make_platform_user("fin", PlatformRole.Role.FINANCE)
    req = make_request(tenant, lead, submit=True, title="Matrix")
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    alloc = req.allocation
    hour = dt.datetime.combine(LAST_MONTH, dt.time(5), tzinfo=dt.UTC)
    UsageHour.objects.create(allocation=alloc, tenant=tenant, pool=alloc.pool, hour=hour,
                             allocated_s=Decimal(3600), used_s=Decimal(1800), credit_s=0,
                             charged_s=Decimal(3600), rate=Decimal("2.5"),
                             amount=Decimal("2.5"))
    refresh_months({(alloc.pk, LAST_MONTH)})
    node = GpuNode.objects.create(name="gpu-node-1", gpu_count=8, validated=True, ready=True,
                                  state="schedulable")
    now = timezone.now()
    finding = StrandedFinding.objects.create(
        allocation=alloc, tenant=tenant, pool=alloc.pool, kind="idle_hold",
        stranded_devices=alloc.device_equivalents, cost_per_day=Decimal("60.00"),
        action="release", proposal="Release it", reason="No device was busy.",
        stranded_since=now - dt.timedelta(days=1), found_at=now, last_seen_at=now)
    return {"request": req, "allocation": alloc, "node": node, "pool": alloc.pool,
            "finding": finding,
            "users": {"member": member, "lead": lead, "other_lead": other_lead,
                      "admin": admin_user, "finance": finance_user}}


@pytest.fixture(scope="module")
def _world_once(django_db_setup, django_db_blocker):
    """The world built once for the module's 400 cases, in a transaction rolled back at the
    end; each case runs in a savepoint of it (pytest-django's `db` nests), so what one case
    writes is gone before the next, as with a world of its own."""
    from django.db import transaction

    with django_db_blocker.unblock(), transaction.atomic():
        yield build_world()
        transaction.set_rollback(True)


@pytest.fixture
def world(_world_once, db):
    from django.core.cache import cache

    # The cache is not rolled back with the savepoint: a user or roles one case cached
    # (the same ids in every case now) must not answer for the next.
    cache.clear()
    return _world_once


def _args(kind: str, world) -> list:
    month = f"{LAST_MONTH:%Y-%m}"
    return {
        "": [], "request": [world["request"].pk], "allocation": [world["allocation"].pk],
        "node": [world["node"].cluster.slug, world["node"].name],
        "pool": [world["pool"].slug], "cluster": [world["pool"].cluster.slug],
        "month": ["acme", month], "hours": ["acme", month, world["allocation"].pk],
        "preview": [], "statement": [f"acme:{month}"],
        "adjustment": ["acme", month, 999999], "finding": [world["finding"].pk],
        "tenant": ["acme"],
    }[kind]


def _body(kind: str) -> dict:
    if kind == "preview":  # a whole, valid request for acme
        from tests.factories import request_body

        return request_body("acme")
    return {"reason": "matrix", "amount": "1"}


CASES = [(name, role) for name in sorted(MATRIX) for role in ROLES]


@pytest.mark.parametrize(("name", "role"), CASES, ids=[f"{n}-{r}" for n, r in CASES])
def test_each_role_gets_its_answer(client, world, name, role):
    row = MATRIX[name]
    if role != "anonymous":
        client.force_login(world["users"][role])
    url = reverse(name, args=_args(row.args, world))
    if row.method == "get":
        response = client.get(url)
    else:
        response = client.post(url, _body(row.args), content_type="application/json") \
            if name.startswith("request-") else client.post(url, _body(row.args))
    assert response.status_code == row.expect[role], (
        f"{row.method.upper()} {url} as {role}: {response.status_code}, "
        f"expected {row.expect[role]}")
    if role == "anonymous" and row.expect[role] == 302:
        assert "/accounts/login/" in response["Location"]
