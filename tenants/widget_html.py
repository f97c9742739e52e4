"""A form widget's HTML without the template engine: the same markup Django's own widget
templates produce from the same context (`Widget.get_context`), built in Python.

Django renders every widget through its template engine, an include per option and per
attribute list; a form of fifteen fields costs more in those includes than the rest of its
page. The context still comes from Django (values formatted, options chosen, ids given), so
only the markup is rebuilt here, for the templates listed; any other widget (or a project
that overrides one of these templates) is rendered by Django. The property test in
tests/unit/test_widget_html.py holds the output equal to Django's for every widget kind
covered.
"""

from __future__ import annotations

from django.forms.renderers import get_default_renderer
from django.forms.widgets import Widget
from django.utils.safestring import SafeString, mark_safe

from .markup import escaped

W = "django/forms/widgets/"
# The templates that are input.html and nothing else (each is `{% include input.html %}`).
INPUTS = frozenset(f"{W}{kind}.html" for kind in (
    "input", "text", "number", "email", "url", "password", "hidden", "date", "datetime",
    "time", "search", "tel", "color", "checkbox"))


_e = escaped  # `{{ value }}` as the template engine autoescapes it


def _attrs(attrs: dict) -> str:
    """django/forms/widgets/attrs.html: False leaves an attribute out, True writes its name."""
    out = []
    for name, value in attrs.items():
        if value is not False:
            out.append(f" {_e(name)}" if value is True else f' {_e(name)}="{_e(str(value))}"')
    return "".join(out)


def _input(w: dict) -> str:
    value = "" if w["value"] is None else f' value="{_e(str(w["value"]))}"'
    return f'<input type="{_e(w["type"])}" name="{_e(w["name"])}"{value}{_attrs(w["attrs"])}>'


def _textarea(w: dict) -> str:
    return (f'<textarea name="{_e(w["name"])}"{_attrs(w["attrs"])}>\n'
            f'{_e(w["value"]) if w["value"] else ""}</textarea>')


def _option(o: dict) -> str:
    return (f'<option value="{_e(str(o["value"]))}"{_attrs(o["attrs"])}>{_e(o["label"])}'
            "</option>")


def _input_option(o: dict) -> str:
    # An included template keeps its file's last newline (only the whole render is stripped).
    if not o["wrap_label"]:
        return f"{_input(o)}\n\n"
    target = f' for="{_e(o["attrs"]["id"])}"' if o["attrs"].get("id") else ""
    return f"<label{target}>{_input(o)}\n {_e(o['label'])}</label>\n"


def _wrapped_option(o: dict) -> str:
    """radio_option.html and checkbox_option.html: input_option.html included, plus the
    includer's own last newline."""
    return f"{_input_option(o)}\n"


OPTIONS = {f"{W}select_option.html": _option, f"{W}input_option.html": _input_option,
           f"{W}radio_option.html": _wrapped_option,
           f"{W}checkbox_option.html": _wrapped_option}


def _groups(w: dict, *, opening: str, closing: str, option: str, kinds) -> str | None:
    """The optgroups of a choice widget: each named group opened and closed as given, each
    option rendered into `option` ({} for its markup); None when an option has a template
    of its own (not one of `kinds`)."""
    parts = []
    for group, options, _ in w["optgroups"]:
        if group:
            parts.append(opening.format(_e(group)))
        for o in options:
            render = OPTIONS.get(o["template_name"])
            if render not in kinds:
                return None
            parts.append(option.format(render(o)))
        if group:
            parts.append(closing)
    return "".join(parts)


def _select(w: dict) -> str | None:
    # "\n" after each option: the option template's last newline
    body = _groups(w, opening='\n  <optgroup label="{}">', closing="\n  </optgroup>",
                   option="\n  {}\n", kinds=(_option,))
    if body is None:
        return None
    return f'<select name="{_e(w["name"])}"{_attrs(w["attrs"])}>{body}\n</select>'


def _multiple_input(w: dict) -> str | None:
    """django/forms/widgets/multiple_input.html (radio buttons, checkbox lists)."""
    body = _groups(w, opening="\n  <div><label>{}</label>", closing="\n  </div>",
                   option="<div>\n    {}</div>", kinds=(_input_option, _wrapped_option))
    if body is None:
        return None
    wid, css = w["attrs"].get("id"), w["attrs"].get("class")
    head = "<div"
    if wid:
        head += f' id="{_e(wid)}"'
    if css:
        head += f' class="{_e(css)}"'
    return f"{head}>{body}\n</div>"


WIDGETS = {f"{W}textarea.html": _textarea, f"{W}select.html": _select,
           f"{W}radio.html": _multiple_input, f"{W}checkbox_select.html": _multiple_input}


def widget_html(widget, name: str, value, attrs: dict | None, renderer=None) -> SafeString:
    """`widget.render(name, value, attrs, renderer)`, built here when its template is one of
    Django's own listed above, the widget does not render itself and the project overrides
    none of those templates."""
    template = widget.template_name
    build = _input if template in INPUTS else WIDGETS.get(template)
    # A widget that renders itself (FastSelect, TenantPicker) keeps its own markup.
    if build is None or type(widget).render is not Widget.render or \
            overridden(template, renderer):
        return widget.render(name=name, value=value, attrs=attrs, renderer=renderer)
    html = build(widget.get_context(name, value, attrs)["widget"])
    if html is None:  # an option template of its own
        return widget.render(name=name, value=value, attrs=attrs, renderer=renderer)
    return mark_safe(html)  # noqa: S308 - every value above went through escaped()


_OVERRIDDEN: dict[tuple[type, str], bool] = {}


def overridden(template: str, renderer=None) -> bool:
    """Whether the form renderer finds this template anywhere but in Django's own forms
    package (a project's override is rendered by Django, so it keeps its markup)."""
    renderer = renderer or get_default_renderer()
    key = (type(renderer), template)
    if key not in _OVERRIDDEN:
        try:
            origin = str(renderer.get_template(template).origin.name)
        except Exception:  # noqa: BLE001 - not found here: let Django render it
            origin = ""
        _OVERRIDDEN[key] = "django/forms/templates/" not in origin.replace("\\", "/")
    return _OVERRIDDEN[key]
