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
    from portal.templatetags.portal_extras import action_label

    assert action_label("request.request_changes") == "Request changes"
    assert action_label("allocation.nodes_reserved") == "Allocation: nodes reserved"
    assert action_label("node.changed") == "Node: changed"
