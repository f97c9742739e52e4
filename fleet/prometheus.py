"""Asking Prometheus an instant or a range query (the DCGM exporter's series live there): one
client for billing's used device-hours and stranded-capacity series, and the ledger's
per-workload utilisation."""

from __future__ import annotations

import datetime as dt

import requests
from django.conf import settings


class PrometheusError(Exception):
    """Prometheus did not answer or refused; callers keep their work pending (never zero)."""

    retriable = True


def instant_query(query: str, at: dt.datetime, *, base_url: str | None = None) -> list[dict]:
    """The result vector of `query` evaluated at `at`: [{"metric": {...}, "value": [t, v]}]."""
    url = (base_url or settings.PROMETHEUS_URL).rstrip("/")
    try:
        response = requests.get(f"{url}/api/v1/query", params={
            "query": query, "time": f"{at.timestamp():.3f}"}, timeout=10)
        response.raise_for_status()
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {url} did not answer: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus refused the query: {body.get('error')}")
    return body["data"]["result"]


def range_query(query: str, start: dt.datetime, end: dt.datetime, step_seconds: int, *,
                base_url: str | None = None) -> list[dict]:
    """The result matrix of `query` over [start, end] at `step_seconds`:
    [{"metric": {...}, "values": [[t, v], ...]}] (billing's stranded-capacity series)."""
    url = (base_url or settings.PROMETHEUS_URL).rstrip("/")
    try:
        response = requests.get(f"{url}/api/v1/query_range", params={
            "query": query, "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}", "step": f"{step_seconds}s"}, timeout=30)
        response.raise_for_status()
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {url} did not answer: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus refused the query: {body.get('error')}")
    return body["data"]["result"]
