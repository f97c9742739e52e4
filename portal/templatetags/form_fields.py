"""One field's widget for partials/field.html, its aria-describedby naming only what exists.

Django (5.0+) points a widget's aria-describedby at `<id>_helptext` whenever the field has
help text and at `<id>_error` whenever it has errors, whether or not the template renders
elements with those ids. The partial renders them (help can be left out with `nohelp`), so
the widget names exactly the ones the partial renders.
"""

from __future__ import annotations

from django import template

from tenants.widget_html import widget_html

register = template.Library()


def described_by(field, *, show_help: bool = True) -> str:
    """The ids of the help and error elements partials/field.html renders for `field`."""
    ids = []
    if field.auto_id and show_help and field.help_text:
        ids.append(f"{field.auto_id}_helptext")
    if field.auto_id and field.errors:
        ids.append(f"{field.auto_id}_error")
    return " ".join(ids)


@register.simple_tag
def field_describedby(field, nohelp=False) -> str:
    return described_by(field, show_help=not nohelp)


@register.simple_tag
def field_widget(field, nohelp=False) -> str:
    """The widget as BoundField.as_widget renders it, with aria-describedby from
    `described_by` (none when nothing is rendered to describe it). A radio or checkbox
    group gets none: it sits in a fieldset, and the fieldset is described instead."""
    widget = field.field.widget
    if field.field.localize:
        widget.is_localized = True
    attrs = field.build_widget_attrs({}, widget)
    attrs.pop("aria-describedby", None)
    ids = described_by(field, show_help=not nohelp)
    if ids and not field.use_fieldset:
        attrs["aria-describedby"] = ids
    if field.auto_id and "id" not in widget.attrs:
        attrs.setdefault("id", field.auto_id)
    return widget_html(widget, field.html_name, field.value(), attrs,
                       renderer=field.form.renderer)
