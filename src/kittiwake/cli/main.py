"""The `kittiwake` command: global options and the list of commands.

Commands live in modules by concept (`task_commands`, `queue_commands`, one
module per bigger command such as `broker_command`); this module only wires
them in. Add a command by appending its module's COMMANDS, or, for a command
with heavy imports, an entry to LAZY_COMMANDS ("module:attribute"), which is
imported only when used and left out if its module is absent.
"""

from __future__ import annotations

import click

from kittiwake import __version__
from kittiwake.cli import dead_commands, queue_commands, task_commands
from kittiwake.cli.context import CliContext
from kittiwake.cli.group import KittiwakeGroup
from kittiwake.client.url import URL_ENV

LAZY_COMMANDS = {
    "broker": "kittiwake.cli.broker_command:broker",
    "sqs": "kittiwake.cli.broker_command:sqs",
    "demo": "kittiwake.cli.demo_command:demo",
    "bench": "kittiwake.cli.bench_command:bench",
    "worker": "kittiwake.cli.worker_command:worker",
    "submit": "kittiwake.cli.submit_command:submit",
    "workers": "kittiwake.cli.workers_command:workers",
    "auth": "kittiwake.cli.auth_command:auth",
    "flow": "kittiwake.cli.flow_commands:flow",
    "spark-worker": "kittiwake.cli.spark_worker_command:spark_worker",
    "gen-data": "kittiwake.cli.gen_data_command:gen_data",
    "mapreduce": "kittiwake.cli.mapreduce_command:mapreduce",
    "migrate": "kittiwake.cli.migrate_command:migrate",
    "copy": "kittiwake.cli.copy_command:copy",
    "cluster": "kittiwake.cli.cluster_commands:cluster",
}


@click.group("kittiwake", cls=KittiwakeGroup, lazy_commands=LAZY_COMMANDS)
@click.option("--url", envvar=URL_ENV, show_envvar=True, metavar="kw[s]://[USER:TOKEN@]HOST:PORT",
              help="Broker to talk to. Default: kw://127.0.0.1:7370. Put credentials in $KITTIWAKE_URL rather "
              "than here: a command line is visible to other local users.")
@click.option("--near", metavar="NODE",
              help="On a cluster (--url kw://HOST:PORT,HOST:PORT,...): the node that leases ask first, before "
              "the nodes known to hold tasks. Default: a node whose address is one of this host's. Ignored "
              "for a single broker.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON for programs instead of tables.")
@click.option("--connect-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to keep retrying to reach the broker before giving up.")
@click.version_option(__version__, prog_name="kittiwake")
@click.pass_context
def cli(ctx: click.Context, url: str | None, near: str | None, as_json: bool, connect_timeout: float) -> None:
    """Kittiwake: a durable task queue. Talk to a broker, or run one.

    Errors print `error CODE: message` on stderr and exit non-zero.
    """
    ctx.obj = CliContext(url=url, near=near, json=as_json, connect_timeout_secs=connect_timeout)


for _command in (*task_commands.COMMANDS, *queue_commands.COMMANDS, *dead_commands.COMMANDS):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the `kittiwake` script and of `python -m kittiwake`."""
    cli(prog_name="kittiwake")
