"""The request tally (intake.models.RequestTally) is what counting the requests says, after
every kind of write: the services' transitions, bulk inserts, queryset updates, a request
moved to another tenant, deletes, and after folding its rows — on PostgreSQL and on the
embedded run's SQLite (its own triggers, migrated by the real `manage.py migrate`). Writers
racing on one tenant's requests, status changes in opposite directions and a compaction
among them, neither deadlock nor wait on each other's tally rows."""

from __future__ import annotations

import json

import pytest

from tests.db.embedded_sqlite import run_on_embedded_sqlite

# Every write path at once; prints the tally and the count, which must be equal.
SCENARIO = """
import json
from django.db.models import Count
from intake.models import CapacityRequest, RequestTally
from intake.tally import compact_request_tally, request_counts_by_tenant
from tenants.models import Tenant
from tests.factories import make_lead, make_pools, make_request

def tally():
    return sorted(request_counts_by_tenant())

def counted():
    return sorted((t, s, n) for t, s, n in CapacityRequest.objects.values_list(
        "tenant__slug", "status").annotate(n=Count("id")).values_list(
        "tenant__slug", "status", "n"))

from django.db import connection
with connection.cursor() as c:  # after every migration: a later one rebuilding the table
    if connection.vendor == "sqlite":  # (SQLite's ALTER) would drop them silently
        c.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                  "AND name LIKE 'intake_tally_%'")
    else:
        c.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'intake_tally_%'")
    triggers = sorted(r[0] for r in c.fetchall())
steps = [("triggers installed", len(triggers) >= 2)]
make_pools()
a, b = Tenant.objects.create(slug="ta", name="A"), Tenant.objects.create(slug="tb", name="B")
lead = make_lead(a, "tally-lead")
drafts = [make_request(a, lead, title=f"d{i}") for i in range(3)]
submitted = make_request(a, lead, submit=True, title="s")
steps.append(("services", tally() == counted()))
CapacityRequest.objects.bulk_create([CapacityRequest(
    tenant=b, requester=lead, title=f"bulk {i}", status="denied", workload_kind="training",
    justification="x", starts_on=submitted.starts_on, ends_on=submitted.ends_on)
    for i in range(4)])
steps.append(("bulk insert", tally() == counted()))
CapacityRequest.objects.filter(tenant=b).update(status="retired")
steps.append(("queryset update", tally() == counted()))
CapacityRequest.objects.filter(pk=drafts[0].pk).update(tenant=b)
steps.append(("moved tenant", tally() == counted()))
drafts[1].title = "renamed"; drafts[1].save()  # no status change: nothing to tally
steps.append(("saved unchanged", tally() == counted()))
CapacityRequest.objects.filter(pk__in=[drafts[2].pk, submitted.pk]).delete()
steps.append(("deleted", tally() == counted()))
rows_before = RequestTally.objects.count()
folded = compact_request_tally()
steps.append(("compacted", tally() == counted()))
# one row per tenant and status left, none of them 0 (ta's submitted went back to 0)
steps.append(("one row each", RequestTally.objects.count() == len(counted())
              and not RequestTally.objects.filter(n=0).exists()
              and 0 < folded <= rows_before))
steps.append(("again: nothing to fold", compact_request_tally() == 0 and tally() == counted()))
make_request(a, lead, submit=True, title="after")
steps.append(("a write after folding", tally() == counted()))
print("RESULT " + json.dumps({"steps": steps, "tally": tally()}))
"""


def _result(stdout: str) -> dict:
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _assert_consistent(result: dict) -> None:
    assert [step for step, ok in result["steps"] if not ok] == []
    # 1 draft and the request filed after folding in ta, 1 moved draft + 4 bulk rows
    # (retired) in tb
    assert result["tally"] == [["ta", "draft", 1], ["ta", "submitted", 1], ["tb", "draft", 1],
                               ["tb", "retired", 4]]


@pytest.mark.django_db
def test_the_tally_is_the_count_on_postgresql():
    scope: dict = {}
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(SCENARIO, scope)  # noqa: S102 - our own scenario, shared with the SQLite run
    _assert_consistent(_result(out.getvalue()))


def test_the_tally_is_the_count_on_sqlite(tmp_path):
    _assert_consistent(_result(run_on_embedded_sqlite(tmp_path, SCENARIO)))


@pytest.mark.django_db(transaction=True)
def test_racing_writers_never_deadlock_on_the_tally(tenant, lead, pools):
    """Eight writers on one tenant's requests at once, each moving requests between the same
    two statuses in opposite directions inside long transactions (a counter updated in place
    locks both counters, in the change's order: these deadlock), with compactions among them.
    Every transaction commits, and the tally is the count."""
    import threading
    import time

    from django.db import connection, transaction
    from django.db.models import Count

    from intake.models import CapacityRequest
    from intake.tally import compact_request_tally, request_counts_by_tenant
    from tests.factories import make_request

    reqs = [make_request(tenant, lead, title=f"r{i}") for i in range(8)]
    ids = [r.pk for r in reqs]
    barrier = threading.Barrier(10)
    errors: list[Exception] = []

    def flip(mine: list[int], order: tuple[str, str]) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                with transaction.atomic():
                    for pk in mine:
                        CapacityRequest.objects.filter(pk=pk).update(status=order[1])
                        time.sleep(0.005)  # hold the transaction open, as a request does
                    for pk in mine:
                        CapacityRequest.objects.filter(pk=pk).update(status=order[0])
        except Exception as exc:  # collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    def compact() -> None:
        try:
            barrier.wait()
            for _ in range(10):
                compact_request_tally()
                time.sleep(0.01)  # a pause, not a wait: compactions spread over the flips
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    CapacityRequest.objects.filter(pk__in=ids[4:]).update(status="submitted")
    threads = [threading.Thread(target=flip, args=([pk], ("draft", "submitted")))
               for pk in ids[:4]]
    threads += [threading.Thread(target=flip, args=([pk], ("submitted", "draft")))
                for pk in ids[4:]]
    threads += [threading.Thread(target=compact) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    counted = sorted((t, s, n) for t, s, n in CapacityRequest.objects.values_list(
        "tenant__slug", "status").annotate(n=Count("id")).values_list(
        "tenant__slug", "status", "n"))
    assert sorted(request_counts_by_tenant()) == counted
    compact_request_tally()
    assert sorted(request_counts_by_tenant()) == counted


@pytest.mark.django_db
def test_the_apis_count_is_the_number_of_requests_it_lists(tenant, lead, admin_user, pools):
    """`count` comes from the tally; the rows from the requests: for a lead (own tenant only)
    and an admin, with and without a status filter, they agree."""
    from django.test import Client

    from tenants.models import Tenant
    from tests.factories import make_lead, make_request

    other = Tenant.objects.create(slug="other-t", name="Other")
    other_lead = make_lead(other, "other-lead")
    for i in range(3):
        make_request(tenant, lead, submit=i < 2, title=f"mine {i}")
    make_request(other, other_lead, submit=True, title="theirs")
    for user, seen in ((lead, 3), (admin_user, 4)):
        client = Client()
        client.force_login(user)
        for query, want in (("", seen), ("&status=submitted", seen - 1),
                            ("&status=draft", 1), ("&status=bogus", seen)):
            body = client.get(f"/api/requests/?limit=100{query}").json()
            assert body["count"] == len(body["results"]) == want, (user, query, body["count"])
