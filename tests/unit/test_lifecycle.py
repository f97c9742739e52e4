"""The allocation lifecycle is one table, and nothing writes a status around it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fleet.allocations import lifecycle
from fleet.allocations.lifecycle import TRANSITIONS
from fleet.allocations.lifecycle import AllocationStatus as S

ROOT = Path(__file__).resolve().parents[2]
APPS = ("tenants", "fleet", "intake", "billing", "portal")


def test_every_status_has_a_row_and_retired_is_the_end():
    assert set(TRANSITIONS) == set(S.values)
    assert TRANSITIONS[S.RETIRED] == frozenset()
    for targets in TRANSITIONS.values():
        assert targets <= set(S.values)


@pytest.mark.parametrize("name", ["HOLDING", "USABLE", "RENEWABLE", "RECONCILED", "FOLLOWED",
                                  "BILLED", "PROVISIONED", "STARTABLE", "RETIRABLE"])
def test_named_sets_are_sets_of_statuses(name):
    assert getattr(lifecycle, name) <= set(S.values)


@pytest.mark.parametrize("old,new,ok", [
    (S.PENDING, S.PROVISIONING, True), (S.FAILED, S.PROVISIONING, True),
    (S.PROVISIONING, S.ACTIVE, True), (S.ACTIVE, S.EXPIRING, True),
    (S.EXPIRING, S.ACTIVE, True), (S.ACTIVE, S.ACTIVE, True),  # renewals
    (S.FAILED, S.PENDING, True), (S.EXPIRING, S.RETIRED, True),
    (S.RETIRED, S.ACTIVE, False), (S.ACTIVE, S.PROVISIONING, False),
    (S.ACTIVE, S.FAILED, False), (S.PENDING, S.ACTIVE, False), (S.EXPIRING, S.EXPIRING, False),
])
def test_moves(old, new, ok):
    assert lifecycle.can_move(old, new) is ok


def test_every_reachable_status_has_its_sources():
    for status in S.values:
        for old in lifecycle.sources_of(status):
            assert lifecycle.can_move(old, status)


def test_the_request_follows_every_status():
    assert set(lifecycle.REQUEST_STATUS_OF) == set(S.values)


def _sources():
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path


def test_no_allocation_status_is_written_outside_the_transition():
    """Every status change goes through fleet.allocations.provisioning.allocation_transition (which
    checks the table and audits it): no `Allocation...update(status=...)`, no
    `alloc.status = ...` elsewhere."""
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "update" and \
                    any(k.arg == "status" for k in node.keywords) and \
                    "Allocation" in ast.unparse(node.func):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr == "status" and \
                            "alloc" in ast.unparse(target.value).lower():
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    allowed = {"fleet/provisioning.py"}  # allocation_transition itself
    assert [o for o in offenders if o.split(":")[0] not in allowed] == []


def test_no_status_sets_are_spelled_out_as_literals():
    """Sets of allocation statuses come from fleet.allocations.lifecycle by name (a template's
    `status in "active expiring"` was a substring test)."""
    literal = re.compile(r"""["'](active|expiring|provisioning|retired)["']\s*,\s*["']"""
                         r"""(active|expiring|provisioning|retired|failed|pending)["']""")
    found = []
    for path in [*_sources(), *(ROOT / "templates").rglob("*.html")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if literal.search(line) or re.search(r'status in "[a-z ]+"', line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
