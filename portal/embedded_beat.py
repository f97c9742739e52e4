"""The beat schedule, inside `runserver`, for the embedded run: it has no worker or beat
process, yet fleet sync, expiry, the usage rollup and budget notices should still happen.
A daemon thread runs each scheduled task (eagerly, in-process) when its interval is due."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from django.conf import settings
from django.db import close_old_connections

from .celery import app

log = logging.getLogger(__name__)
TICK_SECONDS = 20


def due_tasks(schedule: dict, last_run: dict[str, float], now: float) -> list[str]:
    """Names of the entries whose interval has passed since they last ran (all, at first)."""
    return [name for name, entry in schedule.items()
            if now - last_run.get(name, float("-inf")) >= float(entry["schedule"])]


def _run_forever(schedule: dict) -> None:
    app.loader.import_default_modules()  # the apps' tasks modules, as a worker would
    last_run: dict[str, float] = {}
    while True:
        now = time.monotonic()
        for name in due_tasks(schedule, last_run, now):
            last_run[name] = now
            try:
                app.tasks[schedule[name]["task"]].apply()
            except Exception:  # one failing task must not stop the others
                log.exception("embedded beat: %s failed", name)
            finally:
                close_old_connections()
        time.sleep(TICK_SECONDS)


def start_if_wanted() -> bool:
    """Start the thread in the serving process of `runserver` only (not in the autoreloader's
    parent, not in management commands, never in production)."""
    if not settings.PORTAL_EMBEDDED_BEAT or "runserver" not in sys.argv:
        return False
    if "--noreload" not in sys.argv and os.environ.get("RUN_MAIN") != "true":
        return False
    thread = threading.Thread(target=_run_forever, args=(dict(settings.CELERY_BEAT_SCHEDULE),),
                              name="embedded-beat", daemon=True)
    thread.start()
    log.info("embedded beat: running %d scheduled task(s) in-process",
             len(settings.CELERY_BEAT_SCHEDULE))
    return True
