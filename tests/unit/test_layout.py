"""The layout holds: imports point one way, and no module imports itself back through others.

Every import is read, including those inside functions, from the source (ast), so a lazy
import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
APPS = ("tenants", "fleet", "intake", "billing", "portal")
# What each app may import from the project: tenants ← fleet ← {intake, billing} ← portal.
ALLOWED = {
    "tenants": {"tenants", "portal.env"},
    "fleet": {"tenants", "fleet", "portal.env"},
    "intake": {"tenants", "fleet", "intake", "portal.env"},
    "billing": {"tenants", "fleet", "billing", "portal.env"},
    "portal": set(APPS),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import of a project module in the file, at any depth.
    `package` resolves relative imports (by default, the file's own package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if package is None:
        package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" \
            else module_name(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from fleet import tasks" imports the module fleet.tasks
            names = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        else:
            continue
        for name in names:
            if name.split(".")[0] in APPS:
                found.append((node.lineno, name))
    return found


def app_files():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            yield app, path


def _allowed(app: str, module: str) -> bool:
    return any(module == ok or module.startswith(ok + ".") for ok in ALLOWED[app])


def test_imports_point_one_way():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for app, path in app_files() if "migrations" not in path.parts
             for line, module in project_imports(path) if not _allowed(app, module)]
    assert wrong == [], "imports against tenants ← fleet ← {intake, billing} ← portal:\n" + \
        "\n".join(wrong)


def test_the_import_reader_sees_imports_inside_functions(tmp_path):
    # The reader itself must catch a lazy upward import (the kind that slipped in before),
    # and resolve a relative one.
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from intake.models import CapacityRequest\n"
                     "    from ..tasks import provision_allocation\n")
    modules = [m for _, m in project_imports(probe, package="fleet.sub")]
    assert "intake.models.CapacityRequest" in modules
    assert "fleet.tasks" in modules  # ".." from fleet.sub is fleet
    assert not _allowed("fleet", "intake.models") and _allowed("fleet", "fleet.tasks")


def test_no_import_cycles():
    """Module graph over every import (function-level ones included): no cycle."""
    modules = {module_name(p): p for _, p in app_files() if "migrations" not in p.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for _, imported in project_imports(path):
            # resolve "pkg.mod.Name" to the longest project module it names
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            target = ".".join(parts)
            if target and target != name and not modules[target].name == "__init__.py":
                edges.add(target)
        graph[name] = edges
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" → ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


# Inside fleet: the platform's vocabulary and the Kubernetes adapter below everything, then
# three rooms with a direction of their own: inventory ← allocations ← queues. The app's
# entry points (views, API, forms, admin, urls, the Celery task registry) compose them.
FLEET_BELOW = {"fleet.kube", "fleet.prometheus", "fleet.domain", "fleet.vocabulary",
               "fleet.signals", "fleet.models", "fleet.apps"}
FLEET_ROOMS = ("fleet.inventory", "fleet.allocations", "fleet.queues")  # rooms by package
FLEET_TOP = {"fleet.views", "fleet.api", "fleet.cluster_api", "fleet.forms", "fleet.admin",
             "fleet.urls", "fleet.tasks", "fleet.renderers", "fleet.queue_serializers", "fleet"}
# The ORM models are the rooms' shared state; their status choices come from the allocation
# lifecycle's pure table (no queries, no other import).
FLEET_EXCEPTIONS = {("fleet.models", "fleet.allocations.lifecycle")}
# Within a room or among entry points: the writer never imports the page builder, and pages
# never import the API's serializers.
FLEET_FORBIDDEN = {("fleet.queues.sync", "fleet.queues.explain"), ("fleet.views", "fleet.api"),
                   ("fleet.views", "fleet.queue_serializers")}
# The decisions over plain data: they read no database, no cluster and no clock, so they
# import only the vocabulary, the domain's names and each other.
FLEET_PURE = {"fleet.inventory.capacity", "fleet.inventory.clusters", "fleet.allocations.manifests",
              "fleet.allocations.admission", "fleet.allocations.guard_check",
              "fleet.allocations.dispatch", "fleet.queues.dispatched",
              "fleet.queues.truth",
              "fleet.queues.placement", "fleet.queues.ledger", "fleet.queues.order",
              "fleet.queues.timing",
              "fleet.allocations.gitops_status", "fleet.allocations.repair",
              "fleet.allocations.lifecycle", "fleet.allocations.resizing"}
PURE_MAY_IMPORT = FLEET_PURE | {"fleet.vocabulary", "fleet.domain"}


def fleet_place(module: str) -> tuple[str, int]:
    """('below', 0) | ('room', rank 1..3) | ('top', 9) for a fleet module."""
    for rank, room in enumerate(FLEET_ROOMS, 1):
        if module == room or module.startswith(room + "."):
            return "room", rank
    for below in FLEET_BELOW:
        if module == below or module.startswith(below + "."):
            return "below", 0
    return "top", 9


def _target(imported: str, modules: set[str]) -> str:
    parts = imported.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def fleet_import_errors(name: str, imports: list[tuple[int, str]], modules: set[str]
                        ) -> list[tuple[int, str]]:
    """(line, module) of each import of fleet module `name` against the rooms' direction."""
    _, own = fleet_place(name)
    resolved = [(line, _target(imported, modules)) for line, imported in imports]
    # `from fleet.allocations import lifecycle` names the package as well as the module it
    # imports: the dependency is the module.
    resolved = [(line, t) for line, t in resolved if not any(
        other.startswith(t + ".") for ln, other in resolved if ln == line)]
    wrong = []
    for line, target in resolved:
        if not target.startswith("fleet") or target == name or target == "fleet":
            continue
        if (name, target) in FLEET_EXCEPTIONS:
            continue
        _, theirs = fleet_place(target)
        if theirs > own or (name, target) in FLEET_FORBIDDEN or (
                name in FLEET_PURE and target not in PURE_MAY_IMPORT):
            wrong.append((line, target))
    return wrong


