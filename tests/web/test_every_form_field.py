"""A class of defect closed for every form at once: a number typed in another script's
digits ("١٠") or beyond what a column holds. Every form class of the portal is found by
import, and each of its number fields must be the ASCII-strict one with an upper bound;
money and rates are text read by the one money parser (tenants.fields.decimal_for_column)."""

from __future__ import annotations

import importlib
import inspect
from decimal import Decimal

import pytest
from django import forms

from tenants.fields import AsciiIntegerField

APPS = ("tenants", "fleet", "intake", "billing", "portal")


def portal_forms() -> list[type[forms.BaseForm]]:
    found = []
    for app in APPS:
        try:
            module = importlib.import_module(f"{app}.forms")
        except ModuleNotFoundError:
            continue
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if issubclass(obj, forms.BaseForm) and obj.__module__ == module.__name__]
    return found


def test_forms_are_found():
    names = {f.__name__ for f in portal_forms()}
    assert {"CapacityRequestForm", "PoolForm", "PoolCreateForm"} <= names, names


# What forms that take context beside their data are given (a keyword-only argument each).
CONTEXT = {"final_before": Decimal("1000.00")}


def _build(form_class, data):
    context = {name: CONTEXT[name] for name, p in
               inspect.signature(form_class.__init__).parameters.items()
               if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    try:
        return form_class(data, **context)
    except TypeError:  # forms that take their data second (a user first)
        return form_class(None, data, **context)


@pytest.mark.django_db
@pytest.mark.parametrize("form_class", portal_forms(), ids=lambda f: f.__name__)
def test_every_number_field_refuses_foreign_digits_and_sizes_no_column_holds(
        form_class, tenant, pools):
    """Behaviour, not attributes: each number field of each form, given "١٠" or
    99999999999, is refused on that field with a message (never stored, never a 500)."""
    form = _build(form_class, {})
    numbers = [name for name, field in form.fields.items()
               if isinstance(field, forms.IntegerField | forms.DecimalField)]
    for name, field in form.fields.items():
        assert not isinstance(field, forms.DecimalField), (
            f"{form_class.__name__}.{name}: Django's DecimalField reads non-ASCII digits; "
            "use text and decimal_for_column")
        if isinstance(field, forms.IntegerField):
            assert isinstance(field, AsciiIntegerField), f"{form_class.__name__}.{name}"
    for name in numbers:
        for value in ("١٠", "99999999999"):
            if name == "page" and value.isascii():
                continue  # a page past the end is the last page, not an error
            bound = _build(form_class, {name: value})
            assert not bound.is_valid()
            assert bound.errors.get(name), (form_class.__name__, name, value,
                                            dict(bound.errors))


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["١٠", "99999999999999", "1e3", "12.345"])
def test_an_adjustments_amount_is_read_by_the_money_parser(value):
    """The amount is text (the money parser, not Django's DecimalField): foreign digits,
    more than the column holds, exponents and sub-cent amounts are refused on the field."""
    from billing.forms import AdjustmentForm

    bound = _build(AdjustmentForm, {"amount": value, "reason": "goodwill credit"})
    assert not bound.is_valid()
    assert bound.errors.get("amount"), (value, dict(bound.errors))


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value", "words"), [
    ("devices_per_node", "١٠", "digits 0-9"),
    ("capacity_devices", "99999999999", "less than or equal to 100000"),
    ("gpu_memory_gb", "0", "greater than or equal to 1"),
    ("cohort", "Bad Cohort Name!", "Kubernetes name"),
    ("device_class", "GPU Class", "gpu.nvidia.com"),
    ("gpu_model", "H100 <script>", "GPU Feature Discovery"),
])
def test_the_pool_form_refuses_what_kueue_or_the_column_would(field, value, words, pools):
    from fleet.forms import PoolForm
    from fleet.models import Route

    pool = pools[Route.SHARED_POOL]
    data = {"name": pool.name, "gpu_model": pool.gpu_model, "gpu_memory_gb": 80,
            "devices_per_node": 8, "capacity_devices": 16, "node_selector": "{}",
            "device_class": "gpu.nvidia.com", "mig_profiles": "", "cohort": "shared",
            "borrowing_limit_devices": 0, "active": "on", field: value}
    form = PoolForm(data, instance=pool)
    assert not form.is_valid()
    assert words in " ".join(form.errors[field]), form.errors


@pytest.mark.django_db
def test_an_admin_creates_a_pool_with_its_first_rate(client, admin_user, lead):
    from fleet.inventory.pricing import pool_rate
    from fleet.models import Pool
    from tenants.models import AuditEvent

    data = {"slug": "shared-l40s", "name": "Shared L40S", "route": "shared_pool",
            "gpu_model": "NVIDIA-L40S", "gpu_memory_gb": 48, "devices_per_node": 8,
            "capacity_devices": 32, "node_selector": '{"aifactory.io/pool": "shared-l40s"}',
            "device_class": "gpu.nvidia.com", "mig_profiles": "", "cohort": "shared-l40s",
            "borrowing_limit_devices": 8, "active": "on", "rate": "1.85"}
    client.force_login(lead)
    assert client.post("/pools/new/", data).status_code == 403
    client.force_login(admin_user)
    bad = client.post("/pools/new/", {**data, "rate": "2.123456789"})
    assert bad.status_code == 200 and "at most 4 decimal places" in bad.content.decode()
    assert not Pool.objects.filter(slug="shared-l40s").exists()  # nothing half-made
    assert client.post("/pools/new/", data).status_code == 302
    pool = Pool.objects.get(slug="shared-l40s")
    assert pool_rate(pool.pk) == Decimal("1.85") and pool.cohort == "shared-l40s"
    assert AuditEvent.objects.filter(action="pool.created").exists()
    again = client.post("/pools/new/", data)
    assert again.status_code == 200 and "already exists" in again.content.decode()
