"""The floor plan: imports follow the data path, and no project module imports itself in a circle.

Every import statement counts — at module level, inside a function, or under ``TYPE_CHECKING`` —
because an import inside a function is still a dependency (it only runs later). Migrations and tests
are left out: migrations name models by string, tests may reach any layer.

Layers, each importing only those before it (DESIGN "Layers"):
core < accounts < catalog < inventory < jobs < clusters < quotas < scheduling < telemetry <
billing, rollout < migration < demo < worker < config. ``billing`` and ``rollout`` share a floor
and may not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WEB = "web"  # the floor of every app's pages, API, admin and URLs
LAYERS: list[tuple[str, ...]] = [
    ("apps.core",),
    ("apps.accounts",),
    ("apps.notify",),
    ("apps.catalog",),
    ("apps.inventory",),
    ("apps.jobs",),
    ("apps.benchlib",),
    ("apps.clusters",),
    ("apps.quotas",),
    ("apps.scheduling",),
    ("apps.telemetry",),
    ("apps.billing", "apps.rollout"),
    ("apps.migration",),
    (WEB,),
    ("apps.demo",),
    ("worker",),
    ("config",),
]
_LAYER_OF = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def _is_skipped(path: Path) -> bool:
    # The namespace roots (apps/__init__.py) hold nothing; migrations and caches are not code we layer.
    if path.parent == ROOT / "apps" and path.name == "__init__.py":
        return True
    return "migrations" in path.parts or "__pycache__" in path.parts


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for top in ("apps", "worker", "config"):
        for path in (ROOT / top).rglob("*.py"):
            if not _is_skipped(path):
                modules[_module_name(path)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported dotted name lands in (the longest existing prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # "from a.b import c" imports the submodule a.b.c when there is one, else a name of a.b.
                names = [
                    f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix
                    for alias in node.names
                ]
            else:
                continue
            for name in names:
                target = _resolve(name, modules)
                if target and target != module:
                    targets.add(target)
        graph[module] = targets
    return graph


def is_web(module: str) -> bool:
    """A module of an app's web floor: ``views``, ``api``, ``admin``, ``urls`` (or a package of that name,
    or a module named ``…_views``, ``…_api``, ``…_admin``, ``…_urls``) under ``apps.<app>``."""
    parts = module.split(".")
    if parts[0] != "apps" or len(parts) < 3:
        return False
    head = parts[2]
    return head in WEB_NAMES or head.endswith(tuple(f"_{name}" for name in WEB_NAMES))


WEB_NAMES = ("views", "api", "admin", "urls")


def _package(module: str) -> str | None:
    parts = module.split(".")
    if is_web(module):
        return WEB
    key = ".".join(parts[:2]) if parts[0] == "apps" else parts[0]
    return key if key in _LAYER_OF else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for source, targets in sorted(graph.items()):
        source_package = _package(source)
        if source_package is None:
            problems.append(f"{source} belongs to no layer (add its app to LAYERS)")
            continue
        for target in sorted(targets):
            target_package = _package(target)
            if target_package is None or target_package == source_package:
                continue
            if _LAYER_OF[target_package] >= _LAYER_OF[source_package]:
                problems.append(f"{source} imports {target} ({target_package} is not below {source_package})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_sees_function_level_imports_and_cycles(tmp_path):
    graph = {"apps.core.a": {"apps.billing.b"}, "apps.billing.b": {"apps.core.a"}}
    assert upward_imports(graph) == [
        "apps.core.a imports apps.billing.b (apps.billing is not below apps.core)"
    ]
    assert cycles(graph) == [["apps.billing.b", "apps.core.a"]]
    assert upward_imports({"apps.billing.x": {"apps.rollout.y"}}) == [
        "apps.billing.x imports apps.rollout.y (apps.rollout is not below apps.billing)"
    ]
    source = "def f():\n    from apps.billing import services\n"
    module = tmp_path / "m.py"
    module.write_text(source)
    tree = ast.parse(source)
    assert any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))


def test_every_import_goes_down_the_layers():
    graph = import_graph(project_modules())
    assert upward_imports(graph) == []


def test_no_import_cycles_among_project_modules():
    graph = import_graph(project_modules())
    assert cycles(graph) == []


def test_nothing_under_apps_imports_worker():
    graph = import_graph(project_modules())
    offenders = sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source.startswith("apps.")
        for target in targets
        if target.split(".")[0] == "worker"
    )
    assert offenders == []
