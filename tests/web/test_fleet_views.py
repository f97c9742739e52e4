"""Fleet pages: admins only; leads see pool capacity in aggregate, never node names."""

import pytest
from django.urls import reverse

from fleet.allocations.admission import (
    PARAMS_API,
    PARAMS_KIND,
    check_params_name,
    params_entries,
)
from fleet.allocations.desired import allocation_manifests
from fleet.allocations.guard_check import entries_digest
from fleet.inventory.sync import fleet_sync
from fleet.kube import DryRunBackend
from fleet.models import GpuNode, Pool, Route
from portal.demo_fleet import demo_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(bare_pools):
    pools = bare_pools
    # The demo fleet labels nodes with the demo pool slugs: give the test pools those slugs.
    for route, slug in [(Route.SHARED_POOL, "shared-h100"), (Route.DEDICATED_BLOCK,
                        "dedicated-h100"), (Route.CONFIDENTIAL_POOL, "confidential-h100"),
                        (Route.MIG_VCLUSTER, "mig-a100")]:
        Pool.objects.filter(pk=pools[route].pk).update(slug=slug)
    backend = DryRunBackend()
    for obj in demo_fleet():
        backend.apply(obj)
    return fleet_sync(backend=backend)


@pytest.fixture
def users(lead, other_lead, member, admin_user, finance_user):
    return {"lead": lead, "other_lead": other_lead, "member": member, "admin": admin_user,
            "finance": finance_user}


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 403), ("member", 403), ("finance", 403), ("admin", 200)])
def test_fleet_page_is_for_admins(client, users, fleet, who, status):
    client.force_login(users[who])
    response = client.get(reverse("fleet:fleet"))
    assert response.status_code == status
    if status == 200:
        body = response.content.decode()
        assert "h100-shared-08" in body and "XID 79" in body
        assert "48 schedulable of 72 devices" in body


def test_fleet_filter_by_state_returns_rows_only_for_htmx(client, admin_user, fleet):
    client.force_login(admin_user)
    response = client.get(reverse("fleet:fleet"), {"state": "unhealthy"},
                          HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and "h100-shared-08" in body and "h100-shared-01" not in body


@pytest.mark.parametrize(("who", "status"), [("lead", 403), ("finance", 403), ("admin", 200)])
def test_node_page_is_for_admins(client, users, fleet, who, status):
    client.force_login(users[who])
    response = client.get(reverse("fleet:node", args=["local", "h100-shared-07"]))
    assert response.status_code == status
    if status == 200:
        assert b"NCCL all-reduce 14%" in response.content
        assert b"discovered" in response.content  # the node's history


def test_retire_and_cancel_from_the_node_page(client, admin_user, lead, fleet):
    client.force_login(lead)
    assert client.post(reverse("fleet:node_retire", args=["local", "h100-cc-01"]),
                       {"retiring": "true", "reason": "x"}).status_code == 403
    client.force_login(admin_user)
    url = reverse("fleet:node_retire", args=["local", "h100-cc-01"])
    client.post(url, {"retiring": "true", "reason": ""})
    assert not GpuNode.objects.get(name="h100-cc-01").retiring  # a reason is required
    client.post(url, {"retiring": "true", "reason": "End of warranty"})
    node = GpuNode.objects.get(name="h100-cc-01")
    assert node.retiring and node.state == "retiring"
    page = client.get(reverse("fleet:node", args=["local", "h100-cc-01"])).content.decode()
    assert "Before it can go" in page and "End of warranty" in page
    client.post(url, {"retiring": "false", "reason": "Warranty extended"})
    assert GpuNode.objects.get(name="h100-cc-01").state == "schedulable"


def test_sync_on_the_dry_run_backend_keeps_the_fleet(client, admin_user, fleet, settings):
    """The embedded run's dry-run backend has no cluster: a sync must not read that as "every
    node is gone" (it once emptied every demo pool, and filing failed)."""
    from fleet.kube import DryRunBackend, using_backend

    before = GpuNode.objects.filter(present=True).count()
    client.force_login(admin_user)
    # A dry-run backend as the embedded run starts with (the process-wide one may hold what
    # earlier tests in this worker applied to it).
    with using_backend(DryRunBackend()):
        response = client.post(reverse("fleet:fleet_sync"), follow=True)
    assert b"Fleet left as it is" in response.content
    assert GpuNode.objects.filter(present=True).count() == before > 0
    assert GpuNode.objects.filter(state="gone").count() == 0


def test_lead_sees_pool_capacity_but_no_node_names(client, lead, fleet):
    client.force_login(lead)
    body = client.get(reverse("home")).content.decode()
    assert "Pool capacity" in body and "validated fleet: 48 schedulable" in body.lower()
    assert "h100-shared" not in body


def test_a_flag_is_lifted_when_its_cause_is_undone(client, admin_user, tenant, pools, fleet):
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import Allocation
    from tenants.audit import audit_for

    node = GpuNode.objects.get(name="h100-cc-01")
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.CONFIDENTIAL_POOL], route=Route.CONFIDENTIAL_POOL,
        whole_devices=1, device_equivalents=Decimal(1), namespace="acme-r1", status="active",
        starts_at=timezone.now() - dt.timedelta(days=1))
    alloc.nodes.add(node)
    client.force_login(admin_user)
    fleet_page = reverse("fleet:fleet")
    assert "<code>acme-r1</code>" not in client.get(fleet_page).content.decode()
    url = reverse("fleet:node_retire", args=["local", node.name])
    client.post(url, {"retiring": "true", "reason": "End of warranty"})
    alloc.refresh_from_db()
    assert "h100-cc-01" in alloc.flagged_reason
    # The fleet page's flagged list is kept across views until an allocation is written.
    flagged = client.get(fleet_page).content.decode()
    assert f"<td>{tenant.name}</td><td><code>acme-r1</code> · " in flagged
    assert "h100-cc-01" in flagged
    client.post(url, {"retiring": "false", "reason": "Warranty extended"})
    alloc.refresh_from_db()
    assert alloc.flagged_reason == "" and alloc.flagged_at is None
    assert audit_for(alloc).filter(action="allocation.unflagged").exists()
    assert "<code>acme-r1</code>" not in client.get(fleet_page).content.decode()


