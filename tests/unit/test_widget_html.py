"""tenants.widget_html builds, byte for byte, what Django's widget templates render: for every
widget kind it covers, for generated names, values, attributes and choices (optgroups,
escaping, booleans), and for every field of every form the portal renders."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest
from django import forms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import billing.forms
import fleet.forms
import intake.forms
from portal.templatetags.form_fields import form_field
from tenants.models import Tenant
from tenants.widget_html import INPUTS, WIDGETS, widget_html
from tenants.widgets import ReadOnceModelChoiceField

pytestmark = pytest.mark.unit

# Text that exercises escaping: markup, quotes, ampersands, non-ASCII.
TEXT = st.text(alphabet=st.sampled_from(list("ab <>&\"'é7-_")), max_size=8)
ATTR_NAMES = st.sampled_from(["class", "placeholder", "data-x", "min", "step", "required",
                              "disabled", "aria-describedby", "id"])
ATTR_VALUES = st.one_of(TEXT, st.booleans(), st.integers(-5, 50), st.none())
ATTRS = st.dictionaries(ATTR_NAMES, ATTR_VALUES, max_size=4)
VALUE = st.one_of(st.none(), TEXT, st.integers(-3, 30), st.lists(TEXT, max_size=3))
CHOICE = st.tuples(st.one_of(TEXT, st.integers(0, 9)), TEXT)
CHOICES = st.lists(st.one_of(CHOICE, st.tuples(TEXT, st.lists(CHOICE, min_size=1, max_size=3))),
                   max_size=5)

INPUT_WIDGETS = [forms.TextInput, forms.NumberInput, forms.EmailInput, forms.URLInput,
                 forms.HiddenInput, forms.DateInput, forms.DateTimeInput, forms.TimeInput,
                 forms.SearchInput, forms.TelInput, forms.ColorInput, forms.CheckboxInput,
                 forms.PasswordInput]
CHOICE_WIDGETS = [forms.Select, forms.SelectMultiple, forms.RadioSelect,
                  forms.CheckboxSelectMultiple, forms.NullBooleanSelect]


DJANGO_RENDER = forms.Widget.render  # Django's own, through its widget templates


def django_render(widget, name, value, attrs):
    return DJANGO_RENDER(widget, name=name, value=value, attrs=attrs)


@pytest.fixture
def built_here(monkeypatch):
    """widget_html may not hand the widget back to Django: the markup compared is the one
    built here (a fallback would make the comparison pass without testing anything)."""
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} was rendered by Django's templates")

    monkeypatch.setattr(forms.Widget, "render", refuse)


def outcome(render, *args):
    """The markup, or the kind of error (a value Django cannot show fails the same way)."""
    try:
        return render(*args)
    except (TypeError, ValueError, AttributeError) as error:
        return type(error)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # a constant patch
@given(kind=st.sampled_from(INPUT_WIDGETS + [forms.Textarea]), name=TEXT, value=VALUE,
       attrs=ATTRS, own=ATTRS)
def test_inputs_and_textareas_are_djangos_markup(built_here, kind, name, value, attrs, own):
    assert outcome(widget_html, kind(attrs=own), name, value, dict(attrs)) == \
        outcome(django_render, kind(attrs=own), name, value, dict(attrs))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # a constant patch
@given(kind=st.sampled_from(CHOICE_WIDGETS), name=TEXT, value=VALUE, attrs=ATTRS,
       choices=CHOICES)
def test_selects_radios_and_checkbox_lists_are_djangos_markup(built_here, kind, name, value,
                                                              attrs, choices):
    def make():
        return kind() if kind is forms.NullBooleanSelect else kind(choices=choices)

    assert outcome(widget_html, make(), name, value, dict(attrs)) == \
        outcome(django_render, make(), name, value, dict(attrs))


def test_dates_are_formatted_as_django_formats_them(built_here):
    day = dt.date(2026, 12, 6)
    for kind in (forms.DateInput, forms.DateTimeInput):
        assert widget_html(kind(), "d", day, {}) == django_render(kind(), "d", day, {})
    assert 'value="' in widget_html(forms.DateInput(), "d", day, {})


def test_every_kind_covered_is_one_of_djangos_own_templates():
    kinds = INPUT_WIDGETS + [forms.Textarea] + CHOICE_WIDGETS
    covered = {k.template_name for k in kinds}
    assert covered <= INPUTS | set(WIDGETS)


class OwnTemplate(forms.TextInput):
    template_name = "partials/field.html"  # not one of Django's: Django renders it


def test_a_widget_with_a_template_of_its_own_is_left_to_django(monkeypatch):
    calls = []
    monkeypatch.setattr(OwnTemplate, "render", lambda self, **kw: calls.append(kw) or "own")
    assert widget_html(OwnTemplate(), "x", "1", {}) == "own" and calls


def portal_forms():
    """Every form class the portal's apps define."""
    for module in (intake.forms, fleet.forms, billing.forms):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, forms.BaseForm) and cls.__module__ == module.__name__:
                yield cls


