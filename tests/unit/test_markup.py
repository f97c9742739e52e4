"""tenants.markup.html_format escapes as Django's format_html does, for any text, safe
markup, numbers, lazy translations and objects with `__html__`; what it returns is safe."""

from __future__ import annotations

from decimal import Decimal

from django.utils.functional import lazystr
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from hypothesis import given
from hypothesis import strategies as st

from tenants.markup import html_format, html_join

texts = st.text(alphabet=st.sampled_from(list("<>&\"'aé— {}%\n")) | st.characters(),
                max_size=30)


class Marked:
    def __init__(self, text: str):
        self.text = text

    def __html__(self) -> str:
        return f"<b>{self.text}</b>"


values = st.one_of(
    texts, texts.map(mark_safe), texts.map(lazystr), texts.map(Marked),
    st.integers(), st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.none(), st.booleans())


@given(template=st.sampled_from(["{}", "<td>{}</td>", '<a href="{}">{}</a>', "{} · {} {}"]),
       args=st.lists(values, min_size=3, max_size=3))
def test_html_format_is_format_html(template, args):
    args = args[: template.count("{}")]
    ours = html_format(template, *args)
    assert ours == format_html(template, *args)
    assert isinstance(ours, SafeString)


def test_every_special_character_is_escaped():
    assert html_format("<p>{}</p>", "<script>&\"'") == \
        "<p>&lt;script&gt;&amp;&quot;&#x27;</p>"
    assert html_format("{}", Decimal("1.50")) == "1.50"


@given(parts=st.lists(texts, max_size=5), separator=st.sampled_from(["", ", "]))
def test_joined_markup_is_safe_and_unchanged(parts, separator):
    safe = [html_format("<i>{}</i>", p) for p in parts]
    joined = html_join(safe, separator)
    assert isinstance(joined, SafeString)
    assert joined == separator.join(format_html("<i>{}</i>", p) for p in parts)