def test_a_dedicated_block_moves_off_a_retiring_node_in_one_action(
        client, admin_user, lead, tenant, pools, fleet, mailoutbox,
        django_capture_on_commit_callbacks):
    """The node page proposes a free validated node of the same pool for each block on a
    retiring node; one POST moves them: reservation, guard and labels follow, the flag is
    lifted, the tenant's leads are told, each step is in the history, the price is kept."""
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.kube import using_backend
    from fleet.models import Allocation
    from tenants.audit import audit_for

    pool = pools[Route.DEDICATED_BLOCK]
    first = GpuNode.objects.filter(pool=pool, state="schedulable").order_by("name").first()
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pool, route=Route.DEDICATED_BLOCK, whole_devices=first.gpu_count,
        device_equivalents=Decimal(first.gpu_count), namespace="acme-block", status="active",
        starts_at=timezone.now() - dt.timedelta(days=1))
    alloc.nodes.add(first)
    backend = DryRunBackend()
    with using_backend(backend):
        for manifest in allocation_manifests(alloc):
            backend.apply(manifest)
        assert backend.get("v1", "Node", first.name)["metadata"]["labels"]
        client.force_login(admin_user)
        client.post(reverse("fleet:node_retire", args=["local", first.name]),
                    {"retiring": "true", "reason": "End of warranty"})
        page = client.get(reverse("fleet:node", args=["local", first.name])).content.decode()
        assert "Move the checked blocks" in page and "acme-block" in page
        proposed = next(n for n in page.split("→ <strong>")[1:]).split("<")[0]
        assert proposed != first.name
        assert GpuNode.objects.get(name=proposed).pool_id == pool.pk

        # A reason is required; nothing moves without one.
        client.post(reverse("fleet:node_move_off", args=["local", first.name]),
                    {"allocation": [alloc.pk], "reason": ""})
        assert list(alloc.nodes.values_list("name", flat=True)) == [first.name]

        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(reverse("fleet:node_move_off", args=["local", first.name]),
                                   {"allocation": [alloc.pk], "reason": "End of warranty"},
                                   follow=True)
    assert f"moved to {proposed}" in response.content.decode()
    alloc.refresh_from_db()
    assert list(alloc.nodes.values_list("name", flat=True)) == [proposed]
    assert alloc.flagged_reason == "" and alloc.pool_id == pool.pk
    # The cluster followed: the new node carries the block's labels, the old one none, and
    # the check's entry is the digest of the block on its new node.
    assert backend.get("v1", "Node", proposed)["metadata"]["labels"][
        "aifactory.io/allocation"] == str(alloc.pk)
    assert not backend.get("v1", "Node", first.name)["metadata"].get("labels")
    params = params_entries(backend.get(PARAMS_API, PARAMS_KIND, check_params_name(alloc.pk)))
    assert params[f"check.{alloc.pk}"] == entries_digest(allocation_manifests(alloc))
    actions = set(audit_for(alloc).values_list("action", flat=True))
    assert {"allocation.flagged", "allocation.moved", "allocation.applied",
            "allocation.unflagged"} <= actions
    moved = audit_for(alloc).get(action="allocation.moved")
    assert first.name in moved.reason and proposed in moved.reason
    assert any(proposed in m.body and lead.email in m.to for m in mailoutbox)
    # The retiring node's page now says nothing depends on it.
    page = client.get(reverse("fleet:node", args=["local", first.name])).content.decode()
    assert "Nothing depends on it" in page


