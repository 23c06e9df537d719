"""Shell commands as tasks: the built-in task behind ``kittiwake submit -- CMD ARGS``.

Every `App` registers `run_shell` under the name ``kittiwake.shell`` (queue
``default``), so any worker can run commands submitted from the command line,
whatever app it was started with. The command runs without a shell (the
arguments are passed as they are), its standard output and error merged; the
result is ``{"exit_code": int, "output": str}`` where output is the last
`OUTPUT_TAIL_CHARS` characters. A non-zero exit code is a result, not a
failure: the caller decides what it means. `timeout_secs` kills the command
(exit code -9 and a note in the output). A command that cannot start (not
found, not executable) fails at once: the task is not retried (``retry_on=()``),
though a crashed worker's command still runs again like any task.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

SHELL_TASK = "kittiwake.shell"
OUTPUT_TAIL_CHARS = 4000


def run_shell(
    argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None, timeout_secs: float | None = None
) -> dict[str, Any]:
    """Run `argv`, return its exit code and the tail of its output."""
    if not argv or not all(isinstance(part, str) for part in argv):
        raise ValueError("a shell task needs a non-empty list of strings")
    environment = None
    if env:
        environment = dict(os.environ)
        environment.update(env)
    try:
        completed = subprocess.run(
            argv, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=timeout_secs, check=False,
        )
    except subprocess.TimeoutExpired as expired:
        output = (expired.output or b"").decode("utf-8", "replace")
        output += f"\n[killed after {timeout_secs} s]"
        return {"exit_code": -9, "output": output[-OUTPUT_TAIL_CHARS:]}
    output = completed.stdout.decode("utf-8", "replace")
    return {"exit_code": completed.returncode, "output": output[-OUTPUT_TAIL_CHARS:]}
