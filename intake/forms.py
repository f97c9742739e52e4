"""Forms validate and shape; the decisions stay in domain.py and the writes in services.py."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.utils import timezone

from fleet.models import Route
from tenants.audit import REASON_MAX
from tenants.fields import AsciiIntegerField
from tenants.models import Tenant, slug_validator
from tenants.widgets import FastSelect, ReadOnceModelChoiceField, TenantPicker

from .domain import Fill, IntakeAnswers, Isolation, Status
from .models import STATUS_CHOICES, CapacityRequest
from .selectors import ReviewQueueFilter, active_pools, answers_for, offered_mig_profiles
from .services import EDITABLE_FIELDS
from .validation import request_field_errors


def _mig_choices() -> list[tuple[str, str]]:
    """Only what the platform can give (intake.selectors.offered_mig_profiles)."""
    return [("", "— or give the memory per replica —")] + [
        (p.name, f"{p.name} ({p.compute_slices}/7 of a device, {p.memory_gb} GB)")
        for p in offered_mig_profiles()]


class CapacityRequestForm(forms.ModelForm):
    tenant = ReadOnceModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    mig_profile = forms.ChoiceField(choices=_mig_choices, required=False, label="MIG profile")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")

    class Meta:
        model = CapacityRequest
        fields = ["tenant", *EDITABLE_FIELDS]
        # Numbers people type are ASCII digits: one rule with the API (tenants.fields).
        field_classes = {name: AsciiIntegerField for name in (
            "whole_devices", "replicas", "memory_gb", "expected_utilisation")}
        widgets = {
            "isolation_origin": forms.RadioSelect,
            "device_fill": forms.RadioSelect,
            "starts_on": forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
            "ends_on": forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
            "justification": forms.Textarea(attrs={"rows": 3}),
            "expected_utilisation": forms.NumberInput(attrs={"min": 0, "max": 100, "step": 5}),
        }
        labels = {
            "isolation_origin": "Where does the need for separation come from?",
            "isolation_reference": "Evidence (contract id, regulation or data class)",
            "device_fill": "How much of one device does one replica fill?",
            "whole_devices": "Whole devices",
            "replicas": "Replicas",
            "memory_gb": "GPU memory per replica (GB)",
            "starts_on": "Start",
            "ends_on": "End (last day, optional)",
            "expected_utilisation": "Expected utilisation (%)",
        }
        help_texts = {
            "isolation_reference": "Required for contractual and regulatory boundaries.",
            "ends_on": "Leave empty for an open-ended allocation.",
            "replicas": "One MIG slice each on the shared MIG route; one whole device each "
                        "behind a contractual or regulatory boundary.",
        }

    def saved_answers(self) -> dict:
        """The initial values (what the saved request answers) as submitted data: the edit
        page previews them before anything is typed."""
        data = {}
        for name, field in self.fields.items():
            value = self.get_initial_for_field(field, name)
            if value is not None:
                data[name] = value.pk if hasattr(value, "pk") else value
        return data

    def __init__(self, *args, tenants=None, offered=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants if tenants is not None else Tenant.objects.none()
        self.fields["tenant"].offered = offered  # the same tenants, read already
        models = sorted({pool.gpu_model for pool in active_pools()})  # kept while reading
        self.fields["gpu_model"].choices = [("", "Any model the route's pool offers")] + [
            (m, m) for m in models]
        self.fields["isolation_origin"].choices = [
            c for c in self.fields["isolation_origin"].choices if c[0]]
        self.fields["device_fill"].choices = [
            c for c in self.fields["device_fill"].choices if c[0]]
        for name in ("whole_devices", "replicas", "memory_gb"):
            self.fields[name].required = False
            self.fields[name].widget.attrs.update({"min": 0})
        if self.instance.pk:
            self.fields["tenant"].disabled = True
        if not self.is_bound and not self.instance.pk:
            self.initial.setdefault("starts_on", timezone.localdate())

    def clean(self):
        data = super().clean()
        for name in ("whole_devices", "replicas", "memory_gb"):
            if data.get(name) is None:
                data[name] = 0
        if data.get("isolation_origin") == "habitual":
            data["isolation_reference"] = ""  # evidence belongs to binding origins only
        # The service's own validation, shown on the fields (intake.validation).
        fields = {name: data.get(name) for name in EDITABLE_FIELDS if name in data}
        if self.instance.pk:
            fields = {name: getattr(self.instance, name) for name in EDITABLE_FIELDS} | fields
        for name, messages in request_field_errors(fields, new=not self.instance.pk).items():
            if name in self.fields and name not in self.errors:
                self.add_error(name, " ".join(messages))
        return data

    def answers(self) -> IntakeAnswers:
        """Answers from whatever parsed cleanly, so the preview works on a half-filled form."""
        data = getattr(self, "cleaned_data", {}) or {}
        iso = data.get("isolation_origin") or self.data.get("isolation_origin")
        fill = data.get("device_fill") or self.data.get("device_fill")

        def number(name: str) -> int:
            value = data.get(name)
            if value is None:
                try:
                    value = int(self.data.get(name) or 0)
                except (TypeError, ValueError):
                    value = 0
            return max(0, int(value))

        return answers_for(IntakeAnswers(
            isolation=Isolation(iso) if iso in Isolation._value2member_map_ else None,
            fill=Fill(fill) if fill in Fill._value2member_map_ else None,
            reference=str(data.get("isolation_reference") or
                          self.data.get("isolation_reference") or ""),
            whole_devices=number("whole_devices"),
            replicas=number("replicas"),
            mig_profile=str(data.get("mig_profile") or self.data.get("mig_profile") or ""),
            memory_gb=number("memory_gb"),
        ), str(data.get("gpu_model") or self.data.get("gpu_model") or ""))

    def service_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in EDITABLE_FIELDS}


class DecisionForm(forms.Form):
    ACTIONS = [("approve", "Approve"), ("request_changes", "Request changes"),
               ("deny", "Deny")]
    action = forms.ChoiceField(choices=ACTIONS, widget=forms.RadioSelect)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=REASON_MAX,
                             help_text="Shown to the requester and kept in the audit trail.",
                             error_messages={"required": "Give a reason: it is shown to the "
                                                         "requester and audited."})
    override_route = forms.ChoiceField(
        choices=[("", "Keep the matrix route")] + list(Route.choices), required=False,
        label="Override the route")
    override_reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False,
                                      max_length=REASON_MAX, label="Why override")

    def __init__(self, *args, objects_url: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        if objects_url:  # choosing a route fetches the objects approval would create under it
            self.fields["override_route"].widget.attrs.update({
                "hx-get": objects_url, "hx-trigger": "change", "hx-target": "#objects",
                "hx-swap": "outerHTML", "aria-controls": "objects"})

    def clean(self):
        data = super().clean()
        if data.get("override_route") and data.get("action") != "approve":
            self.add_error("override_route", "A route can only be overridden when approving.")
        if data.get("override_route") and not (data.get("override_reason") or "").strip():
            self.add_error("override_reason", "Overriding the route needs a written reason.")
        return data


class TenantBySlugField(forms.ModelChoiceField):
    """A tenant named by its slug; what cannot be a slug is refused before any lookup."""

    def to_python(self, value):
        if value not in self.empty_values and not slug_validator.regex.match(str(value)):
            raise forms.ValidationError(self.error_messages["invalid_choice"],
                                        code="invalid_choice", params={"value": value})
        return super().to_python(value)


class ReviewQueueFilterForm(forms.Form):
    """The review queue's filters, read from the query string: the one validation path for
    the queue page, the review page's "Next in queue" and the redirect after a decision.

    Every field is optional; what is left out takes the default (submitted, every route and
    tenant, any age, oldest first, page 1)."""

    AGES = [("", "Any age"), ("1", "Over 1 day"), ("3", "Over 3 days"), ("7", "Over 7 days"),
            ("14", "Over 14 days"), ("30", "Over 30 days")]
    SORTS = [("oldest", "Oldest first"), ("newest", "Newest first")]
    DEFAULTS = {"status": Status.SUBMITTED.value, "sort": "oldest"}

    status = forms.ChoiceField(
        required=False,
        choices=[c for c in STATUS_CHOICES if c[0] == Status.SUBMITTED.value]
        + [c for c in STATUS_CHOICES if c[0] != Status.SUBMITTED.value]
        + [("all", "All statuses")], widget=FastSelect)
    route = forms.ChoiceField(choices=[("", "All routes"), *Route.choices], required=False,
                              widget=FastSelect)
    tenant = TenantBySlugField(
        queryset=Tenant.objects.order_by("name"), to_field_name="slug", required=False,
        empty_label="All tenants", widget=TenantPicker,
        error_messages={"invalid_choice": "No tenant has the slug “%(value)s”."})
    older_than = forms.TypedChoiceField(choices=AGES, coerce=int, empty_value=None,
                                        required=False, label="Waiting", widget=FastSelect)
    sort = forms.ChoiceField(choices=SORTS, required=False, label="Order", widget=FastSelect)
    page = AsciiIntegerField(min_value=1, required=False)

    def filters(self) -> ReviewQueueFilter:
        """The validated filter (call after is_valid())."""
        data = self.cleaned_data
        status = data.get("status") or self.DEFAULTS["status"]
        tenant = data.get("tenant")
        return ReviewQueueFilter(
            status="" if status == "all" else status, route=data.get("route") or "",
            tenant_id=tenant.pk if tenant else None,
            older_than_days=data.get("older_than"),
            newest_first=data.get("sort") == "newest")

    def query_string(self, **extra) -> str:
        """The validated filter as a query string, defaults left out (page too, unless
        given): what links to the queue, into a review and back carry."""
        data = self.cleaned_data
        pairs = {"status": data.get("status"), "route": data.get("route"),
                 "tenant": data["tenant"].slug if data.get("tenant") else "",
                 "older_than": data.get("older_than"), "sort": data.get("sort"), **extra}
        return urlencode({k: v for k, v in pairs.items()
                          if v not in (None, "") and self.DEFAULTS.get(k) != v})

    def error_list(self) -> list[tuple[str, str, str]]:
        """(field id, label, messages) per refused field, for the message the page shows;
        the id names the element a select's aria-describedby points at (`<id>_error`)."""
        return [(self[name].auto_id, self[name].label, " ".join(errors))
                for name, errors in self.errors.items() if name in self.fields]
