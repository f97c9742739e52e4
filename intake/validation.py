"""The one validation of a capacity request's fields, for every way one is written.

The services call it before writing (so a third caller cannot skip it); the form and the API
serializer call it too, only to show the same messages on the right fields. Pure checks live
in intake.domain; this adds what needs the database (the MIG profiles and GPU models the
platform actually offers) and the text limits.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from fleet.models import Pool

from .domain import IntakeAnswers, validate_answers, validate_request_fields
from .models import CapacityRequest
from .selectors import answers_for, offered_mig_profiles

# The longest text kept in each field: the column's own length, read from the model (a
# second copy of the numbers got one wrong), and for the one text column a limit of its own.
JUSTIFICATION_LIMIT = 5000


def text_limits() -> dict[str, int]:
    limits = {f.name: f.max_length for f in CapacityRequest._meta.fields
              if f.name in ("title", "isolation_reference", "gpu_model", "workload_kind")}
    return {**limits, "justification": JUSTIFICATION_LIMIT}


TEXT_LIMITS = text_limits()


def request_field_errors(fields: dict[str, Any], *, new: bool,
                         today: dt.date | None = None) -> dict[str, list[str]]:
    """Field → messages for a request's answers (empty: valid). `fields` holds the request's
    editable fields (merged with the saved ones for an edit)."""
    today = today or timezone.localdate()
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        if message not in errors.setdefault(name, []):
            errors[name].append(message)

    for name, limit in TEXT_LIMITS.items():
        value = fields.get(name)
        if isinstance(value, str) and len(value) > limit:
            add(name, f"At most {limit} characters (this is {len(value)}).")
    profile = fields.get("mig_profile") or ""
    if profile:
        offered = [p.name for p in offered_mig_profiles()]
        if profile not in offered:
            add("mig_profile", f"{profile} is not offered here; choose one of "
                               f"{', '.join(offered)}.")
    model = fields.get("gpu_model") or ""
    if model:
        models = gpu_models_offered()
        if model not in models:
            add("gpu_model", f"No active pool has {model} GPUs; choose one of "
                             f"{', '.join(models) or 'the pools’ models'} or leave it empty.")
    draft = CapacityRequest(**{k: v for k, v in fields.items()
                               if k in {f.name for f in CapacityRequest._meta.fields}})
    answers: IntakeAnswers = answers_for(draft.answers(), model if model in
                                         gpu_models_offered() else "")
    for name, message in validate_answers(answers):
        add(name, message)
    for name, message in validate_request_fields(
            starts_on=fields.get("starts_on"), ends_on=fields.get("ends_on"),
            memory_gb=fields.get("memory_gb"), today=today, new=new):
        add(name, message)
    return {k: v for k, v in errors.items() if v}


def gpu_models_offered() -> list[str]:
    return sorted(set(Pool.objects.filter(active=True).values_list("gpu_model", flat=True)))


def normalised(fields: dict[str, Any]) -> dict[str, Any]:
    """What every writer stores the same way: evidence only for binding origins."""
    out = dict(fields)
    if out.get("isolation_origin") == "habitual":
        out["isolation_reference"] = ""
    return out
