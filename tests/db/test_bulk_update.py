"""tenants.bulk.update_rows writes what Django's bulk_update writes (every type the portal
updates in bulk: text, integers, decimals, floats, times, NULLs), and a benchmark prints both
at the sizes the queue sync writes (5,000 workloads at full size)."""

from __future__ import annotations

import datetime as dt
import os
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import Allocation, GpuNode, QueueWorkload, Route
from tenants.bulk import update_rows

pytestmark = pytest.mark.django_db
NOW = timezone.now().replace(microsecond=123456)
FIELDS = ["state", "position", "devices", "first_estimate_at", "first_estimate_basis",
          "gpu_busy", "pending_detail", "node"]


@pytest.fixture
def alloc(tenant, pools):
    return Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=2, device_equivalents=Decimal(2), namespace="acme-r1", status="active",
        starts_at=NOW)


def rows(alloc, n: int) -> list[QueueWorkload]:
    QueueWorkload.objects.bulk_create(
        QueueWorkload(allocation=alloc, uid=f"u{i}", namespace="acme-r1", name=f"w{i}",
                      state="pending", position=i, devices=Decimal(1), observed_at=NOW,
                      first_estimate_at=NOW if i % 2 else None) for i in range(n))
    return list(QueueWorkload.objects.order_by("pk"))


def change(row: QueueWorkload, i: int) -> None:
    row.state = "admitted" if i % 3 else "pending"
    row.position = None if i % 4 == 0 else i * 7
    row.devices = Decimal(i % 9) / Decimal(8)
    row.first_estimate_at = None if i % 2 else NOW + dt.timedelta(seconds=i, microseconds=7)
    row.first_estimate_basis = ["", "limits", "history"][i % 3]
    row.gpu_busy = None if i % 5 == 0 else i / 1000
    row.pending_detail = "it's \"quoted\", with ; and \\ and ünïcode" if i % 2 else ""
    row.node = f"n{i}"


def snapshot() -> list[tuple]:
    return list(QueueWorkload.objects.order_by("pk").values_list("pk", *FIELDS))


def test_writes_what_bulk_update_writes(alloc):
    got = rows(alloc, 250)
    for i, row in enumerate(got):
        change(row, i)
    assert update_rows(QueueWorkload, got, FIELDS, batch_size=100) == 250
    ours = snapshot()
    expected = []
    for i, row in enumerate(got):
        change(row, i)
        expected.append((row.pk, *(getattr(row, f) for f in FIELDS)))
    assert ours == expected
    # Other columns are untouched.
    assert set(QueueWorkload.objects.values_list("observed_at", flat=True)) == {NOW}


def test_a_column_of_nulls_and_one_row(alloc):
    """Every value of a column NULL (no element to tell the array's type) and a batch of one
    row still write."""
    got = rows(alloc, 3)
    for row in got:
        row.position, row.gpu_busy, row.first_estimate_at = None, None, None
    assert update_rows(QueueWorkload, got, ["position", "gpu_busy", "first_estimate_at"]) == 3
    assert set(QueueWorkload.objects.values_list("position", "gpu_busy",
                                                 "first_estimate_at")) == {(None, None, None)}
    # A column that holds a Decimal in one row and an int or float in the next.
    got[0].devices, got[1].devices, got[2].devices = Decimal("0.5"), 2, 0.25
    assert update_rows(QueueWorkload, got, ["devices"]) == 3
    assert sorted(QueueWorkload.objects.values_list("devices", flat=True)) == [
        Decimal("0.25"), Decimal("0.5"), Decimal(2)]
    got[0].state, got[0].node = "admitted", "n-1"
    assert update_rows(QueueWorkload, got[:1], ["state", "node"]) == 1
    assert QueueWorkload.objects.filter(state="admitted", node="n-1").count() == 1


