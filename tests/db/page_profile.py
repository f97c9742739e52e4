"""Where a page's time goes, for the page benchmark: the template engine, the ORM compiling
queries, the database answering them, and the rest (Python: views, selectors, decisions,
forms, middleware). Each part is timed exclusive of the parts nested in it (a query a
template's loop runs counts as SQL, not template), so the four add up to the page.

Also the page's heaviest functions of the project's own code (cumulative, from cProfile),
which is what says which selector or renderer to look at.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path

from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.template.base import Template as DjangoTemplate

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tuple(str(ROOT / app) for app in ("billing", "fleet", "intake", "portal", "tenants"))


class Split:
    """Exclusive time per part: a stack of the parts entered, each leaving its time less
    its children's."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)
        self.stack: list[list] = []  # [part, started, children]

    @contextmanager
    def part(self, name: str):
        self.stack.append([name, time.perf_counter(), 0.0])
        try:
            yield
        finally:
            part, started, children = self.stack.pop()
            took = time.perf_counter() - started
            self.parts[part] += took - children
            if self.stack:
                self.stack[-1][2] += took


def _timed(split: Split, name: str, fn):
    def wrapper(*args, **kwargs):
        with split.part(name):
            return fn(*args, **kwargs)
    return wrapper


def jinja_template_class():
    try:
        from jinja2 import Template
    except ImportError:  # Jinja2 is optional: no such engine, no such part
        return None
    return Template


def split_page(client, url: str, runs: int = 10) -> dict[str, float]:
    """The page's mean milliseconds per part over `runs` requests: template, compile, sql,
    python (the rest) and total."""
    split = Split()
    total = 0.0
    jinja = jinja_template_class()
    with ExitStack() as stack:
        originals = [(DjangoTemplate, "render"), (SQLCompiler, "as_sql")]
        if jinja is not None:
            originals.append((jinja, "render"))
        for cls, attr in originals:
            fn = getattr(cls, attr)
            name = "compile" if cls is SQLCompiler else "template"
            setattr(cls, attr, _timed(split, name, fn))
            stack.callback(setattr, cls, attr, fn)

        def sql(execute, sql, params, many, context):
            with split.part("sql"):
                return execute(sql, params, many, context)

        stack.enter_context(connection.execute_wrapper(sql))
        for _ in range(runs):
            started = time.perf_counter()
            client.get(url)
            total += time.perf_counter() - started
    parts = {k: v * 1000 / runs for k, v in split.parts.items()}
    out = {k: parts.get(k, 0.0) for k in ("template", "compile", "sql")}
    out["python"] = total * 1000 / runs - sum(out.values())
    out["total"] = total * 1000 / runs
    return out


# How many of the project's functions each profile lists (PORTAL_BENCH_PROFILE_TOP).
TOP = int(os.environ.get("PORTAL_BENCH_PROFILE_TOP") or 6)


def heaviest_functions(client, url: str, top: int = TOP) -> list[tuple[str, float]]:
    """The project's functions by cumulative milliseconds over one request."""
    profile = cProfile.Profile()
    profile.enable()
    client.get(url)
    profile.disable()
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    mine = [(f"{Path(f).relative_to(ROOT)}:{name}", ct * 1000)
            for (f, _, name), (_, _, _, ct, _) in stats.items() if f.startswith(PROJECT)]
    return sorted(mine, key=lambda x: -x[1])[:top]


def print_profiles(client, users: dict, pages: list[tuple[str, str, str]]) -> None:
    for label, who, url in pages:
        client.force_login(users[who])
        client.get(url)  # warm
        s = split_page(client, url)
        print(f"BENCHMARK profile {label:32s} total {s['total']:6.1f} ms = template "
              f"{s['template']:5.1f} + ORM compile {s['compile']:5.1f} + SQL {s['sql']:5.1f} "
              f"+ Python {s['python']:5.1f}")
        for name, ms in heaviest_functions(client, url):
            print(f"BENCHMARK profile   {ms:6.1f} ms cumulative (under cProfile)  {name}")
