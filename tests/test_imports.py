"""No import circle between the modules of `kittiwake`.

The layers (docs/design.md) only hold if imports point one way. This walks
every module under src/kittiwake, collects what it imports — at the top and
inside functions, since a function-level import that closes a circle is the
same knot, only tied later — and fails on any circle, printing it.

An import under `if TYPE_CHECKING:` never runs, so it cannot form a circle at
run time and the first test ignores it. Inside the task layer (`app`), the
worker (`worker`), the broker (`broker`), its faces (`observe`, `sqs`) and the
client (`client`), where such type-only circles used to stand in for narrow
protocols, the second test counts them too.

Faces plug into the broker from above (`kittiwake.broker.faces`): no core
module of the broker imports one, not even for a type. Request extensions
(`kittiwake.broker.extensions`) too: the broker imports nothing of the cluster
(`kittiwake.cluster`), which plugs a node into it, and neither does the
dashboard (`kittiwake.observe`), whose cluster page a node plugs in.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "kittiwake"


def module_files(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__) for every module under `root`."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        modules[".".join(parts)] = (path, package)
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(name: str, path: Path, package: bool, known: set[str], type_checking: bool) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its body; `from a import b`
    counts as importing `a.b` when that is a module, else `a`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child) and not type_checking:
                for statement in child.orelse:
                    visit_statement(statement)
                continue
            visit_statement(child)

    def visit_statement(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    found.add(f"{source}.{alias.name}")
                elif source in known:
                    found.add(source)
        visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found


def import_graph(root: Path, type_checking: bool) -> dict[str, set[str]]:
    modules = module_files(root)
    known = set(modules)
    return {
        name: imported_modules(name, path, package, known, type_checking)
        for name, (path, package) in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a → … → a) through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            connect(module)
    return [_circle_in(graph, group) for group in groups]


def _circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module] & group):
                if target == start:
                    return paths[module] + [start]
                if target not in paths:
                    paths[target] = paths[module] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no circle through {start}")


def describe(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(circle) for circle in found)


def test_no_module_imports_itself_back_through_others() -> None:
    found = circles(import_graph(SOURCE, type_checking=False))
    assert not found, f"import circles:\n{describe(found)}"


TYPED_LAYERS = ("kittiwake.app", "kittiwake.worker", "kittiwake.broker", "kittiwake.observe", "kittiwake.sqs",
                "kittiwake.client")
FACES = ("kittiwake.sqs", "kittiwake.observe", "kittiwake.broker.udp")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def test_the_layers_with_narrow_protocols_need_no_type_only_circle_either() -> None:
    graph = import_graph(SOURCE, type_checking=True)
    found = [circle for circle in circles(graph) if any(_within(module, TYPED_LAYERS) for module in circle)]
    assert not found, f"import circles, counting imports under TYPE_CHECKING:\n{describe(found)}"


def test_the_broker_core_imports_no_face() -> None:
    graph = import_graph(SOURCE, type_checking=True)
    core = [module for module in graph if _within(module, ("kittiwake.broker",)) and not _within(module, FACES)]
    found = sorted(f"{module} -> {target}" for module in core for target in graph[module] if _within(target, FACES))
    assert not found, "broker core modules importing a face:\n" + "\n".join(found)


def test_the_broker_imports_nothing_of_the_cluster() -> None:
    graph = import_graph(SOURCE, type_checking=True)
    broker = [module for module in graph if _within(module, ("kittiwake.broker", "kittiwake.engine"))]
    found = sorted(f"{module} -> {target}" for module in broker for target in graph[module]
                   if _within(target, ("kittiwake.cluster",)))
    assert not found, "broker or engine modules importing the cluster:\n" + "\n".join(found)


def test_the_dashboard_imports_nothing_of_the_cluster() -> None:
    """A node's cluster page is plugged into the dashboard from above (`observe.cluster_source`)."""
    graph = import_graph(SOURCE, type_checking=True)
    observe = [module for module in graph if _within(module, ("kittiwake.observe",))]
    found = sorted(f"{module} -> {target}" for module in observe for target in graph[module]
                   if _within(target, ("kittiwake.cluster",)))
    assert not found, "dashboard modules importing the cluster:\n" + "\n".join(found)


def test_only_the_bench_command_imports_the_benchmarks() -> None:
    """The benchmarks compose the package from above: the demo, the faces and the testing helpers
    start brokers through `kittiwake.testing`, never through `kittiwake.bench`."""
    graph = import_graph(SOURCE, type_checking=True)
    outside = [module for module in graph
               if not _within(module, ("kittiwake.bench",)) and module != "kittiwake.cli.bench_command"]
    found = sorted(f"{module} -> {target}" for module in outside for target in graph[module]
                   if _within(target, ("kittiwake.bench",)))
    assert not found, "modules outside the benchmarks importing them:\n" + "\n".join(found)


def test_the_package_imports_nothing_of_the_benchmarks_distribution() -> None:
    """`kittiwake_benchmarks` plugs into `kittiwake bench` through entry points (`bench.distribution`)."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(SOURCE.parent)}:{node.lineno}" for name in names
                      if name.split(".")[0] == "kittiwake_benchmarks"]
    assert not found, "the package importing the benchmarks distribution: " + ", ".join(found)


def test_the_walk_sees_function_level_imports_and_skips_type_only_ones(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def later():\n    from pkg import b\n")
    (package / "b.py").write_text("from pkg.a import later\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n")
    (package / "d.py").write_text("from . import c\n")
    assert circles(import_graph(package, type_checking=False)) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert sorted(circles(import_graph(package, type_checking=True))) == [
        ["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.d", "pkg.c"],
    ]
