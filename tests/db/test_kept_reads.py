"""Reads kept across requests (tenants.kept_reads): every way of writing a table retires
what was kept from it; a decision inside a transaction never reads a kept answer; a kept
read that reads a table it does not declare is refused; and the pools' facts kept for the
pages equal a fresh read after any sequence of writes (Hypothesis)."""

from __future__ import annotations

import datetime as dt
import threading
from contextlib import contextmanager
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import update_last_login
from django.db import connection, connections, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.domain import Route
from fleet.models import Allocation, GpuNode, Pool, RateCard
from intake.selectors import _kept_pools_facts, active_pools_facts
from tenants import kept_reads
from tenants.kept_reads import UndeclaredTable, Until, kept_across_requests
from tenants.models import Tenant
from tenants.per_request import _memo

pytestmark = pytest.mark.django_db

builds: list[int] = []


@kept_across_requests(Tenant)
def tenant_names() -> tuple[str, ...]:
    builds.append(1)
    return tuple(Tenant.objects.order_by("slug").values_list("name", flat=True))


@kept_across_requests(Tenant)
def reads_more_than_it_says() -> int:
    return Pool.objects.count()


@contextmanager
def reading_request():
    """As PerRequestMemoMiddleware opens a GET request."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def read(fn, *args):
    with reading_request():
        return fn(*args)


def test_a_kept_read_is_served_again_until_its_table_is_written():
    Tenant.objects.create(slug="a", name="A")
    builds.clear()
    assert read(tenant_names) == ("A",)
    assert read(tenant_names) == ("A",)
    assert len(builds) == 1  # the second page was served what the first read


@pytest.mark.parametrize("write", [
    "save", "update", "bulk_create", "delete", "raw", "get_or_create", "bulk_update"])
def test_every_way_of_writing_a_table_retires_what_was_kept_from_it(write):
    a = Tenant.objects.create(slug="a", name="A")
    assert read(tenant_names) == ("A",)
    if write == "save":
        a.name = "A2"
        a.save()
    elif write == "update":
        Tenant.objects.filter(pk=a.pk).update(name="A2")
    elif write == "bulk_create":
        Tenant.objects.bulk_create([Tenant(slug="b", name="B")])
    elif write == "delete":
        a.delete()
    elif write == "raw":
        with connection.cursor() as cursor:
            cursor.execute(f"update {Tenant._meta.db_table} set name = %s", ["A2"])  # noqa: S608
    elif write == "get_or_create":
        Tenant.objects.get_or_create(slug="b", defaults={"name": "B"})
    elif write == "bulk_update":
        a.name = "A2"
        Tenant.objects.bulk_update([a], ["name"])
    fresh = tuple(Tenant.objects.order_by("slug").values_list("name", flat=True))
    assert read(tenant_names) == fresh != ("A",)


def test_a_read_outside_a_reading_request_or_inside_a_transaction_is_always_fresh():
    Tenant.objects.create(slug="a", name="A")
    builds.clear()
    tenant_names()
    tenant_names()  # a task, a service, the shell: no request
    with reading_request(), transaction.atomic():
        tenant_names()  # an approval under its lock reads the database
        tenant_names()
    assert len(builds) == 4


def test_a_kept_read_of_a_table_it_does_not_declare_is_refused():
    with pytest.raises(UndeclaredTable, match="tenants_pool"):
        read(reads_more_than_it_says)


def test_an_answer_that_ends_at_a_time_is_read_again_after_it(monkeypatch):
    later = timezone.now() + dt.timedelta(hours=1)
    calls = []

    @kept_across_requests(Tenant)
    def until_later():
        calls.append(1)
        return Until(len(calls), later)

    assert read(until_later) == 1
    assert read(until_later) == 1
    monkeypatch.setattr(kept_reads.timezone, "now", lambda: later)
    assert read(until_later) == 2


def test_a_rate_card_that_starts_later_ends_the_kept_pools_facts(pools, monkeypatch):
    shared = pools[Route.SHARED_POOL]
    starts = timezone.now() + dt.timedelta(hours=2)
    RateCard.objects.create(pool=shared, effective_from=starts,
                            rate_per_device_hour=Decimal("9.00"))

    def shared_rate():
        return next(f.rate_per_device_hour for p, f in read(active_pools_facts) if p == shared)

    assert shared_rate() == Decimal("2.50")
    monkeypatch.setattr(kept_reads.timezone, "now", lambda: starts)
    monkeypatch.setattr("intake.selectors.timezone.now", lambda: starts)
    assert shared_rate() == Decimal("9.00")


def test_the_pool_list_shows_a_later_card_once_it_starts_and_a_new_node_at_once(
        pools, monkeypatch):
    """The pool list (fleet.inventory.pool_list) is kept until a write, or until the next
    rate card starts."""
    from fleet.inventory.pool_list import pools_with_capacity

    shared = pools[Route.SHARED_POOL]
    starts = timezone.now() + dt.timedelta(hours=2)
    RateCard.objects.create(pool=shared, effective_from=starts,
                            rate_per_device_hour=Decimal("9.00"))

    def shared_row():
        return next((p.rate_now, c) for p, c in read(pools_with_capacity) if p == shared)

    rate, before = shared_row()
    assert rate == Decimal("2.50")
    GpuNode.objects.create(name="late-node", pool=shared, cluster=shared.cluster,
                           gpu_count=8, validated=True, ready=True)
    rate, after = shared_row()
    assert rate == Decimal("2.50") and after != before
    monkeypatch.setattr(kept_reads.timezone, "now", lambda: starts)
    monkeypatch.setattr("fleet.inventory.pool_list.timezone.now", lambda: starts)
    assert shared_row()[0] == Decimal("9.00")


@pytest.mark.django_db(transaction=True)
def test_a_read_during_another_transaction_is_retired_when_it_commits():
    """Marks read before the build: what another connection keeps while a write is not yet
    committed is stamped with marks the commit's renewal retires."""
    Tenant.objects.create(slug="a", name="A")
    assert read(tenant_names) == ("A",)
    seen = []

    def other_page():
        try:
            seen.append(read(tenant_names))
        finally:
            connections.close_all()

    with transaction.atomic():
        Tenant.objects.create(slug="b", name="B")
        reader = threading.Thread(target=other_page)
        reader.start()
        reader.join()
    assert seen == [("A",)]  # the other connection saw only what was committed
    assert read(tenant_names) == ("A", "B")


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_write_leaves_no_kept_answer_behind():
    Tenant.objects.create(slug="a", name="A")
    with pytest.raises(RuntimeError), transaction.atomic():
        Tenant.objects.create(slug="b", name="B")
        with reading_request():
            assert tenant_names() == ("A", "B")  # its own write, read fresh, not kept
        raise RuntimeError("refused")
    assert read(tenant_names) == ("A",)


