# ruff: noqa
import cProfile, io, os, pstats, gc
import pytest
from tests.db.test_page_benchmark import load_world, size_of, PAGES
from tests.db.page_profile import split_page

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.db.bench_urls")]

def test_scratch(client, admin_user, finance_user, monkeypatch):
    from django.contrib.auth import get_user_model
    from django.template import Template
    from django.test.utils import _TestState
    monkeypatch.setattr(Template, "_render", _TestState.saved_data.template_render)
    world = load_world("bench-lead", admin_user, size_of(None))
    users = {"lead": get_user_model().objects.get(username="bench-lead"), "admin": admin_user, "finance": finance_user}
    names = {"tenant": world["tenant"].slug, "request": world["alloc_request"].pk,
             "month": world["month"], "submitted": world["submitted"].pk}
    want = os.environ.get("SCRATCH_PAGES", "").split(";")
    for label, who, url in PAGES:
        if label not in want:
            continue
        url = url.format(**names)
        client.force_login(users[who]); client.get(url)
        s = split_page(client, url, runs=10)
        print(f"\nSPLIT {label}: " + " ".join(f"{k}={v:.1f}" for k, v in s.items()))
        if os.environ.get("SCRATCH_SQL"):
            from django.db import connection
            seen = []
            def keep(execute, sql, params, many, context):
                import traceback
                frames = [f"{f.filename.split('wt-fast/')[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_stack() if "wt-fast/" in f.filename and ".venv" not in f.filename and "tests/" not in f.filename]
                seen.append(sql[:60] + " <- " + " < ".join(reversed(frames[-4:]))); return execute(sql, params, many, context)
            with connection.execute_wrapper(keep):
                client.get(url)
            for q in seen: print("SQL", q)
        if os.environ.get("SCRATCH_CPROFILE"):
            p = cProfile.Profile(); p.enable()
            for _ in range(5): client.get(url)
            p.disable()
            out = io.StringIO(); pstats.Stats(p, stream=out).sort_stats(os.environ.get("SCRATCH_SORT", "tottime")).print_stats(int(os.environ.get("SCRATCH_N", "25")))
            print(out.getvalue()[:12000])
