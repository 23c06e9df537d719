"""A module's constants are bound once.

An upper-case name bound at the top level of a module is a setting its code reads at run time, so
a second binding further down silently wins over the first: the value a reader finds first (and a
docstring may quote) is not the one in force. This walks every module under src/kittiwake and
fails on any such name bound twice, naming the module and the lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "kittiwake"


def constants_bound_twice(tree: ast.Module) -> dict[str, list[int]]:
    """Upper-case names assigned more than once at the top level of a module, with their lines."""
    lines: dict[str, list[int]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = [target for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            targets = [node.target]
        else:
            continue
        for target in targets:
            if target.id.isupper():
                lines.setdefault(target.id, []).append(node.lineno)
    return {name: found for name, found in lines.items() if len(found) > 1}


def test_no_module_binds_a_constant_twice() -> None:
    twice = {
        str(path.relative_to(SOURCE.parent)): found
        for path in sorted(SOURCE.rglob("*.py"))
        if (found := constants_bound_twice(ast.parse(path.read_text(), str(path))))
    }
    assert twice == {}, f"constants bound more than once (module: name -> lines): {twice}"
