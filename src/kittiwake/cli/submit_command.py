"""`kittiwake submit -- CMD ARGS`: a shell command as a task (the built-in `kittiwake.shell` task).

Any `kittiwake worker` serving the queue runs it (every app has the built-in
task). Without `--wait` the command's result is not kept: the task id is
printed and the command returns at once. With `--wait` it waits for the
result, prints the command's output (its last 4,000 characters, stdout and
stderr merged) and exits with the command's exit code; a task that failed
(dead-lettered, timed out, cancelled) prints `error TASK_FAILED: ...` and exits 1.
"""

from __future__ import annotations

import sys

import click

from kittiwake import errors
from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import print_json, say
from kittiwake.cli.task_commands import parse_headers


@click.command("submit", context_settings={"ignore_unknown_options": True})
@click.option("--queue", "-q", default="default", show_default=True, help="Queue to submit into.")
@click.option("--wait", is_flag=True, help="Wait for the command to finish; exit with its exit code.")
@click.option("--wait-timeout", type=click.FloatRange(min=0), help="With --wait: give up after this many seconds.")
@click.option("--timeout", "timeout_secs", type=click.FloatRange(min=0.001),
              help="Kill the command after this many seconds on the worker.")
@click.option("--key", help="Idempotency key: a second submit with the same key while the first waits is one task.")
@click.option("--delay", type=click.FloatRange(min=0), help="Do not start before this many seconds from now.")
@click.option("--cwd", help="Working directory on the worker. Default: the worker's.")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", callback=parse_headers,
              help="An environment variable for the command; repeat for several.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_cli
def submit(
    cli: CliContext,
    queue: str,
    wait: bool,
    wait_timeout: float | None,
    timeout_secs: float | None,
    key: str | None,
    delay: float | None,
    cwd: str | None,
    env: dict[str, str] | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (after `--`) on a worker as a task."""
    from kittiwake.app import App
    from kittiwake.app.shell import SHELL_TASK

    app = App(cli.url, connect_timeout=cli.connect_timeout_secs, near=cli.near)
    try:
        shell = app.tasks[SHELL_TASK].with_options(queue=queue, ignore_result=not wait)
        handle = shell.submit_call((list(command),), {"cwd": cwd, "env": env, "timeout_secs": timeout_secs},
                                   key=key, delay=delay)
        if not wait:
            if cli.json:
                print_json({"id": handle.id, "queue": handle.queue, "pid": handle.pid})
            else:
                say(handle.id)
            return
        try:
            result = handle.result(wait_timeout)  # a TaskFailed prints as `error TASK_FAILED: ...`
        except TimeoutError as error:
            raise errors.RequestTimeout(f"{error}; the task stays queued as {handle.id}") from None
        if cli.json:
            print_json({"id": handle.id, **result})
        else:
            click.echo(result["output"], nl=not result["output"].endswith("\n"))
        sys.exit(result["exit_code"] if 0 <= result["exit_code"] < 256 else 1)
    finally:
        app.close()
