"""Commands on tasks: enqueue, lease, dequeue, release, peek, get."""

from __future__ import annotations

import sys
from typing import Any, Iterator

import click

from kittiwake.cli.context import CliContext, default_worker_id, pass_cli
from kittiwake.cli.output import data_cell, print_fields, print_json, print_table, relative_time, say
from kittiwake.client import LeaseRef
from kittiwake.client import EnqueueOutcome, ItemOutcome, LeasedTask, TaskView
from kittiwake.constants import DEFAULT_LEASE_SECS

STDIN_BATCH_TASKS = 1000


def parse_headers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str] | None:
    headers: dict[str, str] = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx=ctx, param=param)
        headers[key] = item
    return headers or None


def stdin_lines() -> Iterator[bytes]:
    for line in sys.stdin.buffer:
        line = line.rstrip(b"\r\n") if line.endswith(b"\r\n") else line.rstrip(b"\n")
        if line:
            yield line


def batches(lines: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@click.command("enqueue")
@click.argument("queue")
@click.argument("data", required=False)
@click.option("--pid", help="Priority id (smaller is served first); an existing pid collapses. Default: FIFO.")
@click.option("--sender", help="Who enqueues the task (see find_by_sender).")
@click.option("--receiver", help="Only this receiver may lease the task. Default: anyone.")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", callback=parse_headers,
              help="A task header; repeat for several.")
@click.option("--max-attempts", type=click.IntRange(min=1),
              help="Failed attempts before the task moves to QUEUE.dead. Default: the broker's (10).")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Read tasks from standard input, one task's data per line (blank lines skipped).")
@pass_cli
def enqueue(
    cli: CliContext,
    queue: str,
    data: str | None,
    pid: str | None,
    sender: str | None,
    receiver: str | None,
    headers: dict[str, str] | None,
    max_attempts: int | None,
    from_stdin: bool,
) -> None:
    """Add a task with DATA (text, sent as UTF-8) to QUEUE, or many with --stdin.

    With --json, prints the list of outcomes (queue, pid, collapsed).
    """
    if from_stdin == (data is not None):
        raise click.UsageError("give DATA or --stdin, not both and not neither")
    if from_stdin and pid is not None:
        raise click.UsageError("--pid with --stdin would collapse every line into one task")
    options: dict[str, Any] = {"sender": sender, "receiver": receiver, "headers": headers,
                               "max_attempts": max_attempts}
    client = cli.client()
    outcomes: list[EnqueueOutcome] = []
    if data is not None:
        outcomes.append(client.enqueue(queue, data.encode("utf-8"), pid=pid, **options))
    else:
        for batch in batches(stdin_lines(), STDIN_BATCH_TASKS):
            outcomes.extend(client.enqueue_many([{"queue": queue, "data": line, **options} for line in batch]))
    if cli.json:
        print_json(outcomes)
    elif len(outcomes) == 1:
        outcome = outcomes[0]
        verb = "collapsed into existing task" if outcome.collapsed else "enqueued"
        say(f"{verb} {outcome.queue} {outcome.pid}")
    else:
        collapsed = sum(outcome.collapsed for outcome in outcomes)
        say(f"enqueued {len(outcomes) - collapsed} tasks to {queue} ({collapsed} collapsed into existing tasks)")


@click.command("lease")
@click.argument("queues", nargs=-1, required=True)
@click.option("--max-tasks", default=1, show_default=True, type=click.IntRange(min=1),
              help="Lease at most this many tasks.")
