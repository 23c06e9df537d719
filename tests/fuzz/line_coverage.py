"""Which lines of kittiwake a set of inputs executes, with `sys.settrace` (no coverage.py needed).

`make fuzz` replays each target's merged corpus through this after fuzzing
and reports, per module the target is about, the lines executed out of the
lines in its functions. Module and class bodies run at import, before any
input, so only function bodies count; a function's first line counts when
it is called.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable


@dataclass
class FileLines:
    path: Path
    executable: set[int]
    executed: set[int]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.executed & self.executable) / len(self.executable) if self.executable else 100.0


def function_lines(path: Path) -> set[int]:
    """Line numbers of every function body in a source file."""
    code = compile(path.read_text(), str(path), "exec")
    lines: set[int] = set()
    pending = [code]
    while pending:
        each = pending.pop()
        if each.co_flags & 0x1:  # CO_OPTIMIZED: a function, lambda or comprehension
            lines.update(line for _, _, line in each.co_lines() if line is not None)
        pending.extend(const for const in each.co_consts if isinstance(const, types.CodeType))
    return lines


def measure(check: Callable[[bytes], None], inputs: Iterable[bytes], paths: list[Path]) -> list[FileLines]:
    """Run `check` on every input (failures are the caller's business) and count lines in `paths`."""
    wanted = {str(path) for path in paths}
    executed: dict[str, set[int]] = {name: set() for name in wanted}

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            executed[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    def call(frame: types.FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if name in wanted:
            executed[name].add(frame.f_code.co_firstlineno)
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        for data in inputs:
            try:
                check(data)
            except Exception:  # noqa: BLE001 - the fuzzer reports failures; this only counts lines
                pass
    finally:
        sys.settrace(previous)
    return [FileLines(path, function_lines(path), executed[str(path)]) for path in paths]