def test_nothing_to_write_is_no_statement(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert update_rows(GpuNode, [], ["ready"]) == 0


def test_benchmark_bulk_update_against_values(alloc):
    n = 5000 if os.environ.get("PORTAL_BENCH_FULL") == "1" else 1000
    got = rows(alloc, n)
    for i, row in enumerate(got):
        change(row, i)
    figures = {}
    for name, write in (("bulk_update (CASE)", lambda: QueueWorkload.objects.bulk_update(
            got, FIELDS[:5], batch_size=500)),
                        ("update_rows (unnest)", lambda: update_rows(
                            QueueWorkload, got, FIELDS[:5]))):
        times = []
        for _ in range(3):
            started = time.perf_counter()
            write()
            times.append(time.perf_counter() - started)
        figures[name] = min(times)
    print(f"\nBENCHMARK bulk write of {n} workload rows × 5 fields: " + ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in figures.items()))
    assert snapshot()[1][1:6] == tuple(getattr(got[1], f) for f in FIELDS[:5])


def test_json_booleans_and_foreign_keys(bare_pools):
    pools = bare_pools
    from fleet.inventory.sync import NODE_FIELDS

    GpuNode.objects.bulk_create(GpuNode(name=f"n{i}", gpu_count=8) for i in range(4))
    nodes = list(GpuNode.objects.order_by("name"))
    for i, node in enumerate(nodes):
        node.health_problems = [f"Xid {i}", "it's \"hot\""] if i % 2 else []
        node.mig_devices = {"1g.10gb": i} if i else {}
        node.ready, node.cordoned = bool(i % 2), not i % 2
        node.pool = pools[Route.SHARED_POOL] if i % 2 else None
        node.dra_whole_gpus = None if i == 3 else i
        node.last_synced_at = NOW if i else None
    assert update_rows(GpuNode, nodes, (*NODE_FIELDS, "facts_digest")) == 4
    got = {n.name: n for n in GpuNode.objects.all()}
    for node in nodes:
        again = got[node.name]
        assert [getattr(again, f) for f in NODE_FIELDS] == [getattr(node, f)
                                                              for f in NODE_FIELDS]


def _fields(model) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields if not f.primary_key]


def _written_alike(model, key: str, order: str) -> list[tuple]:
    """The rows whose `key` starts with "a" (written by Django) and with "b" (by our path),
    compared column by column except `key`; the "a" rows."""
    fields = [f for f in _fields(model) if f != key]
    a, b = (list(model.objects.filter(**{f"{key}__startswith": tag}).order_by(order)
                 .values_list(*fields)) for tag in "ab")
    assert a == b
    return a


def test_insert_rows_writes_what_bulk_create_writes(alloc):
    from fleet.models import QueueEvent
    from tenants.bulk import insert_rows

    def events(tag: str) -> list[QueueEvent]:
        return [QueueEvent(allocation=alloc, workload_uid=f"{tag}{i}", workload=f"w{i}",
                           kind="admitted", at=NOW + dt.timedelta(microseconds=i),
                           devices=Decimal(i) / 8, borrowed=Decimal(i % 3),
                           wait_seconds=None if i % 2 else i / 3,
                           reason=f"it's \"{i}\"\tthe\ncohort\\ lent ü",
                           detail="" if i % 2 else "x") for i in range(40)]

    QueueEvent.objects.bulk_create(events("a"))
    assert insert_rows(QueueEvent, events("b")) == 40
    assert len(_written_alike(QueueEvent, "workload_uid", "at")) == 40
    nodes = [GpuNode(name=f"c{i}", gpu_count=8, health_problems=[f"Xid {i}", 'a "b"'],
                     mig_devices={"1g.10gb": i}, dra_whole_gpus=None if i else 3)
             for i in range(3)]
    insert_rows(GpuNode, nodes)
    got = {n.name: n for n in GpuNode.objects.filter(name__startswith="c")}
    assert [got[n.name].health_problems for n in nodes] == [n.health_problems for n in nodes]
    assert [got[n.name].mig_devices for n in nodes] == [n.mig_devices for n in nodes]
    assert got["c0"].dra_whole_gpus == 3 and got["c1"].dra_whole_gpus is None


