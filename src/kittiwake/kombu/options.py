"""The transport options of `kittiwake.kombu.Transport`, their defaults and why.

Given as kombu's `transport_options` (Celery: `broker_transport_options`) or
as query parameters of the broker URL (`kittiwake://host:7370?lease_secs=5`,
strings converted to the option's type); the URL wins. Unknown options are
ignored, so options meant for another transport do no harm.

`lease_secs` (default 60) plays the part of SQS's and kombu Redis's
`visibility_timeout` (accepted as its alias): how long a delivered message
stays invisible to other consumers. Celery's advice for those transports is
a long one (an hour for Redis, 30 min on SQS) because nothing extends it, so
a task longer than the timeout runs twice. Here the connection renews its
leases every `lease_secs / 3` while it holds them, so a task may run for hours
on a short lease, and the lease only decides how soon the messages of a
killed worker come back: a minute, not half an hour.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

PRIORITY_ORDERS = ("amqp", "asc")


@dataclasses.dataclass(frozen=True, slots=True)
class TransportOptions:
    lease_secs: float = 60.0
    """How long a delivered message stays leased without a renewal."""
    renew_every_secs: float | None = None
    """How often held leases are renewed; None: a third of `lease_secs`."""
    wait_secs: float = 10.0
    """The longest single long-poll; a drain with a shorter timeout waits that long instead."""
    prefetch_max: int = 10
    """Messages leased in one request when the consumer sets no prefetch limit."""
    ack_flush_secs: float = 0.05
    """How long an ack may wait for the next lease request before it is sent on its own."""
    max_attempts: int | None = None
    """Failed attempts (expired leases, requeues) before a message is dead-lettered; None: the broker's 10."""
    requeue_counts_attempt: bool = True
    """Whether `reject(requeue=True)` counts a failed attempt, so a message that always fails
    ends in `<queue>.dead` instead of looping (RabbitMQ quorum queues' delivery-limit)."""
    priority_order: str = "amqp"
    """"amqp": priority 9 is served first (AMQP); "asc": priority 0 first (kombu's Redis transport)."""
    queue_group: str | None = None
    """A consistency group for every queue (`<group>#<queue>`); None: the default group."""

    @property
    def renew_interval_secs(self) -> float:
        return self.renew_every_secs if self.renew_every_secs is not None else self.lease_secs / 3

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> TransportOptions:
        """Known options of `options`, converted to their types (strings from a URL included)."""
        values: dict[str, Any] = {}
        if "visibility_timeout" in options and "lease_secs" not in options:
            values["lease_secs"] = float(options["visibility_timeout"])
        for field in dataclasses.fields(cls):
            if field.name in options:
                values[field.name] = _convert(field.name, field.default, options[field.name])
        result = cls(**values)
        if result.priority_order not in PRIORITY_ORDERS:
            raise ValueError(f"priority_order must be one of {PRIORITY_ORDERS}, got {result.priority_order!r}")
        if result.lease_secs <= 0 or result.wait_secs < 0 or result.prefetch_max < 1:
            raise ValueError("lease_secs must be > 0, wait_secs >= 0 and prefetch_max >= 1")
        return result


def _convert(name: str, default: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(default, bool):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    if name in ("max_attempts", "prefetch_max"):
        return int(value)
    if name in ("queue_group", "priority_order"):
        return str(value) or None if name == "queue_group" else str(value)
    return float(value)
