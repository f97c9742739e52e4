"""Form widgets that render without the template engine, for filters with long option lists
(every tenant): Django's Select renders each option through a template, ~0.1 ms apiece; and
a ModelChoiceField that reads its queryset once per form. The tenant filters' options are
kept across reading requests until a tenant is written (tenant_options)."""

from __future__ import annotations

import pickle

from django import forms
from django.forms.models import ModelChoiceIterator
from django.forms.utils import flatatt
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from .kept_reads import kept_across_requests
from .models import Tenant


class FastSelect(forms.Select):
    """A <select> built in Python: same name, id, attributes and selected option as
    forms.Select, a fraction of the cost."""

    def render(self, name, value, attrs=None, renderer=None):
        final = self.build_attrs(self.attrs, attrs or {})
        final["name"] = name
        chosen = {str(v) for v in self.format_value(value)}
        options = format_html_join(
            "", "<option value=\"{}\"{}>{}</option>",
            ((str(v), " selected" if str(v) in chosen else "", label)
             for v, label in self._flat_choices()))
        return format_html("<select{}>{}</select>", flatatt(final), options)

    def _flat_choices(self):
        for value, label in self.choices:
            if isinstance(label, list | tuple):  # optgroups: not used by the filters
                yield from label
            else:
                yield (getattr(value, "value", value), label)


# Up to this many tenants a filter offers them all in a <select>; beyond, the list would be
# the page (5,000 options at 10x the benchmark's size), so the filter takes a typed slug.
PICKER_MAX_OPTIONS = 200


@kept_across_requests(Tenant)
def tenant_options(scope: tuple[int, ...] | None) -> tuple[tuple[str, str], ...] | None:
    """The tenants of `scope` (tenants.access.tenant_scope; None: every tenant) as (slug,
    name) in name order, or None when there are more than a filter offers."""
    tenants = Tenant.objects.order_by("name", "pk")
    if scope is not None:
        tenants = tenants.filter(pk__in=scope)
    rows = tuple(tenants.values_list("slug", "name")[:PICKER_MAX_OPTIONS + 1])
    return None if len(rows) > PICKER_MAX_OPTIONS else rows


class TenantPicker(FastSelect):
    """Every tenant in a <select> while they are few; a search box for the slug when many
    (the page stays the same size whatever the number of tenants). Its field's values are
    slugs (to_field_name="slug") and its labels the tenants' names. It offers every tenant,
    whatever its field's queryset: for the platform admins' forms only (a scoped filter
    uses tenant_filter_html with the reader's tenant scope)."""

    def render(self, name, value, attrs=None, renderer=None):
        if tenant_options(None) is not None:
            return super().render(name, value, attrs, renderer)
        final = self.build_attrs(self.attrs, attrs or {})
        final.update(name=name, type="search", placeholder="tenant slug",
                     pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?", autocomplete="off")
        chosen = next(iter(self.format_value(value)), "")
        return format_html("<input{} value=\"{}\">", flatatt(final), chosen)

    def _flat_choices(self):
        empty = getattr(getattr(self.choices, "field", None), "empty_label", None)
        if empty is not None:
            yield ("", empty)
        yield from tenant_options(None) or ()


def tenant_filter_html(scope: tuple[int, ...] | None, chosen: str) -> str:
    """The same choice for a hand-written filter over the tenants of `scope`: options, or a
    search box."""
    options = tenant_options(scope)
    if options is None:
        return format_html('<input type="search" name="tenant" value="{}" '
                           'placeholder="tenant slug" autocomplete="off">', chosen)
    html = format_html_join("", "<option value=\"{}\"{}>{}</option>", (
        (slug, " selected" if slug == chosen else "", name) for slug, name in options))
    return mark_safe(format_html('<select name="tenant"><option value="">All</option>{}'  # noqa: S308
                                 "</select>", html))


class ReadOnceChoiceIterator(ModelChoiceIterator):
    """A ModelChoiceField's choices read once per form: Django reads the queryset again on
    every pass over them (the widget's `required` check, then the options, each a cursor of
    its own). The field makes a new iterator whenever its queryset is set, and a form copies
    its fields (and so sets it) per instance, so no rows outlive the form."""

    def rows(self) -> list:
        if "_rows" not in self.__dict__:
            offered = self.field.offered
            self._rows = list(self.queryset if offered is None else offered)
        return self._rows

    def __iter__(self):
        if self.field.empty_label is not None:
            yield ("", self.field.empty_label)
        for obj in self.rows():
            yield self.choice(obj)

    def __len__(self) -> int:
        return len(self.rows()) + (self.field.empty_label is not None)

    def __bool__(self) -> bool:
        return self.field.empty_label is not None or bool(self.rows())


class ReadOnceModelChoiceField(forms.ModelChoiceField):
    """`offered`: the queryset's rows when the view has them already (a kept read of the
    same rows, tenants_of): the options are those, not read again. A value sent is still
    looked up in the queryset."""

    iterator = ReadOnceChoiceIterator
    offered: list | None = None


@kept_across_requests(Tenant, freeze=pickle.dumps, thaw=pickle.loads)
def tenants_of(ids: tuple[int, ...]) -> list[Tenant]:
    """The tenants `ids` (a lead's: tenants.access.Roles.lead_of, sorted) in the order a
    Tenant queryset lists them (by name), kept until a tenant is written."""
    return list(Tenant.objects.filter(pk__in=ids).order_by("name", "pk"))

