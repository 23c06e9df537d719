"""A run's live progress: one row per step, redrawn from the broker until the run ends.

Each row shows what `RunHandle.status()` reads from the broker: tokens
waiting at the step's input ports (a join still missing a partner), jobs
queued (their join completed, no worker has leased them yet), running
(leased) and done, with a bar of done over the jobs the step will run.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

POLL_SECS = 0.25


def progress_table(status: Any, totals: Mapping[str, int], elapsed_secs: float) -> Table:
    """The table of one `RunStatus`; `totals` is how many jobs each step runs in all."""
    table = Table(title=f"run {status.run}: {status.state}, {elapsed_secs:.1f} s", title_justify="left")
    table.add_column("step")
    table.add_column("engine")
    for column in ("tokens waiting", "jobs queued", "jobs running", "done"):
        table.add_column(column, justify="right")
    table.add_column("", width=24)
    table.add_column("dead", justify="right")
    for step in status.steps:
        total = max(1, totals.get(step.step, step.done))
        table.add_row(step.step, step.engine, str(step.waiting), str(step.queued), str(step.running),
                      f"{step.done}/{total}", ProgressBar(total=total, completed=min(step.done, total), width=24),
                      Text(str(step.dead), style="red" if step.dead else ""))
    return table


def follow(handle: Any, totals: Mapping[str, int], console: Console, *, started: float,
           show: bool = True, timeout_secs: float | None = None,
           check: Callable[[], None] = lambda: None, poll_secs: float = POLL_SECS) -> Any:
    """Poll `handle` until its run is done, failed or cancelled, drawing the table; the last status.

    `check` is called at every poll and may raise (a worker the run needs has exited);
    TimeoutError after `timeout_secs`. Each poll reads the run's queues (a few dozen requests): a
    measurement polls seldom (`poll_secs`), so as not to load the machine it measures."""
    deadline = None if timeout_secs is None else time.monotonic() + timeout_secs
    status = handle.status()
    live = Live(Group(), console=console, refresh_per_second=8, transient=False) if show else None
    if live is not None:
        live.start()
    try:
        while True:
            if live is not None:
                live.update(progress_table(status, totals, time.time() - started), refresh=True)
            if status.finished:
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {handle.id} is still {status.state} after {timeout_secs:.0f} s")
            check()
            time.sleep(poll_secs)
            status = handle.status()
    finally:
        if live is not None:
            live.stop()
            console.print()
