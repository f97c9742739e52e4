"""One form field as every form of the portal shows it (`{% form_field form.x %}`): a label,
or for a radio or checkbox group a fieldset with the label as its legend; the widget; its
help and errors; aria-describedby naming only what exists. Built in Python (a template
include per field cost a tenth of a millisecond each, fifteen on the request form).

Django (5.0+) points a widget's aria-describedby at `<id>_helptext` whenever the field has
help text and at `<id>_error` whenever it has errors, whether or not the page renders
elements with those ids. This renders them (help can be left out with `nohelp`), so the
widget names exactly the ones rendered.
"""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from tenants.markup import html_format, html_join
from tenants.widget_html import widget_html

register = template.Library()


def described_by(field, *, show_help: bool = True) -> str:
    """The ids of the help and error elements form_field renders for `field`."""
    ids = []
    if field.auto_id and show_help and field.help_text:
        ids.append(f"{field.auto_id}_helptext")
    if field.auto_id and field.errors:
        ids.append(f"{field.auto_id}_error")
    return " ".join(ids)


REQUIRED = SafeString(' <span class="req" aria-hidden="true">*</span>')


@register.simple_tag
def form_field(field, nohelp=False, **options) -> SafeString:
    """The field whole; `class` adds a class to its wrapper (the request form's "radios",
    "when-binding"...), `nohelp` leaves its help text out."""
    errors = field.errors
    css = "field" + (" has-error" if errors else "") + \
        (f" {options['class']}" if options.get("class") else "")
    mark = REQUIRED if field.field.required else ""
    if field.use_fieldset:
        described = described_by(field, show_help=not nohelp)
        head = html_format('<fieldset class="{}"{}>\n  <legend>{}{}</legend>\n', css,
                           html_format(' aria-describedby="{}"', described)
                           if described else "", field.label, mark)
        tail = "</fieldset>"
    else:
        head = html_format('<div class="{}">\n  <label for="{}">{}{}</label>\n', css,
                           field.id_for_label, field.label, mark)
        tail = "</div>"
    parts = [head, "  ", field_widget(field, nohelp), "\n"]
    if field.help_text and not nohelp:
        parts.append(html_format('  <small class="help" id="{}_helptext">{}</small>\n',
                                 field.auto_id, field.help_text))
    if errors:
        parts.append(html_format('  <div class="errors" id="{}_error">{}</div>\n', field.auto_id,
                                 html_join(html_format('<small class="error" role="alert">{}'
                                                       "</small>", e) for e in errors)))
    parts.append(tail)
    return html_join(parts)


def field_widget(field, nohelp=False) -> SafeString:
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
