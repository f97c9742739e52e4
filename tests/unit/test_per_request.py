"""tenants.per_request: a read kept for the rest of a reading request, never beyond it, and
never in a request that writes."""

from __future__ import annotations

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from tenants.per_request import PerRequestMemoMiddleware, once_per_request

pytestmark = pytest.mark.unit


def counting():
    calls = []

    @once_per_request
    def read(x, *, y=0):
        calls.append((x, y))
        return (x, y, len(calls))

    return read, calls


def test_a_reading_request_reads_once_per_arguments():
    read, calls = counting()

    def view(request):
        assert read(1) == read(1)
        assert read(2, y=3) == read(2, y=3)
        return HttpResponse("ok")

    PerRequestMemoMiddleware(view)(RequestFactory().get("/"))
    assert calls == [(1, 0), (2, 3)]
    # the next request reads again; outside any request every call reads
    PerRequestMemoMiddleware(view)(RequestFactory().get("/"))
    assert len(calls) == 4
    read(1)
    read(1)
    assert len(calls) == 6


def test_a_writing_request_reads_every_time():
    read, calls = counting()

    def view(request):
        read(1)
        read(1)
        return HttpResponse("ok")

    PerRequestMemoMiddleware(view)(RequestFactory().post("/"))
    assert calls == [(1, 0), (1, 0)]
