"""`kittiwake dead`: look at, requeue and purge the dead letters of a queue.

Every dead letter of `QUEUE` sits in `QUEUE.dead` at `<pid>~<death time>` with the reason and the
original pid in headers (see `kittiwake.engine.dead_letters`). PIDs given to these commands are a
dead letter's own pid or an original pid (all of its dead letters). Named PIDs and `--all` alike
are walked a page at a time, with a progress line, so a million dead letters (of the queue, or of
one pid) never make one long request on the broker; a dead letter that cannot be requeued as
stored stays, reported with BAD_DEAD_LETTER among the ones kept.
"""

from __future__ import annotations

from typing import Callable

import click
from rich.progress import Progress, SpinnerColumn, TextColumn

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import print_json, print_table, relative_time, say
from kittiwake.client import DeadLetterPage, ItemOutcome
from kittiwake.model import DEAD_PID_HEADER, DEAD_REASON_HEADER, DEAD_SUFFIX, dead_queue_of

PAGE = 1000


@click.group("dead")
def dead() -> None:
    """Dead letters of a queue: list, requeue, purge."""


@dead.command("list")
@click.argument("queue")
@click.option("-n", "count", default=50, show_default=True, type=click.IntRange(min=1, max=10_000),
              help="Show at most this many dead letters.")
@pass_cli
def list_dead(cli: CliContext, queue: str, count: int) -> None:
    """Show the dead letters of QUEUE (oldest pid first) with their reasons."""
    dead_queue = queue if queue.endswith(DEAD_SUFFIX) else dead_queue_of(queue)
    views = cli.client().peek(dead_queue, count)
    if cli.json:
        print_json(views)
    elif not views:
        say(f"{queue} has no dead letters")
    else:
        print_table(
            f"dead letters of {queue}",
            ("dead-letter pid", "pid", "reason", "attempts", "died"),
            (
                (
                    view.pid,
                    (view.headers or {}).get(DEAD_PID_HEADER, view.pid),
                    (view.headers or {}).get(DEAD_REASON_HEADER, ""),
                    view.attempts,
                    relative_time(view.enqueued_at),
                )
                for view in views
            ),
        )


def _run(cli: CliContext, what: str, queue: str, pids: tuple[str, ...], every: bool,
         call: Callable[..., DeadLetterPage]) -> None:
    if bool(pids) == every:
        raise click.UsageError("name PIDs or give --all (not both)")
    outcomes: list[ItemOutcome] = []
    named = list(pids) if pids else None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True,
                  disable=cli.json) as progress:
        bar = progress.add_task(f"{what} dead letters of {queue}", total=None)
        after: str | None = None
        while True:
            page = call(queue, named, after_pid=after, limit=PAGE)
            outcomes.extend(page.outcomes)
            done_so_far = sum(outcome.ok for outcome in outcomes)
            progress.update(bar, description=f"{what} dead letters of {queue}: {done_so_far} done")
            if page.next_pid is None:
                break
            after = page.next_pid
    done = [outcome for outcome in outcomes if outcome.ok]
    kept = [outcome for outcome in outcomes if not outcome.ok]
    if cli.json:
        print_json({"done": len(done), "outcomes": outcomes})
    else:
        say(f"{what} {len(done)} dead letter{'s' if len(done) != 1 else ''} of {queue}")
        if kept:
            print_table("left in place", ("dead-letter pid", "code", "why"),
                        ((outcome.pid, outcome.code, outcome.message) for outcome in kept))
    if pids and not done:
        raise SystemExit(1)


@dead.command("requeue")
@click.argument("queue")
@click.argument("pids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Requeue every dead letter of QUEUE.")
@pass_cli
def requeue(cli: CliContext, queue: str, pids: tuple[str, ...], every: bool) -> None:
    """Move dead letters of QUEUE back into it, under their original pids, attempts from zero.

    A dead letter whose pid exists in QUEUE again, or that a consumer holds, stays where it is.
    """
    _run(cli, "requeued", queue, pids, every, cli.client().requeue_dead)


@dead.command("purge")
@click.argument("queue")
@click.argument("pids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Delete every dead letter of QUEUE at once.")
@pass_cli
def purge(cli: CliContext, queue: str, pids: tuple[str, ...], every: bool) -> None:
    """Delete dead letters of QUEUE for good."""
    if every and not pids:
        dead_queue = queue if queue.endswith(DEAD_SUFFIX) else dead_queue_of(queue)
        dropped = cli.client().delete_queue(dead_queue)
        if cli.json:
            print_json({"done": dropped})
        else:
            say(f"purged {dropped} dead letter{'s' if dropped != 1 else ''} of {queue}")
        return
    _run(cli, "purged", queue, pids, every, cli.client().purge_dead)


COMMANDS = (dead,)
