"""FastSelect renders what forms.Select renders (options, selection, attributes, escaping),
without the template engine."""

import re

import pytest
from django import forms

from tenants.widgets import FastSelect

pytestmark = pytest.mark.unit
CHOICES = [("", "All"), ("a", "Alpha"), ("b&c", "<b>Bravo</b> & co"), ("7", "Seven")]


def options(html: str) -> list[tuple[str, bool, str]]:
    return [(v, bool(sel), label) for v, sel, label in re.findall(
        r'<option value="([^"]*)"( selected)?>([^<]*(?:<[^/][^<]*)*)</option>', html)]


@pytest.mark.parametrize("value", ["", "a", "b&c", "7", "nope", None])
def test_same_options_and_selection_as_django(value):
    attrs = {"id": "id_x", "aria-describedby": "x_error"}
    fast = FastSelect(choices=CHOICES).render("x", value, attrs)
    slow = forms.Select(choices=CHOICES).render("x", value, attrs)
    assert options(fast) == options(slow.replace("\n", ""))
    assert 'name="x"' in fast and 'id="id_x"' in fast and 'aria-describedby="x_error"' in fast
    assert "<b>" not in fast and "&lt;b&gt;Bravo&lt;/b&gt; &amp; co" in fast
