"""`celery -A proj kittiwake`: an app's task queues as the Kittiwake broker sees them.

Loaded by the `celery` command through the `celery.commands` entry point, so
importing this module — which imports `kittiwake.kombu` — is also what makes
`kittiwake://` broker URLs work in every `celery` command (worker, beat,
inspect, purge) without a line in the app. Celery's own commands show
neither leased nor dead-lettered messages; this one does, per queue.

Loading it also connects Celery's ``worker_shutting_down`` signal
(`kittiwake.kombu.shutdown.connect_to_celery`), so that a worker whose broker has gone away stops
at once on SIGTERM instead of waiting to reconnect.
"""

from __future__ import annotations

from typing import Any

import click
from celery.bin.base import CeleryCommand, handle_preload_options

from kittiwake.constants import DEAD_SUFFIX
from kittiwake.kombu import shutdown
from kittiwake.kombu.names import queue_name
from kittiwake.kombu.transport import Transport

shutdown.connect_to_celery()


@click.command(cls=CeleryCommand, name="kittiwake")
@click.pass_context
@handle_preload_options
def kittiwake_command(ctx: Any, **kwargs: Any) -> None:
    """Show the app's task queues on Kittiwake: ready, leased and dead-lettered messages."""
    app = ctx.obj.app
    with app.connection_for_read() as connection:
        transport = connection.transport
        if not isinstance(transport, Transport):
            raise click.UsageError(f"the broker is not Kittiwake: {connection.as_uri()}")
        group = transport.options.queue_group
        names = sorted(app.amqp.queues.keys())
        stats = {
            entry.queue: entry
            for entry in transport.broker.stats([queue_name(name, group) for name in names], sample=0)
        }
        ctx.obj.echo(f"{'queue':<30} {'ready':>8} {'leased':>8} {'dead':>8}")
        for name in names:
            entry = stats.get(queue_name(name, group))
            ready, leased, dead = (entry.available, entry.leased, entry.dead) if entry else (0, 0, 0)
            ctx.obj.echo(f"{name:<30} {ready:>8} {leased:>8} {dead:>8}")
        ctx.obj.echo(f"dead letters: `kittiwake dead list <queue>` (queue `<queue>{DEAD_SUFFIX}`)")
