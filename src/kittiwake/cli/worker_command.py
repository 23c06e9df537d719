"""`kittiwake worker [module:app]`: run worker processes for an app's tasks until SIGTERM.

Without an app only the built-in tasks run (shell commands from
`kittiwake submit`). The broker is the global `--url` (or `$KITTIWAKE_URL`),
else the URL the app was created with. See `kittiwake.worker.supervisor` for
processes, respawning, recycling and signals, and `kittiwake.worker.loop` for
what one process does.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.constants import WORKERS_QUEUE
from kittiwake.worker.config import (
    DEFAULT_DELAYED_POLL_SECS,
    DEFAULT_REGISTRY_EVERY_SECS,
    DEFAULT_SHUTDOWN_SECS,
    DEFAULT_STEAL_AFTER_SECS,
    DEFAULT_WAIT_SECS,
    WorkerConfig,
)


def split_queues(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str] | None:
    queues = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return queues or None


@click.command("worker")
@click.argument("app", required=False, metavar="[MODULE:APP]")
@click.option("--processes", "-p", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Worker processes to run.")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1, 10_000),
              help="Tasks each process runs at once (threads).")
@click.option("--queues", "-Q", multiple=True, callback=split_queues, metavar="Q1,Q2",
              help="Queues to serve. Default: every queue the app's tasks are defined on.")
@click.option("--prefetch", type=click.IntRange(0, 10_000),
              help="Tasks leased ahead of a free slot, per process. Default: sized from the observed run times (about 100 ms of work per slot, none while slow tasks run, at most 2,000).")
@click.option("--max-tasks-per-child", type=click.IntRange(min=1),
              help="Recycle a process after this many tasks (it finishes what it holds first).")
@click.option("--max-memory", "max_memory_mb", type=click.FloatRange(min=1),
              help="Recycle a process whose resident memory passes this many MB after a task.")
@click.option("--shutdown-secs", default=DEFAULT_SHUTDOWN_SECS, show_default=True, type=click.FloatRange(min=0),
              help="On SIGTERM: how long running tasks may take to finish before they are handed back.")
@click.option("--beat", is_flag=True,
              help="Also run the periodic scheduler (several may run: each tick still runs once).")
@click.option("--wait-secs", default=DEFAULT_WAIT_SECS, show_default=True, type=click.FloatRange(0.05, 300),
              help="Long-poll wait of a lease.")
@click.option("--delayed-poll-secs", default=DEFAULT_DELAYED_POLL_SECS, show_default=True,
              type=click.FloatRange(0.01, 60), help="How often due delayed tasks are looked for.")
@click.option("--registry-secs", default=DEFAULT_REGISTRY_EVERY_SECS, show_default=True,
              type=click.FloatRange(0.1, 3600), help="How often a process renews its record in the worker registry.")
@click.option("--registry-queue", default=WORKERS_QUEUE, show_default=True, envvar="KITTIWAKE_REGISTRY_QUEUE",
              show_envvar=True, help="Queue of the worker registry (one record per process); a broker user "
              "with rights on its own prefix only names one there, e.g. alice.workers.")
@click.option("--name", help="Prefix of worker ids. Default: the host name.")
@click.option("--node", help="This machine's node name: also serve the local queues <queue>@NODE of tasks "
              "submitted with node=NODE.")
@click.option("--near", metavar="NODE", help="On a cluster (--url kw://a,b,c): the node this worker leases from "
              "first, while it holds tasks (default: the global --near, else a node whose address is this host's).")
@click.option("--steal-after", "steal_after_secs", default=DEFAULT_STEAL_AFTER_SECS, show_default=True,
              type=click.FloatRange(min=0), help="With --node: seconds idle before stealing a task from "
              "another node's local queue.")
@click.option("--autoscale", "autoscale_range", metavar="MIN:MAX",
              help="Run MIN to MAX processes: add one while the queues' backlog grows, retire an idle one "
              "after --scale-idle-secs without backlog (--processes is then ignored).")
@click.option("--scale-cmd", help="With --autoscale: shell command run with KITTIWAKE_DESIRED=<count> when more "
              "than MAX processes are wanted (e.g. ask a cluster manager for nodes).")
@click.option("--scale-window-secs", default=2.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="With --autoscale: a backlog that did not shrink over this long adds a process.")
@click.option("--scale-idle-secs", default=10.0, show_default=True, type=click.FloatRange(0.1, 86400),
              help="With --autoscale: an empty backlog this long retires one idle process.")
@pass_cli
def worker(
    cli: CliContext,
    app: str | None,
    processes: int,
    concurrency: int,
    queues: list[str] | None,
    prefetch: int | None,
    max_tasks_per_child: int | None,
    max_memory_mb: float | None,
    shutdown_secs: float,
    beat: bool,
    wait_secs: float,
    delayed_poll_secs: float,
    registry_secs: float,
    registry_queue: str,
    name: str | None,
    node: str | None,
    near: str | None,
    steal_after_secs: float,
    autoscale_range: str | None,
    scale_cmd: str | None,
    scale_window_secs: float,
    scale_idle_secs: float,
) -> None:
    """Run worker processes for the tasks of MODULE:APP (e.g. `myproject.tasks:app`).

    Each process long-polls leases in batches, runs the tasks and finishes each
    with one atomic update that also posts its result. SIGTERM stops leasing,
    lets running tasks finish (--shutdown-secs), hands back the rest, and exits 0.
    """
    from kittiwake.worker.autoscale import parse_range
    from kittiwake.worker.config import load_app
    from kittiwake.worker.supervisor import Supervisor

    try:
        scale = parse_range(autoscale_range) if autoscale_range is not None else None
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--autoscale") from error

    config = WorkerConfig(
        app=app, url=cli.url, queues=queues, processes=processes, concurrency=concurrency, prefetch=prefetch,
        max_tasks_per_child=max_tasks_per_child, max_memory_mb=max_memory_mb, shutdown_secs=shutdown_secs,
        wait_secs=wait_secs, delayed_poll_secs=delayed_poll_secs, registry_every_secs=registry_secs, beat=beat,
        registry_queue=registry_queue,
        name=name, node=node, near=near if near is not None else cli.near, steal_after_secs=steal_after_secs, autoscale=scale, scale_cmd=scale_cmd,
        scale_window_secs=scale_window_secs, scale_idle_secs=scale_idle_secs, sys_path=[os.getcwd()],
    )
    try:
        load_app(app, config.sys_path)
    except Exception as error:  # an app that does not import: say so once, before any process starts
        raise click.UsageError(f"cannot load {app}: {type(error).__name__}: {error}") from error
    # the supervisor's lines (a process that died, respawns, stopping) beside its processes', in their format
    logging.basicConfig(level=os.environ.get("KITTIWAKE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    sys.exit(Supervisor(config).run())
