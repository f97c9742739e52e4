"""Settings from the environment: the readers refuse nonsense, and every variable the
settings read is in the README's table (and nothing else is)."""

import ast
import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list


def test_env_bool_reads_words_and_refuses_nonsense(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    assert env_bool("X_FLAG", False) is True
    monkeypatch.setenv("X_FLAG", "off")
    assert env_bool("X_FLAG", True) is False
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG", False)


def test_env_int_refuses_non_numbers_and_values_below_minimum(monkeypatch):
    monkeypatch.setenv("X_N", "12")
    assert env_int("X_N", 1) == 12
    monkeypatch.setenv("X_N", "twelve")
    with pytest.raises(ImproperlyConfigured):
        env_int("X_N", 1)
    monkeypatch.setenv("X_N", "-1")
    with pytest.raises(ImproperlyConfigured, match="minimum"):
        env_int("X_N", 1, minimum=0)


def test_env_list_splits_and_trims(monkeypatch):
    monkeypatch.setenv("X_L", " a, b ,,c ")
    assert env_list("X_L", []) == ["a", "b", "c"]
    monkeypatch.delenv("X_L")
    assert env_list("X_L", ["d"]) == ["d"]


def test_timeline_action_labels():
    from tenants.timeline import action_label

    assert action_label("request.request_changes") == "Request changes"
    assert action_label("allocation.nodes_reserved") == "Allocation: nodes reserved"
    assert action_label("node.changed") == "Node: changed"


def _settings_read() -> set[str]:
    """Every environment variable portal/settings.py reads (through portal.env or os)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "portal/settings.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = ast.unparse(node.func)
            if (isinstance(node.func, ast.Name) and func.startswith("env_")) or \
                    func in ("os.environ.get", "os.getenv"):
                names.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and \
                isinstance(node.slice, ast.Constant):
            names.add(node.slice.value)
    return names


def _readme_table() -> set[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Configuration"):readme.index("\n## ", readme.index(
        "## Configuration") + 1)]
    return {name for line in section.splitlines() if line.startswith("|")
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])}


def test_every_setting_read_from_the_environment_is_in_the_readme_table():
    read, documented = _settings_read(), _readme_table()
    assert len(read) > 50  # the reader sees the settings' reads
    assert sorted(read - documented) == []
    assert sorted(documented - read) == []  # and the table names nothing that is not read
