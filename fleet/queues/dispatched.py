"""Dispatched work (MultiKueue) in words: where a workload ran and why there, and what each
worker's copy says while it waits. Pure."""

from __future__ import annotations

from .truth import ADMITTED, PENDING, WorkloadFacts


def worker_view_words(copy: WorkloadFacts | None) -> str:
    """What one worker's copy of a dispatched workload says, for the pending view."""
    if copy is None:
        return "no copy there (not offered, or the worker is not answering)"
    if copy.state == PENDING:
        why = copy.pending_raw or copy.pending_reason or "no reason given yet"
        return f"waiting there: {why}"
    if copy.state == ADMITTED:
        return "admitted there"
    return copy.state


def dispatch_words(w: WorkloadFacts, name_of: dict[str, str] | None = None) -> str:
    """Where a dispatched workload runs and why there, for its timeline."""
    where = (name_of or {}).get(w.ran_on, w.ran_on)
    tried = f" (offered to {', '.join(w.nominated)})" if w.nominated else ""
    said = f": {w.dispatch_message}" if w.dispatch_message else ""
    return f"Admitted on worker {where}, the first to admit it{tried}{said}."
