"""What other apps have to say beside a tenant on the review queue (a standing stranded
finding: "holds 6 unused devices"). The composition root registers the providers at start
(portal.apps), so intake never imports the apps that know."""

from __future__ import annotations

from collections.abc import Callable, Collection

Provider = Callable[[Collection[int]], dict[int, str]]
_providers: list[Provider] = []


def register(provider: Provider) -> None:
    if provider not in _providers:
        _providers.append(provider)


def tenant_notes(tenant_ids: Collection[int]) -> dict[int, str]:
    """tenant id → every provider's note, joined; tenants with none are absent."""
    out: dict[int, list[str]] = {}
    for provider in _providers:
        for tenant_id, note in provider(tenant_ids).items():
            out.setdefault(tenant_id, []).append(note)
    return {t: " · ".join(notes) for t, notes in out.items()}