@pytest.mark.django_db
def test_every_field_of_every_portal_form_renders_as_django_renders_it():
    seen = 0
    for cls in portal_forms():
        try:
            form = cls()
        except TypeError:  # a form that needs its context; its fields as declared
            form = None
        fields = form.fields if form is not None else cls.base_fields
        for name, field in fields.items():
            widget = field.widget
            for value in (None, "", "1", "<x>&", ["1"]):
                attrs = {"id": f"id_{name}", "aria-describedby": f"id_{name}_helptext"}
                assert widget_html(widget, name, value, dict(attrs)) == \
                    widget.render(name=name, value=value, attrs=dict(attrs)), (cls, name)
            seen += 1
    assert seen > 20


@pytest.mark.django_db
def test_a_tenant_choice_reads_its_tenants_once_and_offers_what_django_offers(
        django_assert_num_queries):
    for slug in ("b-corp", "a-corp"):
        Tenant.objects.create(slug=slug, name=slug.upper())
    tenants = Tenant.objects.order_by("name")
    for empty in (None, "—"):
        class Form(forms.Form):
            once = ReadOnceModelChoiceField(queryset=tenants, empty_label=empty)
            plain = forms.ModelChoiceField(queryset=tenants, empty_label=empty)

        form, count = Form(), tenants.count()
        with django_assert_num_queries(1):
            once = str(form["once"])
            assert len(form.fields["once"].widget.choices) == count + (empty is not None)
        assert once == str(form["plain"]).replace('"plain"', '"once"').replace(
            "id_plain", "id_once")
        Tenant.objects.create(slug=f"new-{empty is None}", name="NEW")  # a new form sees it
        assert "NEW" in str(Form()["once"])


class Sample(forms.Form):
    name = forms.CharField(help_text="Say <who> & why")
    kind = forms.ChoiceField(choices=[("a", "A"), ("b", "B")], widget=forms.RadioSelect,
                             required=False, label="Kind <of>")


def test_a_form_field_is_labelled_described_and_escaped():
    form = Sample(data={"name": "", "kind": "zzz"})
    form.is_valid()
    name = str(form_field(form["name"], **{"class": "wide"}))
    assert name.startswith('<div class="field has-error wide">')
    assert '<label for="id_name">Name <span class="req" aria-hidden="true">*</span></label>' \
        in name
    assert 'aria-describedby="id_name_helptext id_name_error"' in name
    assert '<small class="help" id="id_name_helptext">Say &lt;who&gt; &amp; why</small>' in name
    assert '<div class="errors" id="id_name_error"><small class="error" role="alert">' in name
    quiet = str(form_field(form["name"], nohelp=True))
    assert "helptext" not in quiet and 'aria-describedby="id_name_error"' in quiet
    kind = str(form_field(form["kind"]))
    assert kind.startswith('<fieldset class="field has-error" aria-describedby="id_kind_error">')
    assert "<legend>Kind &lt;of&gt;</legend>" in kind and kind.endswith("</fieldset>")
    assert "Select a valid choice. zzz is not one of the available choices." in kind
    fine = str(form_field(Sample()["kind"]))
    assert "aria-describedby" not in fine.split(">", 1)[0] and "has-error" not in fine
