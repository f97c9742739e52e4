"""The intake matrix and its edges, as pure functions."""

from decimal import Decimal

import pytest

from fleet.domain import smallest_profile_for_memory
from fleet.models import Route
from intake.domain import (
    Fill,
    Fit,
    IntakeAnswers,
    Isolation,
    PoolFacts,
    Status,
    check_transition,
    override_decision,
    plan_request,
    route_request,
)


def answers(**kw) -> IntakeAnswers:
    base = {"isolation": Isolation.HABITUAL, "fill": Fill.FULL, "whole_devices": 4}
    base.update(kw)
    return IntakeAnswers(**base)


def pool(route: Route, **kw) -> PoolFacts:
    base = {"name": "p", "route": route, "gpu_model": "H100", "devices_per_node": 8,
            "capacity_devices": Decimal(32), "allocated_devices": Decimal(0),
            "rate_per_device_hour": Decimal("2.00")}
    base.update(kw)
    return PoolFacts(**base)


@pytest.mark.parametrize(
    ("isolation", "fill", "route"),
    [
        (Isolation.CONTRACTUAL, Fill.FULL, Route.DEDICATED_BLOCK),
        (Isolation.REGULATORY, Fill.FULL, Route.DEDICATED_BLOCK),
        (Isolation.CONTRACTUAL, Fill.SMALL, Route.CONFIDENTIAL_POOL),
        (Isolation.REGULATORY, Fill.SMALL, Route.CONFIDENTIAL_POOL),
        (Isolation.HABITUAL, Fill.SMALL, Route.MIG_VCLUSTER),
        (Isolation.HABITUAL, Fill.FULL, Route.SHARED_POOL),
    ],
)
def test_every_cell_of_the_matrix(isolation, fill, route):
    d = route_request(answers(isolation=isolation, fill=fill, reference="MSA-1",
                              whole_devices=2, replicas=3, mig_profile="1g.10gb"))
    assert d.ok
    assert d.route is route
    assert d.reason.startswith(route.label)
    assert d.cell == ("binding" if isolation.is_binding else "habitual", fill.value)
    # The form's matrix display is the same table, with this cell marked.
    from intake.domain import matrix_table

    table = matrix_table(d.cell)
    marked = [c["route"] for row in table["matrix"] for c in row["cells"] if c["active"]]
    assert marked == [route]


def test_binding_reason_quotes_the_evidence():
    d = route_request(answers(isolation=Isolation.REGULATORY, reference="GDPR Art. 9"))
    assert "(GDPR Art. 9)" in d.reason
    assert "priced back" in d.reason


def test_habitual_reason_says_it_is_not_a_compliance_requirement():
    d = route_request(answers())
    assert "not a compliance requirement" in d.reason
    assert d.whole_devices == 4


@pytest.mark.parametrize("isolation", [Isolation.CONTRACTUAL, Isolation.REGULATORY])
@pytest.mark.parametrize("reference", ["", "  ", "ab"])
def test_missing_evidence_blocks_a_binding_claim(isolation, reference):
    d = route_request(answers(isolation=isolation, reference=reference))
    assert not d.ok and d.route is None
    fields = dict(d.errors)
    assert "isolation_reference" in fields
    assert isolation.value in fields["isolation_reference"]


def test_exactly_one_device_is_full_not_small():
    d = route_request(answers(whole_devices=1))
    assert d.route is Route.SHARED_POOL
    assert d.device_equivalents == 1


def test_whole_device_profile_is_refused_as_small():
    d = route_request(answers(fill=Fill.SMALL, replicas=1, mig_profile="7g.80gb"))
    assert not d.ok
    assert "whole device" in dict(d.errors)["mig_profile"]


def test_unknown_profile_is_refused():
    d = route_request(answers(fill=Fill.SMALL, replicas=1, mig_profile="9g.99gb"))
    assert dict(d.errors)["mig_profile"] == "'9g.99gb' is not a MIG profile."


