"""Callables started at the same moment, for the tests of races."""

from __future__ import annotations

import threading

from django.db import connection


def race(targets):
    """Run callables at the same moment in threads; return (results, errors)."""
    barrier = threading.Barrier(len(targets))
    results, errors = [], []

    def run(fn):
        try:
            barrier.wait()
            results.append(fn())
        except Exception as exc:  # collected and asserted by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors
