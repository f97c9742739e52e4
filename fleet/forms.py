"""Pool settings for platform admins, validated the way Kubernetes will read them."""

from __future__ import annotations

import json
import re

from django import forms
from django.conf import settings

from tenants.fields import AsciiIntegerField, decimal_for_column

from .inventory.clusters import REFERENCE_HELP, parse_credential_ref
from .models import Cluster, Pool, home_cluster_id
from .vocabulary import HOME_CLUSTER

# Kubernetes label syntax: optional DNS-subdomain prefix, a name of at most 63 characters.
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
LABEL_VALUE = re.compile(rf"^({_NAME})?$")


def label_errors(selector: dict) -> list[str]:
    errors = []
    for key, value in selector.items():
        if not isinstance(key, str) or not LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
            errors.append(f"{key!r} is not a valid label key")
        if not isinstance(value, str) or not LABEL_VALUE.match(value):
            errors.append(f"{value!r} is not a valid label value (for {key!r})")
    return errors


# Kueue's priorities are 32-bit integers; a LocalQueue name is a DNS subdomain.
PRIORITY_BOUNDS = (-(2**31), 2**31 - 1)
LOCAL_QUEUE_MAX = 253


class QueueNarrowForm(forms.Form):
    """Narrow an allocation's queue history to one LocalQueue and/or priority (the page's
    filter; the API's QueueQuerySerializer has the same bounds)."""

    local_queue = forms.CharField(required=False, max_length=LOCAL_QUEUE_MAX)
    priority = AsciiIntegerField(required=False, min_value=PRIORITY_BOUNDS[0],
                                 max_value=PRIORITY_BOUNDS[1])

    def narrowed(self) -> dict:
        if not self.is_valid():
            return {}
        return {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}