@pytest.mark.parametrize(("field", "kw"), [
    ("whole_devices", {"fill": Fill.FULL, "whole_devices": 0}),
    ("whole_devices", {"fill": Fill.FULL, "whole_devices": 513}),
    ("replicas", {"fill": Fill.SMALL, "replicas": 0, "mig_profile": "1g.10gb"}),
    ("mig_profile", {"fill": Fill.SMALL, "replicas": 2}),
    ("isolation_origin", {"isolation": None}),
    ("device_fill", {"fill": None}),
])
def test_incomplete_answers_name_the_field(field, kw):
    d = route_request(answers(**kw))
    assert not d.ok
    assert field in dict(d.errors)
    assert d.reason.startswith("Not routed yet")


def test_memory_maps_to_the_smallest_slice_that_holds_it():
    d = route_request(answers(fill=Fill.SMALL, replicas=3, memory_gb=15))
    assert d.route is Route.MIG_VCLUSTER
    assert d.mig_profile == "1g.20gb"
    assert "maps to the 1g.20gb slice" in d.reason
    assert d.device_equivalents == Decimal("0.4286")
    assert d.whole_devices == 0


def test_memory_mapping_respects_what_the_pool_offers():
    d = route_request(answers(fill=Fill.SMALL, replicas=1, memory_gb=15,
                              offered_profiles=("1g.10gb", "2g.20gb")))
    assert d.mig_profile == "2g.20gb"


def test_memory_mapping_uses_the_141gb_family():
    assert smallest_profile_for_memory(30, gpu_memory_gb=141).name == "1g.35gb"


def test_a_fraction_that_fits_no_profile_becomes_whole_devices():
    d = route_request(answers(fill=Fill.SMALL, replicas=2, memory_gb=50))
    assert d.route is Route.SHARED_POOL
    assert d.fill is Fill.FULL
    assert d.whole_devices == 2
    assert "fits no MIG slice" in d.reason


def test_confidential_gives_one_whole_device_per_replica():
    d = route_request(answers(isolation=Isolation.CONTRACTUAL, reference="MSA-9",
                              fill=Fill.SMALL, replicas=3, mig_profile="1g.10gb"))
    assert d.route is Route.CONFIDENTIAL_POOL
    assert (d.whole_devices, d.mig_profile, d.mig_count) == (3, "", 0)
    assert d.device_equivalents == 3
    assert "slice" in d.reason


# --- plans: devices held, price, idle hours, fit


def test_dedicated_block_holds_whole_nodes_and_pays_their_idle_hours():
    d = route_request(answers(isolation=Isolation.CONTRACTUAL, reference="MSA-1",
                              whole_devices=3))
    p = plan_request(d, pool(Route.DEDICATED_BLOCK), expected_utilisation=50)
    assert p.held_devices == 8 and p.nodes == 1
    assert p.charged_device_hours_per_month == 8 * 730
    assert p.expected_used_device_hours_per_month == Decimal("1.5") * 730
    assert p.idle_device_hours_per_month == Decimal("6.5") * 730
    assert p.monthly_price == Decimal("11680.00")  # 8 × 730 × 2.00
    assert any("reserves whole nodes" in n for n in p.notes)


def test_request_larger_than_a_node_spans_nodes():
    d = route_request(answers(whole_devices=20))
    p = plan_request(d, pool(Route.SHARED_POOL))
    assert p.nodes == 3
    assert any("spans 3 nodes" in n for n in p.notes)


def test_mig_price_counts_the_share_of_a_device():
    d = route_request(answers(fill=Fill.SMALL, replicas=7, mig_profile="1g.10gb"))
    p = plan_request(d, pool(Route.MIG_VCLUSTER, rate_per_device_hour=Decimal("1.40")))
    assert p.held_devices == 1
    assert p.monthly_price == Decimal("1022.00")


def test_window_price_uses_the_window_hours():
    d = route_request(answers(whole_devices=2))
    p = plan_request(d, pool(Route.SHARED_POOL), window_hours=Decimal(48))
    assert p.window_price == Decimal("192.00")


