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
    (S.ACTIVE, S.FAILED, False), (S.PENDING, S.ACTIVE, False),
    (S.EXPIRING, S.EXPIRING, True),  # a resize in place
    (S.PENDING, S.PENDING, False), (S.FAILED, S.FAILED, False),
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


def _templates():
    return sorted((ROOT / "templates").rglob("*.html"))


STATUSES = frozenset(S.values)
# The one writer of an allocation's status: it checks the table and audits the move.
WRITER = "allocation_transition"
# Where the statuses are named, so where they may be spelled.
DEFINED_IN = {"fleet/allocations/lifecycle.py"}


def _targets(node: ast.AST):
    """Every name an assignment writes, tuples and starred ones unpacked."""
    if isinstance(node, ast.Tuple | ast.List):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _is_allocation(text: str) -> bool:
    return "alloc" in text.lower()


def _root(node: ast.AST) -> str:
    """The name a call chain starts from: `Allocation` of Allocation.objects.filter(…)."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return getattr(node, "id", "")


def status_writes(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every write of an allocation's status: an assignment to
    `<alloc>.status` (also inside a tuple), setattr(<alloc>, "status", …), and an
    `update(status=…)` or `bulk_update(…, ["status", …])` on allocations."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _targets(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = list(_targets(node.target))
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == "status" and \
                    _is_allocation(ast.unparse(t.value)):
                found.append((node.lineno, function))
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            call = _root(node.func)
            if name == "setattr" and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant) and node.args[1].value == "status" \
                    and _is_allocation(ast.unparse(node.args[0])):
                found.append((node.lineno, function))
            elif name == "update" and _is_allocation(call) and (
                    any(k.arg == "status" for k in node.keywords)
                    or any(k.arg is None for k in node.keywords)):  # update(**values)
                found.append((node.lineno, function))
            elif name == "bulk_update" and _is_allocation(call) and \
                    "'status'" in ast.unparse(node):
                found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def test_no_allocation_status_is_written_outside_the_transition():
    """Every status change goes through allocation_transition (which checks the table and
    audits it)."""
    writers = {f"{path.relative_to(ROOT)}:{line} in {function or 'the module'}"
               for path in _sources() for line, function in status_writes(path.read_text())
               if function != WRITER}
    assert writers == set()
    # and the writer itself is found where it is, so the reader sees real writes
    assert any(function == WRITER for path in _sources()
               for _, function in status_writes(path.read_text()))


@pytest.mark.parametrize("probe", [
    "alloc.status = 'active'",
    "alloc.status, alloc.status_message = to, message",  # the shape the writer has
    "(a, (allocation.status, b)) = x",
    "setattr(alloc, 'status', 'retired')",
    "Allocation.objects.filter(pk=1).update(status=S.ACTIVE)",
    "Allocation.objects.filter(pk=1).update(**values)",
    "Allocation.objects.bulk_update(rows, ['status'])",
])
def test_the_writer_check_finds_every_shape_of_write(probe):
    assert status_writes(f"def elsewhere():\n    {probe}\n") == [(2, "elsewhere")]


def literal_statuses(source: str) -> list[int]:
    """Lines spelling allocation statuses out in Python: a status literal given as a status
    (`status=`, `status__in=`, compared with a `.status`), or a tuple, list or set of them."""
    found = []

    def status_literals(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in STATUSES
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return bool(node.elts) and all(status_literals(e) for e in node.elts)
        return False

    def sides(compare: ast.Compare) -> list[ast.AST]:
        return [compare.left, *compare.comparators]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and (node.arg or "").startswith("status") and \
                status_literals(node.value):
            found.append(node.value.lineno)
        elif isinstance(node, ast.Compare) and any(
                re.search(r"(^|\.)status$", ast.unparse(c)) for c in sides(node)) \
                and any(status_literals(c) for c in sides(node)):
            found.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) > 1 and \
                status_literals(node):
            found.append(node.lineno)
    return sorted(set(found))


_NAMES = "|".join(sorted(STATUSES))
TEMPLATE_LITERAL = re.compile(
    rf"""status\s*(==|!=)\s*["']({_NAMES})["']|status in ["'][a-z ]+["']|"""
    rf"""["']({_NAMES})["']\s*,\s*["']({_NAMES})["']""")


def template_literal_statuses(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if TEMPLATE_LITERAL.search(line)]


def test_no_status_is_spelled_out_as_a_literal():
    """Statuses and sets of them come from fleet.allocations.lifecycle by name (a template's
    `status in "active expiring"` was a substring test; a misspelt literal matches nothing)."""
    found = [f"{path.relative_to(ROOT)}:{n}" for path in _sources()
             if str(path.relative_to(ROOT)) not in DEFINED_IN
             for n in literal_statuses(path.read_text())]
    found += [f"{path.relative_to(ROOT)}:{n}" for path in _templates()
              for n in template_literal_statuses(path.read_text())]
    assert found == []


@pytest.mark.parametrize("probe", [
    'Allocation.objects.filter(status__in=("pending", "active"))',
    'ids = Allocation.objects.filter(status="provisioning")',
    'if alloc.status == "failed": pass',
    'HOLD = {"active", "expiring"}',
])
def test_the_literal_check_finds_every_shape(probe):
    assert literal_statuses(probe + "\n") == [1]


@pytest.mark.parametrize("probe", [
    "{% if alloc.status == 'failed' %}", '{% if alloc.status == "expiring" %}',
    '{% if a.status in "active expiring" %}', "{% with s='active', 'retired' %}",
])
def test_the_template_check_finds_every_shape(probe):
    assert template_literal_statuses(probe) == [1]


def test_words_that_are_not_statuses_pass():
    assert literal_statuses('x = ("active", "idle")\nstate = "pending"\n') == []
    assert template_literal_statuses("{% if row.state == 'pending' %}") == []
