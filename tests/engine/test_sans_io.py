"""The engine is sans-IO (docs/style.md, 2): no clock, sockets, disk, threads or randomness in
`kittiwake.engine` — time comes in as `now`, the store is injected. Checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kittiwake.engine

FORBIDDEN = {"time", "asyncio", "socket", "sqlite3", "os", "threading", "random",
             "datetime", "selectors", "subprocess", "multiprocessing", "pathlib", "io"}
ENGINE_DIR = Path(kittiwake.engine.__file__).parent
MODULES = sorted(ENGINE_DIR.glob("*.py"))


def imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            found.add("__import__")
    return found


def test_the_engine_package_has_modules_to_check():
    assert {path.name for path in MODULES} >= {"engine.py", "state.py", "transitions.py", "leases.py", "storage.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_no_io_clock_or_randomness_imports(path):
    modules = imported_modules(path.read_text(encoding="utf-8"))
    bad = {name for name in modules if name.split(".")[0] in FORBIDDEN or name == "__import__"}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_the_engine_reaches_no_store_or_broker_module(path):
    modules = imported_modules(path.read_text(encoding="utf-8"))
    assert not {name for name in modules if name.startswith(("kittiwake.store", "kittiwake.broker",
                                                             "kittiwake.client", "kittiwake.protocol"))}


def test_the_checker_sees_every_form_of_import():
    source = "import os\nimport time as t\nfrom socket import socket\nfrom . import x\n__import__('random')\n"
    assert imported_modules(source) == {"os", "time", "socket", "__import__"}