def _allocation(tenant, pool, devices: int, status: str) -> Allocation:
    return Allocation.objects.create(
        tenant=tenant, pool=pool, route=pool.route, whole_devices=devices,
        device_equivalents=devices, starts_at=timezone.now(),
        namespace=f"t-{Allocation.objects.count()}", status=status)


OPS = st.lists(st.tuples(
    st.sampled_from(["allocate", "retire", "node_down", "node_up", "node_gone",
                     "ceiling", "deactivate", "reactivate", "rate", "resize"]),
    st.integers(0, 3), st.integers(1, 8)), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(ops=OPS)
def test_the_kept_pools_facts_equal_a_fresh_read_after_any_writes(pools, tenant, ops):
    """Whatever the fleet, the allocations, the rates and the pools go through, every page
    that keeps the pools' facts shows what a fresh read shows."""
    kept_reads.renew_every_mark()
    point = transaction.savepoint()
    try:
        every = sorted(pools.values(), key=lambda p: p.pk)
        read(active_pools_facts)
        for op, which, n in ops:
            pool = every[which % len(every)]
            if op == "allocate":
                _allocation(tenant, pool, n, "active")
            elif op == "retire":
                Allocation.objects.filter(pool=pool, status="active").update(status="retired")
            elif op == "resize":
                for a in Allocation.objects.filter(pool=pool)[:1]:
                    a.device_equivalents = n
                    a.save(update_fields=["device_equivalents"])
            elif op in ("node_down", "node_up"):
                GpuNode.objects.filter(pool=pool, name__endswith=f"{n % 4:02d}").update(
                    ready=op == "node_up")
            elif op == "node_gone":
                GpuNode.objects.filter(pool=pool).order_by("name")[:1].get().delete() \
                    if GpuNode.objects.filter(pool=pool).exists() else None
            elif op == "ceiling":
                Pool.objects.filter(pk=pool.pk).update(capacity_devices=8 * n)
            elif op in ("deactivate", "reactivate"):
                Pool.objects.filter(pk=pool.pk).update(active=op == "reactivate")
            elif op == "rate":
                RateCard.objects.create(pool=pool, effective_from=timezone.now(),
                                        rate_per_device_hour=Decimal(n))
            assert read(active_pools_facts) == _kept_pools_facts.uncached()
    finally:
        transaction.savepoint_rollback(point)
        kept_reads.renew_every_mark()


@pytest.mark.parametrize(("sql", "writes"), [
    ('SELECT "x" FROM "tenants_tenant"', False),
    ("WITH spent AS (SELECT 1 FROM tenants_tenant) SELECT * FROM spent", False),
    ("WITH gone AS (DELETE FROM intake_requesttally RETURNING *) SELECT 1", True),
    ('  insert into "tenants_tenant" ("slug") values (%s)', True),
    ('UPDATE "tenants_pool" SET "active" = false', True),
    ('TRUNCATE "tenants_tenant", "tenants_pool"', True),
    ("SAVEPOINT s1", False),
    ("/* why */ UPDATE tenants_pool SET active = false", True),
    ("-- why\n  (DELETE FROM tenants_pool)", True),
    ("DO $$ BEGIN PERFORM 1; END $$", True),
])
def test_a_statement_that_may_write_is_told_from_a_read(sql, writes):
    assert kept_reads.may_write(sql) is writes


def test_a_reading_request_that_writes_reads_the_marks_again():
    Tenant.objects.create(slug="a", name="A")
    with reading_request():
        assert tenant_names() == ("A",)
        Tenant.objects.create(slug="b", name="B")
        assert tenant_names() == ("A", "B")


def test_rows_copied_in_retire_what_was_kept_from_their_table():
    """COPY goes past Django's cursor, and so past the write watch: tenants.bulk says so."""
    from tenants.bulk import insert_rows

    Tenant.objects.create(slug="a", name="A")
    assert read(tenant_names) == ("A",)
    assert insert_rows(Tenant, [Tenant(slug="b", name="B")]) == 1
    assert read(tenant_names) == ("A", "B")


def test_a_request_filed_moves_the_tally_its_triggers_write(tenant, lead):
    """The tally is written by triggers on the requests' table (intake migration 0008)."""
    from intake.tally import request_counts
    from tests.factories import make_request

    before = read(request_counts, lead)
    make_request(tenant, lead)
    after = read(request_counts, lead)
    assert sum(after.values()) == sum(before.values()) + 1


def test_every_table_a_trigger_writes_is_known_to_the_write_watch():
    """A migration's trigger that writes another table must be declared (triggers_write),
    or what is kept from that table would outlive the write."""
    import re
    from pathlib import Path

    known = kept_reads._known_tables()
    for path in Path(".").glob("*/migrations/*.py"):
        text = path.read_text()
        if "CREATE TRIGGER" not in text:
            continue
        on = {t for t in re.findall(r"\bON\s+(\w+)", text) if t in known}
        writes = {t for t in re.findall(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)",
                                        text) if t in known}
        for source in on:
            for target in writes - {source}:
                assert target in kept_reads._TRIGGERED.get(source, ()), (path, source, target)