@pytest.mark.parametrize(("allocated", "capacity", "fit"), [
    (0, 32, Fit.FITS_NOW), (28, 32, Fit.FITS_NOW), (29, 32, Fit.FITS_LATER),
    (0, 3, Fit.NEVER),
])
def test_fit_now_later_never(allocated, capacity, fit):
    d = route_request(answers(whole_devices=4))
    p = plan_request(d, pool(Route.SHARED_POOL, allocated_devices=Decimal(allocated),
                             capacity_devices=Decimal(capacity)))
    assert p.fit is fit
    assert p.fit_reason


def test_pool_of_the_wrong_route_is_an_error():
    d = route_request(answers())
    p = plan_request(d, pool(Route.DEDICATED_BLOCK))
    assert not p.ok and dict(p.errors)["pool"]


def test_profile_not_offered_by_the_pool_is_an_error():
    d = route_request(answers(fill=Fill.SMALL, replicas=1, mig_profile="4g.40gb"))
    p = plan_request(d, pool(Route.MIG_VCLUSTER, mig_profiles=("1g.10gb",)))
    assert "offers 1g.10gb" in dict(p.errors)["mig_profile"]


# --- overrides and lifecycle


def test_override_from_mig_to_shared_packs_slices_into_whole_devices():
    d = route_request(answers(fill=Fill.SMALL, replicas=8, mig_profile="1g.10gb"))
    o = override_decision(d, Route.SHARED_POOL, "Needs NVLink")
    assert o.route is Route.SHARED_POOL and o.whole_devices == 2
    assert "Needs NVLink" in o.reason and "overridden" in o.reason


def test_override_to_mig_needs_a_profile():
    d = route_request(answers())
    with pytest.raises(ValueError, match="MIG profile"):
        override_decision(d, Route.MIG_VCLUSTER, "cheaper")


@pytest.mark.parametrize(("action", "status", "admin", "lead", "allowed"), [
    ("submit", Status.DRAFT, False, True, True),
    ("submit", Status.CHANGES_REQUESTED, False, True, True),
    ("submit", Status.SUBMITTED, False, True, False),
    ("submit", Status.DRAFT, True, False, False),
    ("approve", Status.SUBMITTED, True, False, True),
    ("approve", Status.SUBMITTED, False, True, False),
    ("approve", Status.APPROVED, True, False, False),
    ("approve", Status.DRAFT, True, False, False),
    ("deny", Status.SUBMITTED, True, False, True),
    ("deny", Status.DENIED, True, False, False),
    ("request_changes", Status.SUBMITTED, True, False, True),
    ("request_changes", Status.DRAFT, True, False, False),
])
def test_transition_table(action, status, admin, lead, allowed):
    check = check_transition(action=action, status=status, is_admin=admin, is_lead=lead,
                             reason="because")
    assert check.allowed is allowed
    assert bool(check.reason) is not allowed


def test_decisions_need_a_reason():
    check = check_transition(action="deny", status=Status.SUBMITTED, is_admin=True,
                             is_lead=False, reason=" ")
    assert not check.allowed and "reason" in check.reason


@pytest.mark.parametrize(("fields", "route", "label"), [
    ({"device_fill": "full", "whole_devices": 2}, "shared_pool", "2 devices"),
    ({"device_fill": "full", "whole_devices": 1}, "dedicated_block", "1 device"),
    ({"device_fill": "small", "replicas": 3, "mig_profile": "1g.10gb"}, "confidential_pool",
     "3 devices"),
    ({"device_fill": "small", "replicas": 3, "mig_profile": "1g.10gb"}, "mig_vcluster",
     "3 × 1g.10gb"),
    ({"device_fill": "small", "replicas": 2, "memory_gb": 18}, "", "2 × 18 GB"),
])
def test_lists_speak_in_the_routes_unit(fields, route, label):
    from intake.models import CapacityRequest

    assert CapacityRequest(route=route, **fields).size_label == label
