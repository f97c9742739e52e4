"""API glue: one exception handler turns domain refusals into {"message", "extra"}."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tenants.errors import DomainError


def exception_handler(exc, context):
    if isinstance(exc, DomainError):  # every app's refusals, mapped once
        return Response({"message": exc.message, "extra": {"fields": exc.fields}},
                        status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"message": str(response.data["detail"]), "extra": {}}
    elif response is not None and isinstance(response.data, dict):
        response.data = {"message": "Some fields are not valid.",
                         "extra": {"fields": response.data}}
    return response


REFUSALS = {
    "400": "Not valid: `message` says what, `extra.fields` which field and why.",
    "401": "Not signed in: no session and no valid bearer token.",
    "403": "Signed in, but outside the caller's role.",
    "404": "No such object among the tenants the caller may see.",
    "422": "The Idempotency-Key was already used for a different request.",
}


def document_refusals(result, generator, request, public):
    """drf-spectacular post-processing: every operation documents the refusals it can
    answer, in the one shape the exception handler gives them ({message, extra})."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Refusal"] = {
        "type": "object", "required": ["message", "extra"],
        "properties": {"message": {"type": "string"},
                       "extra": {"type": "object", "additionalProperties": True}}}
    ref = {"$ref": "#/components/schemas/Refusal"}
    for path, operations in (result.get("paths") or {}).items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            codes = ["401", "403"]
            if "{" in path:
                codes.append("404")
            if method in ("post", "put", "patch") or op.get("parameters"):
                codes.append("400")
            if method in ("post", "put", "patch", "delete"):
                op.setdefault("parameters", []).append(IDEMPOTENCY_PARAMETER)
                codes.append("422")
            for code in codes:
                responses.setdefault(code, {"description": REFUSALS[code], "content": {
                    "application/json": {"schema": ref}}})
    return result


IDEMPOTENCY_PARAMETER = {
    "in": "header", "name": "Idempotency-Key", "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255,
               "pattern": "^[\\x21-\\x7e]+$"},
    "description": "Optional. A retry of this write with the same key (same user, same body) "
                   "returns the first answer, marked `Idempotent-Replayed: true`, instead of "
                   "doing the write again; keys are kept for PORTAL_IDEMPOTENCY_HOURS. "
                   "The same key with a different body is refused (422)."}