@click.option("--lease-secs", default=DEFAULT_LEASE_SECS, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="How long the lease lasts unless renewed.")
@click.option("--max-pid", help="Lease only tasks whose pid is at most this (e.g. only tasks that are due).")
@click.option("--receiver", help="Also lease tasks directed at this receiver.")
@click.option("--wait", "wait_secs", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Long-poll: wait up to this many seconds for a task to arrive.")
@click.option("--worker", default=None, help="Lease holder name shown in stats. Default: kittiwake-cli@HOST.")
@pass_cli
def lease(
    cli: CliContext,
    queues: tuple[str, ...],
    max_tasks: int,
    lease_secs: float,
    max_pid: str | None,
    receiver: str | None,
    wait_secs: float,
    worker: str | None,
) -> None:
    """Lease tasks from one or more QUEUES, smallest pid first.

    Prints each task with its LEASE_ID; pass QUEUE PID LEASE_ID to `dequeue`
    to finish it or to `release` to give it back.
    """
    tasks = cli.client().lease(
        list(queues),
        max_tasks=max_tasks,
        lease_secs=lease_secs,
        max_pid=max_pid,
        receiver=receiver,
        wait_secs=wait_secs,
        worker=worker or default_worker_id(),
    )
    if cli.json:
        print_json(tasks)
    elif not tasks:
        say("no task available")
    else:
        print_leased(tasks)


def print_leased(tasks: list[LeasedTask]) -> None:
    print_table(
        None,
        ("queue", "pid", "lease_id", "expires", "attempts", "data"),
        ((t.queue, t.pid, t.lease_id, relative_time(t.expires_at), t.attempts, data_cell(t.data)) for t in tasks),
    )


def report(cli: CliContext, outcome: ItemOutcome, done: str) -> None:
    if cli.json:
        print_json(outcome)
    else:
        say(f"{done} {outcome.queue} {outcome.pid}")


@click.command("dequeue")
@click.argument("queue")
@click.argument("pid")
@click.argument("lease_id", type=int)
@pass_cli
def dequeue(cli: CliContext, queue: str, pid: str, lease_id: int) -> None:
    """Finish the task QUEUE PID held under LEASE_ID: it leaves the queue for good.

    Fails with TASK_NOT_LEASED if another lease took the task since.
    """
    report(cli, cli.client().dequeue(LeaseRef(queue, pid, lease_id)), "dequeued")


@click.command("release")
@click.argument("queue")
@click.argument("pid")
@click.argument("lease_id", type=int)
@click.option("--reason", help="Why the task is given back (kept if it is dead-lettered).")
@pass_cli
def release(cli: CliContext, queue: str, pid: str, lease_id: int, reason: str | None) -> None:
    """Give back the task QUEUE PID held under LEASE_ID, counting a failed attempt.

    At its max attempts the task moves to QUEUE.dead.
    """
    outcome = cli.client().release(LeaseRef(queue, pid, lease_id), reason)
    report(cli, outcome, f"released (moved to {queue}.dead)" if outcome.dead else "released")


def print_views(tasks: list[TaskView]) -> None:
    print_table(
        None,
        ("pid", "state", "enqueued", "attempts", "receiver", "data"),
        ((t.pid, t.state, relative_time(t.enqueued_at), t.attempts, t.receiver, data_cell(t.data)) for t in tasks),
    )


@click.command("peek")
@click.argument("queue")
@click.option("-n", "count", default=10, show_default=True, type=click.IntRange(min=1),
              help="Show at most this many tasks.")
@click.option("--from-pid", help="Start at this pid (inclusive).")
@pass_cli
def peek(cli: CliContext, queue: str, count: int, from_pid: str | None) -> None:
    """Show the first tasks of QUEUE in pid order, without leasing them."""
    tasks = cli.client().peek(queue, count, from_pid)
    if cli.json:
        print_json(tasks)
    elif not tasks:
        say(f"{queue} is empty")
    else:
        print_views(tasks)


@click.command("get")
@click.argument("queue")
@click.argument("pid")
@pass_cli
def get(cli: CliContext, queue: str, pid: str) -> None:
    """Show one task of QUEUE by PID with all its metadata."""
    task = cli.client().get(queue, pid)
    if cli.json:
        print_json(task)
        return
    print_fields(
        f"{task.queue} {task.pid}",
        [
            ("state", task.state),
            ("enqueued", relative_time(task.enqueued_at)),
            ("sender", task.sender),
            ("receiver", task.receiver),
            ("headers", task.headers),
            ("attempts", task.attempts),
            ("deliveries", task.deliveries),
            ("lease owner", task.lease_owner),
            ("lease expires", relative_time(task.lease_expires_at)),
            ("data", data_cell(task.data, 200)),
        ],
    )


COMMANDS = [enqueue, lease, dequeue, release, peek, get]
