"""`kittiwake flow run | status | list | cancel | retry`: start and follow runs of data pipelines.

Only `run` imports the flow's module; the others read everything from the
broker (a run's record carries its flow's shape, `kittiwake.flow.records`),
so they work from any machine that reaches the broker. A run is found by its
id in whichever flow has it, or in `--flow NAME`.

Inputs of `run` are `NAME=URI`, the kind of dataset said by a prefix
(`parquet:`, `csv:`, `text:`, `path:`, `inline:` followed by JSON) or, without
one, by the extension (`.parquet`, `.csv`, `.txt`; anything else is a path).
`run --fresh` runs every job (no reuse of an earlier run's outputs); `status`
shows, per step, how many of its done jobs reused one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import format_secs, print_json, print_table, relative_time, say

DEFAULT_DATA_DIR = "kittiwake-runs"
PREFIXES = ("parquet", "csv", "text", "path", "inline")


def parse_input(value: str) -> tuple[str, Any]:
    """("name", Dataset) of one `--input NAME=URI`."""
    from kittiwake.flow.dataset import Dataset

    name, sep, uri = value.partition("=")
    if not sep or not name or not uri:
        raise click.BadParameter(f"{value!r} is not NAME=URI", param_hint="--input")
    kind, colon, rest = uri.partition(":")
    if colon and kind in PREFIXES:
        if kind == "inline":
            try:
                return name, Dataset.inline(json.loads(rest))
            except json.JSONDecodeError as error:
                raise click.BadParameter(f"inline input {name!r} is not JSON: {error}", param_hint="--input")
        return name, getattr(Dataset, kind)(rest)
    lowered = uri.lower()
    if lowered.endswith(".parquet"):
        return name, Dataset.parquet(uri)
    if lowered.endswith(".csv"):
        return name, Dataset.csv(uri)
    if lowered.endswith(".txt"):
        return name, Dataset.text(uri)
    return name, Dataset.path(uri)


@click.group("flow")
def flow() -> None:
    """Data pipelines: start runs of a flow and follow, cancel or retry them."""


@flow.command("run")
@click.argument("reference", metavar="MODULE:FLOW")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=URI",
              help="A flow input (repeatable): NAME=URI, the kind by prefix (parquet:, csv:, text:, path:, "
              "inline:JSON) or by extension (.parquet, .csv, .txt; else a path).")
@click.option("--data-dir", envvar="KITTIWAKE_DATA_DIR", show_envvar=True, default=DEFAULT_DATA_DIR,
              show_default=True, help="Where Spark steps write outputs (<data-dir>/<run>/<step>/<port>/...); "
              "every worker must reach it.")
@click.option("--run-id", help="The run's id (starting it again returns the same run). Default: a new one.")
@click.option("--fresh", is_flag=True, help="Run every job: none reuses an earlier run's outputs (steps declared "
              "with reuse=True still record theirs for the next run).")
@click.option("--wait", is_flag=True, help="Wait for the run to end; exit 1 unless it is done.")
@click.option("--timeout", type=click.FloatRange(min=0), help="With --wait: give up after this many seconds (exit 1).")
@pass_cli
def run(cli: CliContext, reference: str, inputs: tuple[str, ...], data_dir: str, run_id: str | None,
        fresh: bool, wait: bool, timeout: float | None) -> None:
    """Start a run of MODULE:FLOW (the attribute defaults to `flow`); prints its id."""
    from kittiwake.flow.loading import load_flow

    try:
        target = load_flow(reference, [os.getcwd()])
    except (ImportError, AttributeError) as error:
        raise click.UsageError(f"cannot load {reference}: {type(error).__name__}: {error}") from error
    given = dict(parse_input(value) for value in inputs)
    handle = target.run(cli.client(), given, data_dir=data_dir, run_id=run_id, fresh=fresh)
    if not wait:
        if cli.json:
            print_json({"run": handle.id, "flow": target.name})
        else:
            say(handle.id)
        return
    try:
        status = handle.wait(timeout)
    except TimeoutError as error:
        click.echo(f"error TIMEOUT: {error}", err=True)
        sys.exit(1)
    _show_status(cli, status)
    sys.exit(0 if status.state == "done" else 1)


@flow.command("status")
@click.argument("run_id", metavar="RUN")
@click.option("--flow", "flow_name", help="The run's flow (default: whichever flow has the run).")
@pass_cli
def status(cli: CliContext, run_id: str, flow_name: str | None) -> None:
    """A run's state (running, done, failed, cancelled) and each step's tokens and jobs."""
    from kittiwake.flow.runs import find_record, run_status

    client = cli.client()
    _show_status(cli, run_status(client, find_record(client, run_id, flow_name)))


@flow.command("list")
@click.option("--flow", "flow_name", help="Only the runs of this flow.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000), help="Runs shown at most.")
@pass_cli
def list_runs(cli: CliContext, flow_name: str | None, limit: int) -> None:
    """Runs of every flow (or of --flow), oldest first."""
    from kittiwake.flow.runs import list_runs as runs_of

    statuses = runs_of(flow_name, cli.client(), limit=limit)
    if cli.json:
        print_json([status.to_dict() for status in statuses])
        return
    if not statuses:
        say("no runs")
        return
    print_table(None, ("run", "flow", "state", "started", "ended", "jobs done", "running", "dead"), [
        (s.run, s.flow, s.state, relative_time(s.created_at), relative_time(s.ended_at),
         sum(p.done for p in s.steps), sum(p.running for p in s.steps), sum(p.dead for p in s.steps))
        for s in statuses
    ])


@flow.command("cancel")
@click.argument("run_id", metavar="RUN")
@click.option("--flow", "flow_name", help="The run's flow (default: whichever flow has the run).")
@click.option("--reason", help="Why, kept with the run's end.")
@pass_cli
def cancel(cli: CliContext, run_id: str, flow_name: str | None, reason: str | None) -> None:
    """Cancel a run: its jobs are withdrawn (running ones lose their lease) and its tokens removed.
    A run that has ended stays as it ended."""
    from kittiwake.flow.runs import cancel_run, find_record

    client = cli.client()
    _show_status(cli, cancel_run(client, find_record(client, run_id, flow_name), reason))


@flow.command("retry")
@click.argument("run_id", metavar="RUN")
@click.option("--flow", "flow_name", help="The run's flow (default: whichever flow has the run).")
@pass_cli
def retry(cli: CliContext, run_id: str, flow_name: str | None) -> None:
    """Requeue a failed run's dead-lettered jobs (attempts from zero); the run goes on from there."""
    from kittiwake.flow.runs import find_record, retry_run

    client = cli.client()
    count = retry_run(client, find_record(client, run_id, flow_name))
    if cli.json:
        print_json({"run": run_id, "requeued": count})
    else:
        say(f"requeued {count} dead jobs of run {run_id}")


def _show_status(cli: CliContext, status: Any) -> None:
    if cli.json:
        print_json(status.to_dict())
        return
    elapsed = (status.ended_at or time.time()) - status.created_at
    fields = [("run", status.run), ("flow", status.flow), ("state", status.state),
              ("started", relative_time(status.created_at)), ("ended", relative_time(status.ended_at)),
              ("took" if status.ended_at else "running for", format_secs(elapsed)), ("data dir", status.data_dir)]
    if status.reason:
        fields.append(("reason", status.reason))
    for name, items in sorted(status.outputs.items()):
        for indices, dataset in items:
            where = dataset.get("uri") or json.dumps(dataset.get("value"))[:80]
            fields.append((f"output {name}" + "".join(f"/{i}" for i in indices), f"{dataset['kind']} {where}"))
    print_table(f"run {status.run}", ("field", "value"), fields)
    print_table(None, ("step", "engine", "tokens waiting", "queued", "running", "done", "reused", "dead"), [
        (p.step, p.engine, p.waiting, p.queued, p.running, p.done, p.reused, p.dead) for p in status.steps
    ])
    if status.dead:
        print_table("dead jobs", ("step", "key", "reason"), [(d.step, d.key, d.reason) for d in status.dead])


COMMANDS = [flow]
