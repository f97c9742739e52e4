import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()


def _freeze_what_is_loaded() -> None:
    """Load the URLconf (every view and what it imports), then move everything loaded so far
    out of the garbage collector's sight: it lives as long as the process, and a full
    collection would otherwise scan it again and again (measured: the slowest page views were
    full collections over ~190,000 long-lived objects)."""
    get_resolver().url_patterns  # noqa: B018 - imports the views
    gc.collect()
    gc.freeze()


_freeze_what_is_loaded()
