"""API glue: one exception handler turns domain refusals into {"message", "extra"}."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    from intake.services import IntakeError

    if isinstance(exc, IntakeError):
        return Response({"message": exc.message, "extra": {"fields": exc.fields}},
                        status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"message": str(response.data["detail"]), "extra": {}}
    elif response is not None and isinstance(response.data, dict):
        response.data = {"message": "Some fields are not valid.",
                         "extra": {"fields": response.data}}
    return response