class PoolForm(forms.ModelForm):
    node_selector = forms.CharField(label="Node selector",
        widget=forms.Textarea(attrs={"rows": 3}), required=False,
        help_text='Node labels as JSON, e.g. {"aifactory.io/pool": "shared-h100"}')
    mig_profiles = forms.CharField(required=False, label="MIG profiles offered",
                                   help_text="Comma-separated, e.g. 1g.10gb,3g.40gb")

    class Meta:
        model = Pool
        fields = ["name", "gpu_model", "gpu_memory_gb", "devices_per_node", "capacity_devices",
                  "node_selector", "device_class", "mig_profiles", "cohort",
                  "borrowing_limit_devices", "active"]
        # No rate here: the pool's rate is the rate card in force (billing owns it).
        # Numbers in ASCII digits, within the model's bounds (Django's own field takes "١٠").
        field_classes = {name: AsciiIntegerField for name in (
            "gpu_memory_gb", "devices_per_node", "capacity_devices", "borrowing_limit_devices")}
        help_texts = {"capacity_devices": "What the pool may promise at most. Capacity itself is "
                      "counted from its validated, healthy nodes; a pool without nodes "
                      "promises nothing."}
        labels = {"gpu_model": "GPU model (GFD product label)", "gpu_memory_gb": "GPU memory (GB)",
                  "capacity_devices": "Ceiling (devices; 0: none)",
                  "mig_profiles": "MIG profiles offered", "cohort": "Kueue cohort",
                  "borrowing_limit_devices": "Borrowing limit (devices)"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["node_selector"] = json.dumps(self.instance.node_selector or {})
            self.initial["mig_profiles"] = ",".join(self.instance.mig_profiles or [])

    def clean_node_selector(self):
        raw = self.cleaned_data["node_selector"].strip() or "{}"
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("Give an object of label → value.")
        errors = label_errors(value)
        if errors:
            raise forms.ValidationError("; ".join(errors))
        return value

    def clean_mig_profiles(self):
        names = [p.strip() for p in self.cleaned_data["mig_profiles"].split(",") if p.strip()]
        bad = [p for p in names if not re.fullmatch(r"\d+g\.\d+gb", p)]
        if bad:
            raise forms.ValidationError(f"Not MIG profile names: {', '.join(bad)}")
        return names

    def clean(self):
        data = super().clean()
        if data.get("borrowing_limit_devices") and not data.get("cohort"):
            self.add_error("borrowing_limit_devices",
                           "A borrowing limit needs a cohort: Kueue rejects it without one.")
        return data


class PoolCreateForm(PoolForm):
    """A new pool: its slug and route (fixed afterwards) and its first rate."""

    # Text, checked by the one money parser (ASCII digits, at most four places, in range):
    # Django's DecimalField reads "٢٫٥" as 2.5.
    rate = forms.CharField(label="Rate per device-hour", max_length=20,
                           help_text="The first rate card, in force from the beginning; later "
                                     "changes are new cards. E.g. 2.45")

    class Meta(PoolForm.Meta):
        fields = ["slug", "name", "route", "cluster", *PoolForm.Meta.fields[1:]]
        labels = {**PoolForm.Meta.labels, "slug": "Short name (in URLs and labels)"}
        help_texts = {**PoolForm.Meta.help_texts,
                      "cluster": "Where its nodes are; fixed afterwards (its allocations are "
                                 "provisioned there)."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = Cluster.objects.live()
        self.fields["cluster"].empty_label = None
        self.fields["cluster"].required = False  # one cluster, or none chosen: the home one
        if not self.is_bound:
            self.initial.setdefault("cluster", home_cluster_id())

    def clean_cluster(self):
        return self.cleaned_data.get("cluster") or Cluster.objects.get(pk=home_cluster_id())

    def clean_rate(self):
        try:
            rate = decimal_for_column(self.cleaned_data["rate"], max_digits=10,
                                      decimal_places=4, what="The rate")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if rate < 0:
            raise forms.ValidationError("A rate cannot be negative.")
        return rate


class ClusterForm(forms.ModelForm):
    """A cluster's registration as admins edit it: how to reach it, never the credential."""

    class Meta:
        model = Cluster
        fields = ["name", "role", "region", "provider", "connection", "credential_ref",
                  "api_server", "multikueue_name", "dispatch_credential_ref"]
        labels = {"credential_ref": "Credential reference", "api_server": "API server",
                  "multikueue_name": "MultiKueueCluster name (workers; blank: the short name)",
                  "dispatch_credential_ref": "MultiKueue's credential reference (workers)"}
        help_texts = {"credential_ref": f"Where the portal's kubeconfig for it is: "
                                        f"{REFERENCE_HELP}. Never the credential itself.",
                      "api_server": "e.g. https://gpu-eu.example.net:6443. Given: the "
                                    "kubeconfig must point there.",
                      "dispatch_credential_ref": "The kubeconfig Kueue on the manager uses "
                                                 "to run work on this worker, as above "
                                                 "(blank: the portal's own). The portal "
                                                 "copies it into a Secret in Kueue's "
                                                 "namespace on the manager."}

    def clean_credential_ref(self):
        return self._reference("credential_ref")

    def clean_dispatch_credential_ref(self):
        return self._reference("dispatch_credential_ref")

    def _reference(self, field: str) -> str:
        text = self.cleaned_data[field].strip()
        if not text:
            return ""
        try:
            ref = parse_credential_ref(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if ref.kind == "secret" and ref.namespace != settings.PORTAL_NAMESPACE:
            # The portal may read Secrets of its own namespace only (deploy/rbac.yaml).
            raise forms.ValidationError(
                f"The portal reads cluster credentials from its own namespace only: "
                f"secret:{settings.PORTAL_NAMESPACE}/<name>.")
        return str(ref)

    def clean(self):
        data = super().clean()
        connection = data.get("connection")
        home = (self.instance.slug or data.get("slug")) == HOME_CLUSTER
        if connection == Cluster.Connection.CONFIGURED and not home:
            self.add_error("connection", "Only the home cluster uses the portal's own setting; "
                                         "give this one a kubeconfig, or a dry run.")
        if connection == Cluster.Connection.KUBECONFIG and not data.get("credential_ref") \
                and "credential_ref" not in self.errors:
            self.add_error("credential_ref", "A kubeconfig connection needs its reference.")
        if data.get("dispatch_credential_ref") and data.get("role") != Cluster.Role.WORKER \
                and "dispatch_credential_ref" not in self.errors:
            self.add_error("dispatch_credential_ref", "Only a MultiKueue worker is reached "
                                                      "by the manager: leave this blank.")
        if data.get("role") == Cluster.Role.MANAGER:
            other = Cluster.objects.live().filter(role=Cluster.Role.MANAGER).exclude(
                pk=self.instance.pk).first()
            if other is not None:
                self.add_error("role", f"{other.name} is the MultiKueue manager already: one "
                                       "manager dispatches to every worker.")
        return data


class ClusterCreateForm(ClusterForm):
    class Meta(ClusterForm.Meta):
        fields = ["slug", *ClusterForm.Meta.fields]
        labels = {**ClusterForm.Meta.labels, "slug": "Short name (in URLs and labels)"}
