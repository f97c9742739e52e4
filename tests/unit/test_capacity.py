"""Capacity arithmetic: node facts from API objects, fleet vs validated vs schedulable."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.inventory.capacity import (
    NodeFacts,
    choose_dedicated_nodes,
    fleet_counts,
    node_changes,
    parse_node,
    promisable_capacity,
)
from fleet.models import Route
from intake.domain import (
    Fill,
    Fit,
    IntakeAnswers,
    Isolation,
    PoolFacts,
    plan_request,
    route_request,
)


def api_node(name="n1", *, validated="true", ready="True", unschedulable=False, gpus=8,
             conditions=(), pool="shared", product="NVIDIA-H100-80GB-HBM3", **annotations):
    return {
        "metadata": {"name": name, "labels": {
            "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81559", "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-disabled", "aifactory.io/pool": pool,
            "aifactory.io/validated": validated, "aifactory.io/bios-profile": "performance"},
            "annotations": {"aifactory.io/burn-in-date": "2026-11-01", **annotations}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": ready}, *conditions]},
    }


def test_a_validated_healthy_node_is_schedulable():
    n = parse_node(api_node())
    assert (n.gpu_count, n.pool, n.validated, n.healthy, n.schedulable) == (8, "shared", True,
                                                                           True, True)
    assert n.state == "schedulable"
    assert "performance BIOS, burn-in 2026-11-01" in n.reason


@pytest.mark.parametrize(("kw", "state", "words"), [
    ({"validated": "false", "**": None}, "unvalidated", "not validated by burn-in"),
    ({"ready": "False"}, "unhealthy", "kubelet not Ready"),
    ({"conditions": [{"type": "GpuXidError", "status": "True", "message": "XID 79 on GPU 3"}]},
     "unhealthy", "GpuXidError: XID 79 on GPU 3"),
    ({"unschedulable": True}, "cordoned", "cordoned"),
])
def test_what_takes_a_node_out_of_promisable_capacity(kw, state, words):
    kw.pop("**", None)
    n = parse_node(api_node(**kw))
    assert not n.schedulable and n.state == state
    assert words in n.reason and n.reason.startswith("Not promisable")


def test_unknown_condition_types_are_ignored_and_false_conditions_are_fine():
    n = parse_node(api_node(conditions=[
        {"type": "GpuEccError", "status": "False"}, {"type": "SomethingElse", "status": "True"}]))
    assert n.schedulable


def test_validation_failure_is_quoted():
    n = parse_node(api_node(validated="false", **{
        "aifactory.io/validation-failure": "NCCL all-reduce 12% below baseline"}))
    assert "NCCL all-reduce 12% below baseline" in n.reason


def test_resource_slices_give_whole_gpus_and_mig_devices():
    def dev(kind, profile=None):
        attrs = {"type": {"string": kind}}
        if profile:
            attrs["profile"] = {"string": profile}
        return {"attributes": attrs}

    slice_ = {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "devices": [
        dev("gpu"), dev("gpu"), dev("mig", "1g.10gb"), dev("mig", "1g.10gb"),
        dev("mig", "3g.40gb")]}}
    other = {"spec": {"driver": "other.example.com", "devices": [dev("gpu")]}}
    n = parse_node(api_node(), slices=[slice_, other])
    assert n.dra_whole_gpus == 2
    assert n.mig_devices == (("1g.10gb", 2), ("3g.40gb", 1))


def facts(name, **kw):
    base = {"gpu_count": 8, "validated": True, "ready": True, "pool": "p"}
    base.update(kw)
    return NodeFacts(name=name, **base)


def test_fleet_validated_healthy_and_schedulable_are_different_numbers():
    nodes = [facts("a"), facts("b", validated=False), facts("c", health_problems=("ECC",)),
             facts("d", cordoned=True), facts("e", retiring=True), facts("f", present=False),
             facts("g", gpu_count=4, mig_devices=(("1g.10gb", 7),))]
    c = fleet_counts(nodes)
    assert (c.nodes, c.fleet_devices, c.validated_devices, c.healthy_devices,
            c.schedulable_devices) == (6, 44, 36, 28, 12)
    assert c.mig_slices == {"1g.10gb": 7}
    assert c.unpromisable_devices == 32


def test_promisable_capacity_subtracts_allocations_and_reserved_nodes():
    nodes = [facts("a"), facts("b"), facts("c", validated=False)]
    cap = promisable_capacity(nodes, allocated_devices=Decimal(8), reserved_nodes=["a"])
    assert cap.capacity_devices == 16 and cap.free_devices == 8
    assert cap.free_whole_nodes == 1
    assert "16 schedulable of 24 devices on 3 node(s)" in cap.source


@pytest.mark.parametrize("lost", [{"retiring": True}, {"health_problems": ("ECC",)},
                                  {"cordoned": True}, {"present": False}])
def test_a_block_on_a_node_it_must_leave_is_owed_a_free_node(lost):
    # Between a retirement and its move: the block still holds 8 devices and will take a free
    # node, so the free devices and the free whole nodes tell one story (16 = 2 × 8).
    nodes = [facts("old", **lost), facts("a"), facts("b"), facts("c")]
    cap = promisable_capacity(nodes, allocated_devices=Decimal(8), reserved_nodes=["old"])
    assert cap.free_devices == 16
    assert cap.free_whole_nodes == 2
    assert cap.free_whole_nodes * 8 == cap.free_devices


@given(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6))
def test_free_whole_nodes_never_promise_more_than_the_free_devices(free, held, displaced):
    nodes = ([facts(f"f{i}") for i in range(free)] + [facts(f"h{i}") for i in range(held)]
             + [facts(f"d{i}", retiring=True) for i in range(displaced)])
    reserved = [f"h{i}" for i in range(held)] + [f"d{i}" for i in range(displaced)]
    cap = promisable_capacity(nodes, allocated_devices=Decimal(8 * len(reserved)),
                              reserved_nodes=reserved)
    assert cap.free_whole_nodes * 8 <= cap.free_devices
    assert cap.free_whole_nodes == max(0, free - displaced)


@pytest.mark.parametrize(("allocated", "over"), [(0, False), (16, False), (Decimal("16.5"), True)])
def test_a_pool_is_overcommitted_only_past_what_it_can_promise(allocated, over):
    cap = promisable_capacity([facts("a"), facts("b")], allocated_devices=Decimal(allocated))
    assert cap.capacity_devices == 16 and cap.overcommitted is over


def test_a_pool_that_lost_every_node_is_overcommitted_while_anything_is_held():
    assert promisable_capacity([], allocated_devices=Decimal(1)).overcommitted
    assert not promisable_capacity([], allocated_devices=Decimal(0)).overcommitted


@pytest.mark.parametrize("nodes", [[], [facts("gone", present=False)]])
@pytest.mark.parametrize("ceiling", [0, 16, 64])
def test_a_pool_without_nodes_promises_nothing_whatever_its_configured_size(nodes, ceiling):
    cap = promisable_capacity(nodes, allocated_devices=Decimal(0), ceiling=ceiling)
    assert (cap.capacity_devices, cap.free_devices, cap.free_whole_nodes) == (0, 0, 0)
    assert not cap.has_fleet and "promises nothing" in cap.source


@pytest.mark.parametrize(("ceiling", "promised"), [(0, 16), (8, 8), (16, 16), (64, 16)])
def test_the_configured_size_is_a_ceiling_never_a_source(ceiling, promised):
    nodes = [facts("a"), facts("b"), facts("c", validated=False)]
    cap = promisable_capacity(nodes, allocated_devices=Decimal(0), ceiling=ceiling)
    assert cap.capacity_devices == promised and cap.has_fleet
    assert ("capped" in cap.source) == (promised < 16)


def test_a_plan_against_nothing_promisable_says_so():
    decision = route_request(IntakeAnswers(isolation=Isolation.HABITUAL, fill=Fill.FULL,
                                           whole_devices=2))
    pool = PoolFacts(name="Shared L40S", route=Route.SHARED_POOL, gpu_model="L40S",
                     devices_per_node=8, capacity_devices=Decimal(0),
                     allocated_devices=Decimal(0), rate_per_device_hour=Decimal(1),
                     capacity_source="no nodes synced into the pool yet, so it promises nothing")
    plan = plan_request(decision, pool)
    assert plan.fit is Fit.NEVER
    assert plan.fit_reason.startswith("Nothing can be promised in Shared L40S now: no nodes")


def test_free_mig_slices_per_profile():
    nodes = [facts("a", mig_devices=(("1g.10gb", 7),)),
             facts("b", mig_devices=(("1g.10gb", 3), ("3g.40gb", 1)))]
    cap = promisable_capacity(nodes, allocated_devices=Decimal(1),
                              allocated_mig={"1g.10gb": 9})
    assert cap.free_mig_slices == {"1g.10gb": 1, "3g.40gb": 1}


def test_dedicated_nodes_prefer_the_freshest_burn_in_and_skip_reserved():
    nodes = [facts("a", burn_in_date="2026-10-01"), facts("b", burn_in_date="2026-11-20"),
             facts("c", burn_in_date="2026-11-20"), facts("d", validated=False)]
    assert choose_dedicated_nodes(nodes, count=2) == ["b", "c"]
    assert choose_dedicated_nodes(nodes, count=3, reserved_nodes=["b"]) == ["c", "a"]


def test_node_changes_name_what_changed():
    old = facts("a")
    new = facts("a", health_problems=("GpuEccError",), cordoned=True)
    assert set(node_changes(old, new)) == {"health_problems", "cordoned"}
    assert node_changes(None, new) == {"state": ("", "unhealthy")}


def pool_facts(route, **kw):
    base = {"name": "p", "route": route, "gpu_model": "H100", "devices_per_node": 8,
            "capacity_devices": Decimal(32), "allocated_devices": Decimal(0),
            "rate_per_device_hour": Decimal(2)}
    base.update(kw)
    return PoolFacts(**base)


def test_dedicated_fit_needs_whole_free_nodes():
    d = route_request(IntakeAnswers(isolation=Isolation.CONTRACTUAL, fill=Fill.FULL,
                                    reference="MSA-1", whole_devices=12))
    plan = plan_request(d, pool_facts(Route.DEDICATED_BLOCK, free_whole_nodes=1))
    assert plan.fit is Fit.FITS_LATER and "2 whole validated node(s)" in plan.fit_reason
    plan = plan_request(d, pool_facts(Route.DEDICATED_BLOCK, free_whole_nodes=2))
    assert plan.fit is Fit.FITS_NOW


def test_mig_fit_counts_free_slices_of_the_profile():
    d = route_request(IntakeAnswers(isolation=Isolation.HABITUAL, fill=Fill.SMALL, replicas=3,
                                    mig_profile="1g.10gb"))
    plan = plan_request(d, pool_facts(Route.MIG_VCLUSTER, free_mig_slices={"1g.10gb": 2}))
    assert plan.fit is Fit.FITS_LATER and "2 free 1g.10gb slice(s)" in plan.fit_reason
    plan = plan_request(d, pool_facts(Route.MIG_VCLUSTER, free_mig_slices={"1g.10gb": 5}))
    assert plan.fit is Fit.FITS_NOW


def test_mixed_gpu_models_are_counted_per_pool():
    h100 = [facts("h1", gpu_model="H100"), facts("h2", gpu_model="H100")]
    a100 = [facts("a1", gpu_model="A100", gpu_count=4)]
    assert promisable_capacity(h100, allocated_devices=Decimal(0)).capacity_devices == 16
    assert promisable_capacity(a100, allocated_devices=Decimal(0)).capacity_devices == 4


def test_earliest_free_walks_the_allocations_ending_in_order():
    import datetime as dt

    from fleet.inventory.capacity import earliest_free

    t = lambda d: dt.datetime(2027, 1, d, tzinfo=dt.UTC)  # noqa: E731
    endings = [(t(20), Decimal(4)), (t(5), Decimal(2)), (t(10), Decimal(1))]
    assert earliest_free(needed=Decimal(5), free_now=Decimal(2), endings=endings) == t(10)
    assert earliest_free(needed=Decimal(4), free_now=Decimal(2), endings=endings) == t(5)
    assert earliest_free(needed=Decimal(20), free_now=Decimal(2), endings=endings) is None
    assert earliest_free(needed=Decimal(1), free_now=Decimal(2), endings=endings) is None
