"""What the reconcile calls drift: a live object that no longer has what the portal wants.
The API server writes quantities back in its own canonical form ("1024Gi" as "1Ti", "1000"
CPUs as "1k"), which is not drift, or every reconcile of an 8-device block would repair its
quota and write an audit row saying so; a quantity that differs in value is."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.allocations.manifests import drift
from fleet.domain import parse_quantity, quantity

pytestmark = pytest.mark.unit
BINARY = [("Ki", 1), ("Mi", 2), ("Gi", 3), ("Ti", 4), ("Pi", 5)]


def _quota(memory: str) -> dict:
    return {"spec": {"hard": {"limits.memory": memory, "requests.cpu": "64"}}}


@given(st.integers(min_value=1, max_value=4096), st.sampled_from(BINARY))
def test_a_quantity_written_in_another_unit_is_not_drift(n, unit):
    """n × 1024 of one unit is n of the next: the same quantity."""
    (small, power), (big, _) = unit, BINARY[min(BINARY.index(unit) + 1, len(BINARY) - 1)]
    if small == big:
        return
    assert drift(_quota(f"{n * 1024}{small}"), _quota(f"{n}{big}")) == []
    assert parse_quantity(f"{n * 1024}{small}") == n * 1024 ** (power + 1)


@given(st.integers(min_value=1, max_value=4096), st.integers(min_value=1, max_value=4096))
def test_a_quantity_of_another_value_is_drift(a, b):
    if a == b:
        assert drift(_quota(f"{a}Gi"), _quota(f"{b}Gi")) == []
    else:
        assert drift(_quota(f"{a}Gi"), _quota(f"{b}Gi")) == ["spec.hard.limits.memory"]


def test_decimal_units_and_words_that_are_no_quantity():
    assert drift({"cpu": "1000"}, {"cpu": "1k"}) == []
    assert drift({"cpu": "500m"}, {"cpu": "0.5"}) == []
    assert drift({"label": "true"}, {"label": "false"}) == ["label"]
    assert drift({"memory": "8Gi"}, {"memory": None}) == ["memory"]
    assert parse_quantity("restricted") is None and quantity("restricted") == 0
    # A name, label or digest that happens to read as a number is compared as text.
    assert drift({"metadata": {"labels": {"a": "12"}}},
                 {"metadata": {"labels": {"a": "012"}}}) == ["metadata.labels.a"]
    assert drift({"spec": {"entries": {"check.1": "1e5"}}},
                 {"spec": {"entries": {"check.1": "100000"}}}) == ["spec.entries.check.1"]
    assert drift({"spec": {"hard": {"cpu": "1_0"}}}, {"spec": {"hard": {"cpu": "10"}}}) == [
        "spec.hard.cpu"]
    assert quantity(None) == 0 and quantity(True) == 0 and quantity(" 2 ") == 2
