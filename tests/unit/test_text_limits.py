"""A request's text limits are its columns' lengths (a copy of the numbers said 40 for a
20-character column), so a too-long answer is refused on its field, never by the database."""

import pytest

from intake.models import CapacityRequest
from intake.validation import TEXT_LIMITS

pytestmark = pytest.mark.unit


def test_every_limited_column_is_held_to_its_own_length():
    columns = {f.name: f.max_length for f in CapacityRequest._meta.fields
               if getattr(f, "max_length", None)}
    for name, limit in TEXT_LIMITS.items():
        if name in columns:
            assert limit == columns[name], name
    assert TEXT_LIMITS["workload_kind"] == 20
    assert set(TEXT_LIMITS) >= {"title", "isolation_reference", "gpu_model", "justification"}
