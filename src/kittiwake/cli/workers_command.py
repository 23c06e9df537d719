"""`kittiwake workers`: the live workers of a broker, from the worker registry (`kittiwake.worker.registry`).

One row per worker process: id, host, process id, queues, tasks running,
tasks held (running + leased ahead), slot utilisation since its previous
heartbeat, tasks finished, and when its record runs out unless renewed.
"""

from __future__ import annotations

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import print_json, print_table, relative_time, say
from kittiwake.constants import WORKERS_QUEUE


@click.command("workers")
@click.option("--all", "show_all", is_flag=True, help="Also list records of workers that stopped renewing them.")
@click.option("--prune", is_flag=True, help="Remove the records of dead workers first.")
@click.option("--registry-queue", default=WORKERS_QUEUE, show_default=True, envvar="KITTIWAKE_REGISTRY_QUEUE",
              show_envvar=True, help="Queue of the worker registry (as given to `kittiwake worker`).")
@pass_cli
def workers(cli: CliContext, show_all: bool, prune: bool, registry_queue: str) -> None:
    """List live workers: id, host, pid, running tasks, utilisation."""
    from kittiwake.worker.registry import all_workers, prune_dead

    client = cli.client()
    if prune:
        removed = prune_dead(client, registry_queue)
        if not cli.json:
            say(f"pruned {removed} dead worker records")
    records = [record for record in all_workers(client, queue=registry_queue) if show_all or record.alive]
    rows = [record.to_dict() for record in records]
    if cli.json:
        print_json(rows)
        return
    if not rows:
        say("no live workers")
        return
    print_table(
        None,
        ("worker", "host", "pid", "queues", "running", "held", "util", "finished", "renew by"),
        (
            (
                row["id"] + ("" if row["alive"] else " (dead)"),
                row["host"],
                row["pid"],
                ",".join(row["queues"]),
                "\n".join(row["running"]) or "-",
                row["held"],
                "-" if row["utilisation"] is None else f"{row['utilisation']:.0%}",
                row["finished"],
                relative_time(row["expires_at"]),
            )
            for row in rows
        ),
    )
