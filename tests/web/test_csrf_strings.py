"""CSRF secrets and masks are drawn by portal.security.random_csrf_string (one read of the
system's random source instead of one per character): same length, same alphabet, uniform —
and the middleware still accepts the page's own token and nothing else."""

import re
from collections import Counter

import pytest
from django.middleware import csrf
from django.test import Client
from django.urls import reverse

from portal.security import random_csrf_string

pytestmark = pytest.mark.django_db


def test_the_middleware_draws_with_one_read():
    assert csrf._get_new_csrf_string is random_csrf_string
    secret = csrf._get_new_csrf_string()
    assert csrf._unmask_cipher_token(csrf._mask_cipher_secret(secret)) == secret
    assert csrf._mask_cipher_secret(secret) != csrf._mask_cipher_secret(secret)


def test_strings_are_uniform_over_the_alphabet():
    drawn = [random_csrf_string() for _ in range(8000)]
    assert {len(s) for s in drawn} == {32} and len(set(drawn)) == len(drawn)
    counts = Counter("".join(drawn))
    assert set(counts) == set(csrf.CSRF_ALLOWED_CHARS)
    expected = 8000 * 32 / 62  # ~4,129 each, standard deviation ~64
    # Mapping bytes modulo 62 without dropping the top 8 values would give 8 characters 25%
    # more than the rest; 12% is ~7.7 standard deviations, so only a bias fails this.
    assert all(abs(n - expected) < 0.12 * expected for n in counts.values()), counts


def test_a_page_token_is_accepted_and_a_forged_one_refused(lead):
    client = Client(enforce_csrf_checks=True)
    client.force_login(lead)
    page = client.get(reverse("intake:list")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert len(token) == 64
    forged = token[:-1] + ("a" if token[-1] != "a" else "b")
    assert client.post(reverse("account_logout"), {"csrfmiddlewaretoken": forged}
                       ).status_code == 403
    assert client.post(reverse("account_logout"), {"csrfmiddlewaretoken": token}
                       ).status_code == 302