def test_a_move_tells_the_history_what_happened_not_that_everything_was_deleted(
        client, admin_user, lead, tenant, pools, fleet, django_capture_on_commit_callbacks):
    """Issue #46: after a move the history read "Namespace … was deleted … Node … was
    deleted" for every object (the dry run's record, empty in a fresh process, was read as
    the cluster) and the move's entry gave its reason twice. Now: the move once, with its
    reason once; the cluster step says every object was re-applied and which it updated and
    released, and never that one was deleted."""
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.kube import using_backend
    from fleet.models import Allocation
    from tenants.audit import audit_for

    pool = pools[Route.DEDICATED_BLOCK]
    first = GpuNode.objects.filter(pool=pool, state="schedulable").order_by("name").first()
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pool, route=Route.DEDICATED_BLOCK, whole_devices=first.gpu_count,
        device_equivalents=Decimal(first.gpu_count), namespace="acme-block", status="active",
        starts_at=timezone.now() - dt.timedelta(days=1))
    alloc.nodes.add(first)
    total = len(allocation_manifests(alloc))
    client.force_login(admin_user)
    client.post(reverse("fleet:node_retire", args=["local", first.name]),
                {"retiring": "true", "reason": "End of warranty"})

    # A process that never applied the block (the embedded run after a restart): its dry
    # run has no record of the objects, which does not make them deleted.
    with using_backend(DryRunBackend()), django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("fleet:node_move_off", args=["local", first.name]),
                    {"allocation": [alloc.pk], "reason": "End of warranty"})
    alloc.refresh_from_db()
    (new,) = alloc.nodes.values_list("name", flat=True)
    assert new != first.name
    history = " ".join(audit_for(alloc).values_list("reason", flat=True))
    assert "deleted" not in history
    moved = audit_for(alloc).get(action="allocation.moved").reason
    assert moved.count("End of warranty") == 1 and first.name in moved and new in moved
    applied = audit_for(alloc).get(action="allocation.applied").reason
    assert applied == (f"Cluster brought in line after the move onto {new}: re-applied all "
                       f"{total} object(s).")

    # Where the cluster holds the block: the same move says what it updated and released.
    second = GpuNode.objects.get(name=new)
    backend = DryRunBackend()
    with using_backend(backend):
        for manifest in [*demo_fleet(), *allocation_manifests(alloc)]:
            backend.apply(manifest)
        client.post(reverse("fleet:node_retire", args=["local", new]),
                    {"retiring": "true", "reason": "Fan failure"})
        with django_capture_on_commit_callbacks(execute=True):
            client.post(reverse("fleet:node_move_off", args=["local", new]),
                        {"allocation": [alloc.pk], "reason": "Replace before the fans go"})
    alloc.refresh_from_db()
    (third,) = alloc.nodes.values_list("name", flat=True)
    moved = audit_for(alloc).filter(action="allocation.moved").latest("at", "id").reason
    assert moved == (f"Moved off {new} onto {third}, a free validated node of {pool.name}: "
                     f"Replace before the fans go ({new} is retiring: Fan failure)")
    applied = audit_for(alloc).filter(action="allocation.applied").latest("at", "id").reason
    assert applied.startswith(f"Cluster brought in line after the move onto {third}: "
                              f"re-applied all {total} object(s); updated ")
    assert f"Node {third} (at metadata.labels" in applied
    assert applied.endswith(f"; released node(s) {second.name}.")
    assert "deleted" not in applied and "missing" not in applied