def test_a_statement_whose_tables_cannot_be_read_moves_every_mark():
    assert kept_reads._written_by("TRUNCATE tenants_tenant CASCADE") == kept_reads._known_tables()
    assert kept_reads._written_by("CALL fold_tally()") == kept_reads._known_tables()
    assert kept_reads._written_by('TRUNCATE "tenants_tenant"') == {"tenants_tenant"}


@kept_across_requests(Pool)
def pools_and_names() -> tuple:
    return Pool.objects.count(), tenant_names()


def test_a_kept_read_made_inside_another_ones_build_counts_as_the_outer_ones():
    """The inner read is read afresh while the outer is built, so the outer's check sees its
    tables: here the outer does not declare the tenants it reads through the inner."""
    Tenant.objects.create(slug="a", name="A")
    read(tenant_names)  # kept: a kept answer inside the build would hide its query
    with pytest.raises(UndeclaredTable, match="tenants_tenant"):
        read(pools_and_names)


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_inside_a_wrapper_keeps_its_watch():
    """Django's execute_wrapper() pops the last wrapper when it ends: the watch goes first."""
    from django.db import connection as default

    default.close()
    default.execute_wrappers.remove(kept_reads._watch)  # as a connection never opened
    with default.execute_wrapper(lambda execute, *args: execute(*args)):
        Tenant.objects.count()  # opens the connection: the watch is installed now
    assert default.execute_wrappers and default.execute_wrappers[0] is kept_reads._watch


def test_the_fleet_page_shows_a_node_changed_since_it_was_last_viewed(client, pools,
                                                                      admin_user):
    """The node table, the pools' picture and the clusters are kept; a sync's write shows."""
    client.force_login(admin_user)
    node = GpuNode.objects.order_by("name").first()
    assert node.name in client.get("/fleet/").content.decode()
    GpuNode.objects.filter(pk=node.pk).update(name="renamed-by-a-sync")
    page = client.get("/fleet/").content.decode()
    assert "renamed-by-a-sync" in page and f">{node.name}<" not in page


@kept_across_requests(get_user_model())
def usernames() -> tuple[str, ...]:
    builds.append(1)
    return tuple(get_user_model().objects.order_by("username").values_list("username",
                                                                            flat=True))


def test_a_sign_in_retires_nothing_but_a_change_to_a_user_does(client, lead):
    """Django writes `last_login` at every sign-in; no kept read shows it, so a sign-in
    keeps what was kept of the users. Any other write to a user retires it, the same write
    with `last_login` beside it included."""
    builds.clear()
    assert read(usernames) == ("lead",)
    client.force_login(lead)  # update_last_login: UPDATE … SET "last_login" = %s WHERE …
    update_last_login(None, lead)
    assert read(usernames) == ("lead",) and len(builds) == 1
    lead.username, lead.last_login = "lead-renamed", timezone.now()
    lead.save(update_fields=["username", "last_login"])
    assert read(usernames) == ("lead-renamed",) and len(builds) == 2
    get_user_model().objects.filter(pk=lead.pk).update(last_login=None, username="lead")
    assert read(usernames) == ("lead",) and len(builds) == 3


def test_only_a_plain_update_of_unread_columns_is_passed_over():
    user_table = get_user_model()._meta.db_table
    one = f'UPDATE "{user_table}" SET "last_login" = %s WHERE "{user_table}"."id" = %s'
    assert kept_reads._written_by(one) == frozenset()
    for sql in (
        f'UPDATE "{user_table}" SET "last_login" = %s, "is_active" = %s '
        f'WHERE "{user_table}"."id" = %s',
        f'UPDATE "{user_table}" SET "last_login" = %s WHERE "{user_table}"."id" IN '
        f'(SELECT U0."id" FROM "tenants_tenant" U0)',
        f'UPDATE "{user_table}" SET "last_login" = (SELECT 1) WHERE "{user_table}"."id" = %s',
        'UPDATE "tenants_tenant" SET "last_login" = %s WHERE "tenants_tenant"."id" = %s',
    ):
        assert user_table in kept_reads._written_by(sql) or "tenants_tenant" in \
            kept_reads._written_by(sql), sql
