"""Commands on queues and the broker: queues, stats, joins, delete-queue, ping."""

from __future__ import annotations

import time

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import (
    format_rate,
    format_secs,
    print_fields,
    print_json,
    print_table,
    relative_time,
    say,
)
from kittiwake.client import QueueStats


@click.command("queues")
@click.option("--pattern", help="Only queues whose name matches this regular expression (searched, not anchored; "
                   "RE2 syntax: no backreferences or lookaround).")
@click.option("--min-tasks", default=0, show_default=True, type=click.IntRange(min=0),
              help="Only queues holding at least this many tasks.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Show at most this many queues.")
@click.option("--start-after", metavar="NAME",
              help="Only queues whose name sorts after NAME: give the last queue of one page to see the next.")
@pass_cli
def queues(cli: CliContext, pattern: str | None, min_tasks: int, limit: int, start_after: str | None) -> None:
    """List non-empty queues in name order with their size and leased count.

    A page holds at most --limit queues; when it is full, the next one starts
    with --start-after and the last name shown (the table says which).
    """
    rows = cli.client().list_queues(pattern, min_tasks, limit, start_after=start_after)
    if cli.json:
        print_json(rows)
    elif not rows:
        say("no queues")
    else:
        print_table(None, ("queue", "size", "leased"), ((r.queue, r.size, r.leased) for r in rows))
        if len(rows) == limit:
            say(f"next page: --start-after {rows[-1].queue}")


@click.command("joins")
@click.option("--pattern", help="Only joins whose name matches this regular expression (as for queues).")
@pass_cli
def joins(cli: CliContext, pattern: str | None) -> None:
    """List the joins the broker holds: job queue, ports (queue and mode) and tokens waiting."""
    rows = cli.client().list_joins(pattern)
    if cli.json:
        print_json(rows)
    elif not rows:
        say("no joins")
    else:
        print_table(
            None,
            ("join", "job queue", "ports", "tokens waiting", "max attempts"),
            (
                (r.name, r.job_queue, ", ".join(f"{port}={queue} ({mode})" for port, queue, mode in r.ports),
                 r.tokens_waiting, r.max_attempts or "-")
                for r in rows
            ),
        )


def print_stats(stats: QueueStats) -> None:
    print_fields(
        stats.queue,
        [
            ("size", stats.size),
            ("available", stats.available),
            ("leased", stats.leased),
            ("dead", stats.dead),
            ("blocked", stats.blocked),
            ("enqueue rate 1m / 5m", format_rate(stats.enqueue_rate_1m, stats.enqueue_rate_5m)),
            ("lease rate 1m / 5m", format_rate(stats.lease_rate_1m, stats.lease_rate_5m)),
            ("dequeue rate 1m / 5m", format_rate(stats.dequeue_rate_1m, stats.dequeue_rate_5m)),
            ("avg lease", format_secs(stats.avg_lease_secs)),
            ("oldest task age", format_secs(stats.oldest_task_age_secs)),
        ],
    )
    if stats.leased_sample:
        print_table(
            f"{stats.queue}: leased tasks (sample)",
            ("pid", "worker", "peer", "leased", "expires"),
            (
                (s.pid, s.worker, s.peer, relative_time(s.leased_at), relative_time(s.expires_at))
                for s in stats.leased_sample
            ),
        )


@click.command("stats")
@click.argument("queue_names", metavar="[QUEUE]...", nargs=-1)
@click.option("--pattern", help="Queues whose name matches this regular expression (when no QUEUE is given; "
                                "RE2 syntax: no backreferences or lookaround).")
@click.option("--sample", default=10, show_default=True, type=click.IntRange(0, 1000),
              help="Show up to this many leased tasks per queue, with worker and peer address.")
@pass_cli
def stats(cli: CliContext, queue_names: tuple[str, ...], pattern: str | None, sample: int) -> None:
    """Show statistics of QUEUEs (default: every non-empty queue, or those matching --pattern).

    Size, available, leased and dead-lettered counts; enqueue, lease and
    dequeue rates over 1 and 5 minutes (per second); average lease duration;
    age of the oldest task; and a sample of leased tasks with worker id and
    peer address. With --json, all of these as a list of maps.
    """
    if queue_names and pattern is not None:
        raise click.UsageError("give QUEUE names or --pattern, not both")
    rows = cli.client().stats(list(queue_names) if queue_names else None, pattern, sample=sample)
    if cli.json:
        print_json(rows)
    elif not rows:
        say("no queues")
    else:
        for row in rows:
            print_stats(row)


@click.command("delete-queue")
@click.argument("queue")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def delete_queue(cli: CliContext, queue: str, yes: bool) -> None:
    """Drop QUEUE and every task in it, leased or not. Asks first unless --yes."""
    if not yes:
        click.confirm(f"Delete {queue} and all its tasks?", abort=True, err=True)
    deleted = cli.client().delete_queue(queue)
    if cli.json:
        print_json({"queue": queue, "deleted": deleted})
    else:
        say(f"deleted {queue} ({deleted} tasks)")


@click.command("ping")
@pass_cli
def ping(cli: CliContext) -> None:
    """Check that the broker answers, and how fast."""
    client = cli.client()
    started = time.perf_counter()
    answer = client.ping()
    round_trip_ms = (time.perf_counter() - started) * 1000
    if cli.json:
        print_json({"url": client.url, "round_trip_ms": round_trip_ms, "broker": answer})
    else:
        say(f"{client.url} answered in {round_trip_ms:.1f} ms")


COMMANDS = [queues, stats, joins, delete_queue, ping]
