"""Schemathesis against the live server's own OpenAPI schema, signed in as a team lead and
as a platform admin: no server error on any input it generates, and every answer is one the
schema documents (status code, content type, body shape).

Examples per operation: PORTAL_FUZZ_EXAMPLES (default 25; the issue's deep run used 200).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.factories import make_request, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "25"))
CSRF = "f" * 32  # a CSRF secret sent as both cookie and header, as a browser would
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection]


@pytest.fixture
def seeded(tenant, other_tenant, lead, other_lead, admin_user, pools):
    # Something to find: a request of each tenant (ids 1.. are where fuzzing looks first).
    make_request(tenant, lead, submit=True, title="Fuzz acme")
    make_request(other_tenant, other_lead, title="Fuzz globex")


def _signed_in(user) -> dict[str, str]:
    return {"Cookie": f"sessionid={session_cookie(user)}; csrftoken={CSRF}",
            "X-CSRFToken": CSRF}


def _fuzz(base_url: str, headers: dict[str, str]) -> list[str]:
    """Every operation of the live schema; the failures, one line each (all of them, not
    just the first)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/schema/")
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

        try:
            run()
        except Exception as exc:  # a check failed: keep it, go on with the next operation
            failures.append(f"{operation.method.upper()} {operation.path}: "
                            f"{str(exc).strip()[:1500]}")
    return failures


@pytest.mark.parametrize("who", ["lead", "admin_user"])
def test_the_api_answers_as_documented(live_server, seeded, request, who):
    failures = _fuzz(live_server.url, _signed_in(request.getfixturevalue(who)))
    assert not failures, "\n\n".join(failures)
