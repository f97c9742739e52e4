"""The finance overview's filters: one form, so the page, the htmx swap and both exports
read the same validated values."""

from __future__ import annotations

from django import forms
from django.utils.http import urlencode

from fleet.domain import Route
from tenants.widgets import FastSelect

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
