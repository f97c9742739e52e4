"""The finance overview's filters: one form, so the page, the htmx swap and both exports
read the same validated values; and the statement's adjustment form."""

from __future__ import annotations

from functools import lru_cache

from django import forms
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from fleet.domain import Route
from tenants.audit import REASON_MAX
from tenants.fields import AsciiIntegerField
from tenants.markup import html_format, html_join
from tenants.widgets import FastSelect

from .models import StrandedPolicy
from .validation import adjustment_errors

SORT_CHOICES = [("amount", "Charge"), ("allocated", "Allocated"), ("used", "Used"),
                ("utilisation", "Utilisation"), ("name", "Name")]
MONTH_CHOICES = [("3", "3"), ("6", "6"), ("12", "12")]


class OverviewFilters(forms.Form):
    q = forms.CharField(required=False, max_length=120, strip=True, label="Tenant",
                        widget=forms.TextInput(attrs={"placeholder": "name or slug"}))
    route = forms.ChoiceField(required=False, choices=[("", "All")] + list(Route.choices),
                              widget=FastSelect)
    months = forms.TypedChoiceField(required=False, choices=MONTH_CHOICES, coerce=int,
                                    empty_value=6, widget=FastSelect)
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES, widget=FastSelect)

    DEFAULTS = {"q": "", "route": "", "months": 6, "sort": "amount"}

    def values(self) -> dict:
        """The cleaned filters; a field with a bad value falls back to its default (the
        page says which one was ignored)."""
        self.is_valid()
        out = dict(self.DEFAULTS)
        for name, value in getattr(self, "cleaned_data", {}).items():
            if value not in (None, "") and name not in self.errors:
                out[name] = value
        out["q"] = out["q"].replace("\x00", "").lower()
        return out

    def query(self, **overrides) -> str:
        """The validated filters as a query string, for links that keep them."""
        data = {**self.values(), **overrides}
        return urlencode({k: v for k, v in data.items() if v not in ("", None)})

    def shown(self) -> SafeString:
        """The filter bar's labelled fields with what is in force: the values given, or
        where one was ignored, every field's value in force (the page says which)."""
        values = ({k: str(v) for k, v in self.values().items()} if self.errors
                  else {name: self.data.get(name) for name in self.fields})
        return filter_fields(tuple(values.items()))


@lru_cache(maxsize=256)
def filter_fields(values: tuple[tuple[str, str | None], ...]) -> SafeString:
    """OverviewFilters' fields bound to `values`, each in its label, as the filter bar shows
    them. The markup depends on the values alone (the choices are constants), so each set
    is rendered once per process: four widgets through the form renderer were a tenth of
    the overview's time."""
    form = OverviewFilters(dict(values))
    return html_join(html_format("<label>{} {}</label>", field.label, field) for field in form)


class AdjustmentForm(forms.Form):
    """An adjustment to a closed month, checked by billing.validation (the API serializer
    and the service ask the same function). `confirm` is the page's checkbox, offered once
    an amount needs confirming; its value repeats the amount it confirms."""

    # Not `required`: billing.validation says what is missing, as it does for the API.
    amount = forms.CharField(max_length=40, required=False,
                             label="Amount (negative for a credit)",
                             widget=forms.TextInput(attrs={"inputmode": "decimal"}))
    reason = forms.CharField(max_length=REASON_MAX, required=False, label="Reason",
                             help_text="Kept in the audit trail and printed on the statement.")
    confirm = forms.CharField(required=False, max_length=40)

    def __init__(self, *args, final_before, **kwargs):
        super().__init__(*args, **kwargs)
        self.final_before = final_before
        self.verdict = None

    def clean(self):
        data = super().clean()
        self.verdict = adjustment_errors(
            amount_value=self.data.get("amount", ""), reason=self.data.get("reason", ""),
            confirm=data.get("confirm", ""), final_before=self.final_before)
        for name, message in self.verdict.errors.items():
            if name not in self.errors:
                self.add_error(name, message)
        return data


class StrandedAnswerForm(forms.Form):
    """The lead's answer to a finding, in one step: accept, or keep it with a reason."""

    decision = forms.ChoiceField(choices=[("accept", "Accept"), ("decline", "Keep")])
    reason = forms.CharField(required=False, max_length=REASON_MAX, strip=True,
                             widget=forms.Textarea(attrs={"rows": 2}))

    def clean(self):
        data = super().clean()
        if data.get("decision") == "decline" and not data.get("reason"):
            self.add_error("reason", "Say why it is kept: the reason stays in the audit trail.")
        return data


class StrandedPolicyForm(forms.Form):
    """A tenant's answer to findings nobody answers (billing.stranded_services.policy_set
    checks the same again)."""

    when_unanswered = forms.ChoiceField(choices=StrandedPolicy.WhenUnanswered.choices,
                                        label="When nobody answers")
    grace_days = AsciiIntegerField(min_value=1, max_value=90, label="Grace period (days)")
