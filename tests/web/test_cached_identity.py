"""Sessions and roles come from the cache first (a query less each per page) — without
weakening anything: a revoked role, a new grant and a sign-out take effect on the very next
request, and a user of a reused id never inherits cached roles."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tenants.models import Membership, PlatformRole

pytestmark = pytest.mark.django_db


def test_the_cache_is_on_and_saves_the_queries(client, lead, settings):
    assert settings.PORTAL_ROLES_CACHE_SECONDS > 0
    assert settings.SESSION_ENGINE.endswith("cached_db")
    client.force_login(lead)
    client.get(reverse("intake:list"))  # warms the session and the roles
    with CaptureQueriesContext(connection) as warm:
        client.get("/bench-free-page-that-does-not-exist/")
    tables = " ".join(q["sql"] for q in warm.captured_queries)
    assert "django_session" not in tables and "tenants_membership" not in tables, tables


def test_a_revoked_role_and_a_new_grant_take_effect_at_once(client, lead, tenant):
    client.force_login(lead)
    assert client.get(reverse("intake:new")).status_code == 200
    Membership.objects.filter(user=lead, tenant=tenant).delete()
    assert client.get(reverse("intake:new")).status_code == 403
    PlatformRole.objects.create(user=lead, role=PlatformRole.Role.PLATFORM_ADMIN)
    assert client.get(reverse("intake:review_queue")).status_code == 200
    PlatformRole.objects.filter(user=lead).delete()
    assert client.get(reverse("intake:review_queue")).status_code == 403


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(client, lead):
    from django.test import Client

    client.force_login(lead)
    assert client.get(reverse("intake:list")).status_code == 200
    stolen = Client()
    stolen.cookies = client.cookies.__class__(client.cookies)  # the same session cookie
    assert stolen.get(reverse("intake:list")).status_code == 200
    client.post(reverse("account_logout"))
    response = stolen.get(reverse("intake:list"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_new_user_with_an_old_id_does_not_inherit_cached_roles(client, tenant):
    """Ids restart after a flush; the cache key carries the join time."""
    from django.contrib.auth import get_user_model

    from tenants.access import roles_for
    from tests.factories import make_lead

    user_model = get_user_model()
    first = make_lead(tenant, "first")
    assert roles_for(user_model.objects.get(pk=first.pk)).is_lead
    pk = first.pk
    with connection.cursor() as cursor:  # as a flush does: no signals, the cache untouched
        cursor.execute(f"DELETE FROM {Membership._meta.db_table} WHERE user_id = %s", [pk])
        cursor.execute(f"DELETE FROM {user_model._meta.db_table} WHERE id = %s", [pk])
    user_model.objects.create_user("second", password="x", id=pk)
    assert not roles_for(user_model.objects.get(pk=pk)).is_lead


def test_the_user_comes_from_the_cache_and_leaves_it_when_it_changes(client, lead, settings):
    assert settings.PORTAL_USER_CACHE_SECONDS > 0
    client.force_login(lead)
    client.get(reverse("intake:list"))
    with CaptureQueriesContext(connection) as warm:
        client.get("/no-such-page/")
    assert "auth_user" not in " ".join(q["sql"] for q in warm.captured_queries)
    # Deactivated: signed out on the next request.
    lead.is_active = False
    lead.save(update_fields=["is_active"])
    response = client.get(reverse("intake:list"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_password_change_signs_out_the_other_sessions(client, lead):
    from django.test import Client

    client.force_login(lead)
    assert client.get(reverse("intake:list")).status_code == 200
    other = Client()
    other.force_login(lead)
    assert other.get(reverse("intake:list")).status_code == 200
    lead.set_password("a-new-one-9f8e7d")
    lead.save()
    for c in (client, other):
        response = c.get(reverse("intake:list"))
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_late_write_is_stale_on_arrival(lead):
    """A page that read the user before a change and writes its entry after it: the entry
    carries the token it read first, which the change replaced, so it is never served."""
    from tenants import identity_cache

    assert identity_cache.read("probe", lead.pk)[0] is None
    _, token = identity_cache.read("probe", lead.pk)
    identity_cache.changed(lead.pk)  # e.g. deactivated between the read and the write
    identity_cache.write("probe", token, "before the change", 60)
    assert identity_cache.read("probe", lead.pk)[0] is None
    _, fresh = identity_cache.read("probe", lead.pk)
    identity_cache.write("probe", fresh, "after", 60)
    assert identity_cache.read("probe", lead.pk)[0] == "after"


def test_an_evicted_token_retires_every_entry(lead):
    from django.core.cache import cache

    from tenants import identity_cache

    _, token = identity_cache.read("probe2", lead.pk)
    identity_cache.write("probe2", token, "cached", 60)
    cache.delete(f"uv:v1:{lead.pk}")  # evicted
    assert identity_cache.read("probe2", lead.pk)[0] is None


def test_a_warm_page_reads_the_cache_twice_the_session_then_user_and_roles(client, lead,
                                                                             monkeypatch):
    """Every page pays these round trips: the session, then the user, their roles and the
    token together (and a page with kept reads, their marks)."""
    from django.core.cache import caches

    backend = caches["default"]
    reads = []
    for name in ("get", "get_many"):
        original = getattr(backend, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(backend, name, counted)
    client.force_login(lead)
    client.get(reverse("intake:list"))
    client.get(reverse("intake:list"))  # the roles' entry is written by the first
    reads.clear()
    with CaptureQueriesContext(connection) as warm:
        assert client.get(reverse("intake:new")).status_code == 200  # a lead-only page
    # The form offers the pools' MIG slices: their kept facts' change marks are one more
    # round trip (tenants.kept_reads), instead of a query.
    assert reads == ["get", "get_many", "get_many"], reads
    tables = " ".join(q["sql"] for q in warm.captured_queries)
    assert "auth_user" not in tables and "tenants_membership" not in tables, tables
    # A revoked role still takes effect on the next request (the token moved).
    Membership.objects.filter(user=lead).delete()
    assert client.get(reverse("intake:new")).status_code == 403
