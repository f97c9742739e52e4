"""tenants.timeline: the history cards' timeline, built in Python, is the template loop it
replaced, character for character, for any events, in any reader's time zone."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from types import SimpleNamespace

import pytest
from django.template import Context, Engine, Library, Template
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from tenants.timeline import action_label, timeline_items

pytestmark = pytest.mark.unit

# The loop as templates/partials/timeline.html had it.
LOOP = (
    '{% load portal_extras %}{% for e in events %}\n  <li><div class="t-head"><strong>'
    '{{ e.action|action_label }}</strong>{% if e.to_state %} <span class="muted">'
    '{{ e.from_state|default:"—" }} → {{ e.to_state }}</span>{% endif %}</div>\n'
    '  <div class="t-meta"><time datetime="{{ e.at|date:\'c\' }}">{{ e.at|date:"Y-m-d H:i" }}'
    '</time> · {{ e.actor_name }}</div>\n  <p>{{ e.reason }}</p></li>\n'
    '{% empty %}<li class="muted">No events yet.</li>{% endfor %}')

words = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
events = st.lists(st.builds(
    SimpleNamespace,
    at=st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1),
                    timezones=st.just(dt.UTC)),
    action=st.sampled_from(["request.approve", "request.request_changes", "allocation.active",
                            "node.changed", "created", ""]) | words,
    from_state=st.sampled_from(["", "draft", "submitted"]) | words,
    to_state=st.sampled_from(["", "active", "approved"]) | words,
    actor_name=words, reason=words), max_size=6)


# The filter the loop used, as the library had it (now tenants.timeline.action_label).
register = Library()
register.filter("action_label", action_label)


def engine_loop() -> Template:
    return Engine(libraries={"portal_extras": "tests.unit.test_timeline"}).from_string(LOOP)


@settings(max_examples=120, deadline=None)
@given(events=events, zone=st.sampled_from(["UTC", "Europe/Amsterdam", "America/New_York",
                                            "Asia/Kolkata"]))
def test_the_timeline_is_the_template_loop(events, zone):
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        want = engine_loop().render(Context({"events": events}))
        assert timeline_items(events) == want


def test_every_value_is_escaped():
    e = SimpleNamespace(at=dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC), action="request.x",
                        from_state="", to_state="<b>", actor_name="<script>", reason="a & b")
    html = timeline_items([e])
    assert "<script>" not in html and "<b>" not in html and "a &amp; b" in html
    assert "— → &lt;b&gt;" in html