def fleet_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "fleet").rglob("*.py"))
            if "migrations" not in p.parts}


def test_fleet_rooms_point_one_way():
    files = fleet_modules()
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for name, path in files.items()
             for line, target in fleet_import_errors(name, project_imports(path), set(files))]
    assert wrong == [], "fleet: vocabulary ← inventory ← allocations ← queues ← entry " \
                        "points:\n" + "\n".join(wrong)


@pytest.mark.parametrize(("module", "imported"), [
    ("fleet.queues.sync", "fleet.forms.PoolForm"),  # a room reaching up to an entry point
    ("fleet.queues.watch", "fleet.views"),
    ("fleet.inventory.selectors", "fleet.allocations.manifests"),  # a room reaching up
    ("fleet.allocations.services", "fleet.queues.explain"),
    ("fleet.inventory.selectors", "fleet.allocations"),  # a room's package counts as it
    ("fleet.queues.sync", "fleet.queues.explain"),  # the writer reading the page builder
    ("fleet.kube", "fleet.inventory.capacity"),  # the adapter below every room
    ("fleet.queues.ledger", "fleet.models"),  # a pure decision reading the database
    ("fleet.inventory.capacity", "fleet.kube"),  # ... or the cluster
])
def test_the_room_check_refuses_each_probe(module, imported):
    """Probes that must fail the check: each would pass if the rooms had holes."""
    assert fleet_import_errors(module, [(1, imported)], set(fleet_modules())) != []


def test_the_room_check_allows_the_direction():
    modules = set(fleet_modules())
    for module, imported in [("fleet.queues.sync", "fleet.allocations.lifecycle"),
                             ("fleet.allocations.services", "fleet.inventory.selectors"),
                             ("fleet.views", "fleet.queues.explain"),
                             ("fleet.inventory.capacity", "fleet.vocabulary")]:
        assert fleet_import_errors(module, [(1, imported)], modules) == []


def test_every_fleet_module_has_a_place():
    """A new module lands in a room (or is named as vocabulary or an entry point)."""
    stray = [module_name(p) for p in (ROOT / "fleet").glob("*.py")
             if module_name(p) not in FLEET_BELOW | FLEET_TOP]
    assert stray == []


# A module's head says what it depends on. An import inside a function only where the
# reason is written here.
LOCAL_IMPORTS_ALLOWED = {
    ("tenants/apps.py", "ready"): "Django's hook once the app registry is ready: receivers",
    ("intake/apps.py", "ready"): "Django's hook once the app registry is ready: receivers",
    ("portal/apps.py", "ready"): "Django's hook once the app registry is ready: the "
                                 "embedded beat and the CSRF draw",
    ("portal/celery.py", "_load_before_fork"): "the Kubernetes client loaded in a worker's "
                                               "main process only, before it forks",
    ("portal/celery.py", "_discover"): "portal/celery.py is imported with the settings, "
                                       "before the app registry; only workers run this",
}


def local_imports(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every import inside a function."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        elif function and isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def test_imports_stand_at_the_top_of_the_file():
    local = [f"{path.relative_to(ROOT)}:{line} in {function}"
             for _, path in app_files() if "migrations" not in path.parts
             for line, function in local_imports(path.read_text())
             if (str(path.relative_to(ROOT)), function) not in LOCAL_IMPORTS_ALLOWED]
    assert local == [], "imports inside functions (move them up, or say why here):\n" + \
        "\n".join(local)


def test_the_local_import_check_sees_every_depth():
    probe = ("import os\n"
             "def f():\n    import json\n"
             "class C:\n    def m(self):\n        if True:\n            from x import y\n"
             "async def g():\n    try:\n        import z\n    except ImportError:\n        pass\n")
    assert local_imports(probe) == [(3, "f"), (7, "m"), (10, "g")]


LONG_MODULE = 400  # lines


def test_a_long_fleet_module_says_why():
    """A module past ~400 lines is split into modules with one job each, or its docstring
    says why it is long ("Long on purpose: …")."""
    long = []
    for path in fleet_modules().values():
        text = path.read_text()
        if len(text.splitlines()) > LONG_MODULE and \
                "Long on purpose:" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
    assert long == []
