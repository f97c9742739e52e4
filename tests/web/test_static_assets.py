"""Every static file a template names exists (production's manifest storage turns a missing
one into a 500 on every page): the stylesheet, the scripts, and the npm-vendored Chart.js."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.web
STATIC_TAG = re.compile(r"""{%\s*static\s+['"]([^'"]+)['"]\s*%}""")
STATIC_CALL = re.compile(r"""static\(["']([^"']+)["']\)""")  # the layout's head, in Python


def test_every_static_file_a_template_names_is_there():
    named = {m for path in Path(settings.BASE_DIR, "templates").rglob("*.html")
             for m in STATIC_TAG.findall(path.read_text())}
    named |= set(STATIC_CALL.findall(
        Path(settings.BASE_DIR, "portal", "context_processors.py").read_text()))
    assert "vendor/chart.umd.min.js" in named and "css/portal.css" in named
    missing = sorted(p for p in named if finders.find(p) is None)
    assert missing == [], f"run scripts/assets.sh; missing: {missing}"


def test_chart_js_is_the_pinned_version():
    import json

    lock = json.loads(Path(settings.BASE_DIR, "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/chart.js"]["version"]
    vendored = Path(finders.find("vendor/chart.umd.min.js")).read_text()[:400]
    assert pinned in vendored, (pinned, vendored[:120])


def test_production_collectstatic_succeeds(tmp_path):
    """What the image build and the compose file run: the manifest storage post-processes
    every file and refuses a reference it cannot resolve (Chart.js names its source map)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PORTAL_MODE": "production", "SECRET_KEY": "s" * 60,
           "ALLOWED_HOSTS": "portal.example", "DATABASE_URL": f"sqlite:///{tmp_path}/x.db",
           "CELERY_BROKER_URL": "redis://127.0.0.1:9/0", "STATIC_ROOT": str(tmp_path / "s")}
    env.pop("DEBUG", None)
    result = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput"],
                            cwd=settings.BASE_DIR, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-1500:]
    manifest = json.loads((tmp_path / "s" / "staticfiles.json").read_text())
    assert "vendor/chart.umd.min.js" in manifest["paths"]
    assert "css/portal.css" in manifest["paths"] and "js/charts.js" in manifest["paths"]