def test_moving_is_refused_where_there_is_nothing_to_move(client, admin_user, tenant, pools,
                                                          fleet):
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import Allocation

    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=1, device_equivalents=Decimal(1), namespace="acme-shared",
        status="active", starts_at=timezone.now() - dt.timedelta(days=1))
    client.force_login(admin_user)
    response = client.post(f"/api/allocations/{alloc.pk}/move/",
                           {"node": "h100-shared-01", "reason": "x"},
                           content_type="application/json")
    assert response.status_code == 400 and "not a holding dedicated block" in str(
        response.json())
    response = client.post(f"/api/allocations/{alloc.pk}/move/", {"node": "h100-shared-01"},
                           content_type="application/json")
    assert response.status_code == 400 and "reason" in response.json()["extra"]["fields"]


def test_an_overcommitted_pool_names_a_few_tenants_and_counts_the_rest(client, admin_user,
                                                                       pools, fleet):
    """The fleet page stays the same size however many tenants hold a pool."""
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.inventory.selectors import AFFECTED_SHOWN
    from fleet.models import Allocation
    from tenants.models import Tenant

    pool = pools[Route.SHARED_POOL]
    tenants = Tenant.objects.bulk_create([Tenant(slug=f"t{i:03d}", name=f"Tenant {i:03d}")
                                          for i in range(AFFECTED_SHOWN + 5)])
    Allocation.objects.bulk_create([Allocation(
        tenant=t, pool=pool, route=Route.SHARED_POOL, whole_devices=64,
        device_equivalents=Decimal(64), namespace=f"{t.slug}-r1", status="active",
        starts_at=timezone.now() - dt.timedelta(days=1)) for t in tenants])
    client.force_login(admin_user)
    body = client.get(reverse("fleet:fleet")).content.decode()
    assert "overcommitted" in body and "Tenant 000" in body
    assert f"Tenant {AFFECTED_SHOWN:03d}" not in body and "and 5 more tenants" in body


def test_a_fleet_no_sync_has_seen_lately_says_it_may_be_out_of_date(client, admin_user, fleet,
                                                                     settings):
    import datetime as dt

    from django.utils import timezone

    client.force_login(admin_user)
    fresh = client.get(reverse("fleet:fleet")).content.decode()
    assert "The fleet may be out of date" not in fresh and ">stale<" not in fresh
    long_ago = timezone.now() - dt.timedelta(days=58)
    GpuNode.objects.update(last_synced_at=long_ago)
    old = client.get(reverse("fleet:fleet")).content.decode()
    assert "The fleet may be out of date" in old
    assert f"since {long_ago:%Y-%m-%d %H:%M} UTC" in old
    assert f"syncs are due every {settings.PORTAL_FLEET_SYNC_SECONDS} s" in old
    shown = min(GpuNode.objects.filter(present=True).count(), 50)  # the table's first page
    assert old.count('<span class="chip warn">stale</span>') == shown
    # Two missed syncs are not yet stale; the third is.
    every = dt.timedelta(seconds=settings.PORTAL_FLEET_SYNC_SECONDS)
    GpuNode.objects.update(last_synced_at=timezone.now() - 2 * every)
    assert "out of date" not in client.get(reverse("fleet:fleet")).content.decode()
    GpuNode.objects.update(last_synced_at=timezone.now() - 3 * every - dt.timedelta(seconds=5))
    assert "out of date" in client.get(reverse("fleet:fleet")).content.decode()


def test_flagged_allocations_are_listed_newest_first(client, admin_user, tenant, pools):
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import Allocation

    for namespace in ("acme-older", "acme-newer"):
        Allocation.objects.create(
            tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
            whole_devices=1, device_equivalents=Decimal(1), namespace=namespace,
            status="active", starts_at=timezone.now() - dt.timedelta(days=1),
            flagged_reason=f"capacity lost under {namespace}")
    client.force_login(admin_user)
    body = client.get(reverse("fleet:fleet")).content.decode()
    assert body.index("<code>acme-newer</code>") < body.index("<code>acme-older</code>")
