"""`kittiwake broker`: run a broker on the embedded SQLite store until SIGTERM or SIGINT.

Prints one line to stdout once it listens — `kittiwake broker listening on
HOST:PORT data=DIR durability=MODE` — and logs to stderr.
"""

from __future__ import annotations

import sqlite3
import sys

import click

from kittiwake.broker.config import DEFAULT_DATA_DIR, DEFAULT_PORT, BrokerConfig
from kittiwake.protocol import DEFAULT_MAX_FRAME


@click.command("broker")
@click.option("--data", "data_dir", default=DEFAULT_DATA_DIR, show_default=True, type=click.Path(file_okay=False),
              help="Directory of the SQLite store; created if missing.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 for every interface).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port; 0 picks a free one (the listening line says which).")
@click.option("--durability", default="fsync", show_default=True, type=click.Choice(["fsync", "os"]),
              help="fsync: an ok reply survives power loss. os: it survives a broker crash, not a power loss.")
@click.option("--max-frame", default=DEFAULT_MAX_FRAME, show_default=True, type=click.IntRange(64 * 1024, (1 << 32) - 1),
              help="Largest frame accepted, in bytes; a bigger length prefix closes the connection.")
@click.option("--max-connections", default=10_000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Connections beyond this get TOO_MANY_CONNECTIONS and are closed.")
@click.option("--cache-mb", default=256, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Memory for the heads of queues kept in memory, in MiB.")
@click.option("--head-tasks", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Tasks per queue loaded into memory ahead of leases.")
@click.option("--sqlite-cache-mb", default=64, show_default=True, type=click.IntRange(1, 1 << 20),
              help="SQLite page cache, in MiB.")
def broker(
    data_dir: str,
    host: str,
    port: int,
    durability: str,
    max_frame: int,
    max_connections: int,
    cache_mb: int,
    head_tasks: int,
    sqlite_cache_mb: int,
) -> None:
    """Run a broker on the embedded store until SIGTERM or SIGINT."""
    from kittiwake.broker.server import run_broker

    try:
        config = BrokerConfig(
            data_dir=data_dir,
            host=host,
            port=port,
            durability=durability,
            max_frame=max_frame,
            max_connections=max_connections,
            cache_mb=cache_mb,
            head_tasks=head_tasks,
            sqlite_cache_mb=sqlite_cache_mb,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    try:
        status = run_broker(config)
    except (OSError, sqlite3.Error) as exc:  # the port is taken, the data directory cannot be opened, ...
        from kittiwake.store.faults import diagnose_directory

        fault = diagnose_directory(data_dir)
        why = f" ({data_dir}: {fault.value})" if fault is not None else ""
        click.echo(f"kittiwake broker: cannot start: {exc}{why}", err=True)
        sys.exit(1)
    sys.exit(status)