def test_insert_rows_plain_columns_as_bulk_create_writes_them(alloc):
    """The columns COPY takes as the model holds them (choices members, ints and floats in a
    decimal, aware times, NULLs, quotes and tabs in text) land as bulk_create lands them."""
    from tenants.bulk import insert_rows

    states = list(QueueWorkload.State)

    def workloads(tag: str) -> list[QueueWorkload]:
        return [QueueWorkload(
            allocation=alloc, uid=f"{tag}{i}", namespace="acme-r1", name=f"w{i}",
            state=states[i % len(states)], priority=-i, position=None if i % 3 else i,
            devices=[1, 0.1, Decimal("0.125"), 3][i % 4], observed_at=NOW,
            submitted_at=NOW - dt.timedelta(microseconds=i) if i % 2 else None,
            gpu_busy=None if i % 2 else i / 7, max_seconds=i or None,
            pending_detail=f"it's \"{i}\"\tthe\ncohort\\ lent ü", position_source="",
            resource_version=str(10 ** i)) for i in range(12)]

    QueueWorkload.objects.bulk_create(workloads("a"))
    assert insert_rows(QueueWorkload, workloads("b")) == 12
    assert len(_written_alike(QueueWorkload, "uid", "name")) == 12
    assert {r.state for r in QueueWorkload.objects.filter(uid__startswith="b")} == {
        s.value for s in states}


def test_insert_values_writes_what_bulk_create_writes(alloc):
    """Rows as {attname: value}: the fields left out take their defaults, the rest land as
    bulk_create lands them; a name the model has not (or `allocation` for `allocation_id`)
    is refused before anything is written."""
    from fleet.models import QueueEvent
    from tenants.bulk import insert_values

    def events(tag: str) -> list[dict]:
        return [{"allocation_id": alloc.pk, "workload_uid": f"{tag}{i}", "workload": f"w{i}",
                 "kind": QueueEvent.Kind.ADMITTED, "at": NOW + dt.timedelta(microseconds=i),
                 "reason": f"it's \"{i}\"\tthe\ncohort\\ lent ü",
                 **({"devices": Decimal(i) / 8, "wait_seconds": i / 3} if i % 2 else {})}
                for i in range(20)]

    QueueEvent.objects.bulk_create(QueueEvent(**e) for e in events("a"))
    assert insert_values(QueueEvent, events("b")) == 20
    assert len(_written_alike(QueueEvent, "workload_uid", "at")) == 20
    assert {r.priority for r in QueueEvent.objects.filter(workload_uid__startswith="b")} == {0}
    for wrong in ({"allocation": alloc}, {"wait_secs": 1.0}):
        with pytest.raises(ValueError, match="has no field"):
            insert_values(QueueEvent, [events("c")[0] | wrong])
    assert not QueueEvent.objects.filter(workload_uid__startswith="c").exists()


def test_benchmark_bulk_create_against_copy(alloc):
    from tenants.bulk import insert_rows

    n = 5000 if os.environ.get("PORTAL_BENCH_FULL") == "1" else 1000
    figures = {}
    for name, write in (("bulk_create (INSERT)", QueueWorkload.objects.bulk_create),
                        ("insert_rows (COPY)", lambda rows: insert_rows(QueueWorkload, rows))):
        rows = [QueueWorkload(allocation=alloc, uid=f"{name[:4]}{i}", namespace="acme-r1",
                              name=f"w{i}", state="pending", position=i, devices=Decimal(1),
                              observed_at=NOW) for i in range(n)]
        started = time.perf_counter()
        write(rows)
        figures[name] = time.perf_counter() - started
    print(f"\nBENCHMARK insert of {n} workload rows: " + ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in figures.items()))
    assert QueueWorkload.objects.count() == 2 * n
