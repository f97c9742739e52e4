"""The one family of domain refusals: a message for the person and, where it is about a
field, that field's message. Services raise them; pages show `message`, the API answers
`{"message", "extra": {"fields"}}` with 400 (portal/api.py maps the family once)."""

from __future__ import annotations


class DomainError(Exception):
    def __init__(self, message: str, *, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}

    def __str__(self) -> str:
        return self.message
