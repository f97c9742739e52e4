"""Every static file a template names exists (production's manifest storage turns a missing
one into a 500 on every page): the stylesheet, the scripts, and the npm-vendored Chart.js."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.web
STATIC_TAG = re.compile(r"""{%\s*static\s+['"]([^'"]+)['"]\s*%}""")


def test_every_static_file_a_template_names_is_there():
    named = {m for path in Path(settings.BASE_DIR, "templates").rglob("*.html")
             for m in STATIC_TAG.findall(path.read_text())}
    assert "vendor/chart.umd.min.js" in named and "css/portal.css" in named
    missing = sorted(p for p in named if finders.find(p) is None)
    assert missing == [], f"run scripts/assets.sh; missing: {missing}"


def test_chart_js_is_the_pinned_version():
    import json

    lock = json.loads(Path(settings.BASE_DIR, "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/chart.js"]["version"]
    vendored = Path(finders.find("vendor/chart.umd.min.js")).read_text()[:400]
    assert pinned in vendored, (pinned, vendored[:120])
