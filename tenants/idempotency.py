"""Idempotent API writes: a retried POST with the same `Idempotency-Key` returns the first
answer instead of filing a second request (clients retry when an answer is lost, e.g. a web
worker killed after its transaction committed).

The key row is inserted at the start of the write's transaction: a concurrent retry waits
on the unique index until the first write commits (then replays its answer) or rolls back
(then runs as if first). Keys are per user; a key reused for a different write is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re

from django.conf import settings
from django.db import IntegrityError, transaction
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from .models import IdempotentResponse

HEADER = "Idempotency-Key"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII, as in the IETF draft's examples


class KeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = (f"This {HEADER} was already used for a different request; "
                      "use a new key for a new request.")


class KeyInvalid(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = f"{HEADER} must be 1-255 visible ASCII characters."


class Replay(Exception):
    def __init__(self, record: IdempotentResponse) -> None:
        self.record = record


def _fingerprint(request) -> str:
    digest = hashlib.sha256()
    digest.update(f"{request.method} {request.path}\n".encode())
    try:
        digest.update(request.body or b"")
    except Exception:  # a multipart body already streamed: its length stands in for it
        digest.update(request.headers.get("Content-Length", "").encode())
    return digest.hexdigest()


class IdempotentWritesMixin:
    """For DRF viewsets: unsafe methods with the header run in one transaction that also
    holds the key; the answer (anything but a server error) is stored with it."""

    def dispatch(self, request, *args, **kwargs):
        if request.method in UNSAFE and request.headers.get(HEADER):
            with transaction.atomic():
                response = super().dispatch(request, *args, **kwargs)
                if getattr(response, "status_code", 500) >= 500:
                    transaction.set_rollback(True)  # nothing kept: a retry runs afresh
                return response
        return super().dispatch(request, *args, **kwargs)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        key = request.headers.get(HEADER)
        self._idempotency = None
        if request.method not in UNSAFE or not key:
            return
        if not KEY_RE.fullmatch(key):
            raise KeyInvalid()
        fingerprint = _fingerprint(request._request)
        try:
            with transaction.atomic():
                self._idempotency = IdempotentResponse.objects.create(
                    user=request.user, key=key, fingerprint=fingerprint)
        except IntegrityError:
            record = IdempotentResponse.objects.get(user=request.user, key=key)
            if record.fingerprint != fingerprint:
                raise KeyReused() from None
            raise Replay(record) from None

    def handle_exception(self, exc):
        if isinstance(exc, Replay):
            record = exc.record
            data = json.loads(record.body) if record.body else None
            response = Response(data, status=record.status_code or 200)
            response["Idempotent-Replayed"] = "true"
            return response
        return super().handle_exception(exc)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        record = getattr(self, "_idempotency", None)
        if record is not None and response.status_code < 500:
            record.status_code = response.status_code
            record.body = json.dumps(response.data, cls=JSONEncoder) \
                if response.data is not None else ""
            record.save(update_fields=["status_code", "body"])
        return response


def forget_old_keys(now) -> int:
    """Keys are kept for PORTAL_IDEMPOTENCY_HOURS (a retry comes within minutes)."""
    cutoff = now - dt.timedelta(hours=settings.PORTAL_IDEMPOTENCY_HOURS)
    deleted, _ = IdempotentResponse.objects.filter(created_at__lt=cutoff).delete()
    return deleted
