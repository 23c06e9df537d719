"""`kittiwake spark-worker MODULE:FLOW...`: run the Spark steps of flows on one long-lived SparkSession.

See `kittiwake.flow.spark_worker` for what the worker does; this module
parses options, loads the flows, starts the worker and turns SIGTERM and
Ctrl-C into a graceful stop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import click

from kittiwake.cli.context import CliContext, pass_cli


def _conf(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--conf")
        conf[key.strip()] = setting
    return conf


@click.command("spark-worker")
@click.argument("flows", nargs=-1, required=True, metavar="MODULE:FLOW...")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master of the worker's session: local[N], spark://HOST:PORT, yarn, ...")
@click.option("--remote", metavar="sc://HOST:PORT",
              help="Run the steps through a Spark Connect server instead of a driver of its own (no JVM here; "
              "the server's Python workers must import kittiwake for its data source). Excludes --master.")
@click.option("--concurrency", "-c", default=2, show_default=True, type=click.IntRange(1, 256),
              help="Jobs run at once, each in its own thread and FAIR scheduler pool of the one session.")
@click.option("--lease-secs", type=click.FloatRange(1, 43_200),
              help="Lease of a job, renewed at a third of it while the job runs; a killed worker's job "
              "runs again this long after its last renewal. Default: the flows' (60 s unless set).")
@click.option("--wait-secs", default=1.0, show_default=True, type=click.FloatRange(0.05, 300),
              help="Long-poll wait of a lease.")
@click.option("--shutdown-secs", default=30.0, show_default=True, type=click.FloatRange(min=0),
              help="On SIGTERM: how long running jobs may take to finish before their Spark jobs are "
              "cancelled and they are handed back (without counting an attempt).")
@click.option("--conf", "conf", multiple=True, callback=_conf, metavar="KEY=VALUE",
              help="A Spark setting of the session (repeatable), e.g. --conf spark.executor.memory=2g.")
@click.option("--name", help="Prefix of the worker's id. Default: spark.")
@click.option("--no-fuse", is_flag=True, help="Run and write every step, even those declared with fuse='plan' or "
              "fuse='cache': no output is left to its consumers' plans or kept cached for the next step "
              "(see kittiwake.flow.plan_fusion and kittiwake.flow.fusion).")
@pass_cli
def spark_worker(
    cli: CliContext,
    flows: tuple[str, ...],
    master: str,
    remote: str | None,
    concurrency: int,
    lease_secs: float | None,
    wait_secs: float,
    shutdown_secs: float,
    conf: dict[str, str],
    name: str | None,
    no_fuse: bool,
) -> None:
    """Run the Spark steps of MODULE:FLOW (e.g. `pipelines:sales`; the attribute defaults to `flow`).

    Holds one SparkSession (spark.scheduler.mode=FAIR) for its whole life, leases the jobs of the
    flows' Spark steps as slots free up, writes each job's DataFrames as Parquet under the run's
    data directory and finishes the job with one atomic update that also emits its output tokens.
    Prints `kittiwake spark-worker <id> pid <pid> ready` once serving. SIGTERM stops leasing,
    hands back jobs not started, lets running ones finish (--shutdown-secs) and exits 0.
    With --remote sc://HOST:PORT the session is a Spark Connect client of that server instead.
    """
    from kittiwake import errors

    master_given = click.get_current_context().get_parameter_source("master") is click.core.ParameterSource.COMMANDLINE
    if remote is not None and master_given:
        raise click.UsageError("--remote and --master exclude each other: the Connect server has the master")
    if remote is not None and not remote.startswith("sc://"):
        raise click.BadParameter(f"{remote!r} is not a Spark Connect URL (sc://HOST:PORT)", param_hint="--remote")
    from kittiwake.flow.loading import load_flow
    from kittiwake.flow.spark_worker import SparkWorker
    from kittiwake.worker.loop import default_worker_id

    logging.basicConfig(level=os.environ.get("KITTIWAKE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per closed gateway connection otherwise
    try:
        loaded = [load_flow(reference, [os.getcwd()]) for reference in flows]
    except Exception as error:  # say it once, before a JVM starts
        if isinstance(error, errors.KittiwakeError):
            raise
        raise click.UsageError(f"cannot load {' '.join(flows)}: {type(error).__name__}: {error}") from error
    worker = SparkWorker(loaded, url=cli.url, master=master, remote=remote, conf=conf, concurrency=concurrency,
                         lease_secs=lease_secs, wait_secs=wait_secs, shutdown_secs=shutdown_secs,
                         worker_id=default_worker_id(name or "spark"), fuse=not no_fuse)
    signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
    signal.signal(signal.SIGINT, lambda signum, frame: worker.stop())
    worker.on_ready = lambda: print(f"kittiwake spark-worker {worker.id} pid {os.getpid()} ready", flush=True)
    worker.run()
    sys.exit(0)
