"""Enqueue throughput over UDP under packet loss (CMQ (001)), with a TCP reference row from the same run.

CMQ carries batched messages over UDP and reports throughput flat under 1.4%
packet loss. This measures the same on one broker: `measure` starts a broker
with `--udp-port`, and for each loss rate puts a `UdpRelay` (seeded, drops
only) between it and one `Client("kwu://…")` shared by `threads` threads, each
enqueueing `batch` tasks per request for `seconds`. Then it drains the queue
over TCP and checks every value, the way the queue checker of the tests does
(docs: the queue checker): **lost** (enqueue answered ok, value not in the
queue), **duplicated** (a value in the queue twice), **unexpected** (a value
nobody enqueued), **recovered** (enqueue timed out, value there anyway). A
valid row has lost = duplicated = unexpected = 0.

Rows: one per loss rate, plus `udp-direct` (the same load over `kwu://`
with no relay: what the relay itself costs, as it runs on the load's own
interpreter) and `tcp` (the same load straight over `kw://`).
A second of unmeasured load warms the broker up first.
`ratio_to_lossless` is each row's tasks/s over the 0% UDP row's; the target is
≥ 0.90 at 1.4% loss. Threads keep several requests in flight, so a lost
datagram stalls one thread for one retransmission timeout while the others
keep the broker busy — that, and small batches per datagram, is what keeps
throughput flat.

Not a CLI command of its own yet: `kittiwake bench udp` (hidden) calls
`measure` and prints `table`.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kittiwake import errors
from kittiwake.bench.harness import BrokerProcess
from kittiwake.bench.udp_relay import Faults, UdpRelay
from kittiwake.client import Client

LOSS_RATES = (0.0, 0.014, 0.05)
TARGET_RATIO = 0.90  # of the 0% row's throughput, at TARGET_LOSS
TARGET_LOSS = 0.014
QUEUE_PREFIX = "bench.udp"
DRAIN_BATCH = 1000
WARMUP_SECS = 1.0


@dataclass(frozen=True, slots=True)
class UdpLossSettings:
    loss_rates: tuple[float, ...] = LOSS_RATES
    seconds: float = 5.0
    threads: int = 16
    batch: int = 8  # tasks per request: 8 tasks of 64 bytes fit one datagram with room to spare
    data_bytes: int = 64
    durability: str = "fsync"
    seed: int = 1
    tcp: bool = True  # also the reference rows: kwu:// without the relay, and kw://


@dataclass(slots=True)
class _Load:
    ok: list[str]
    unknown: list[str]
    failed: int
    requests: int
    elapsed_secs: float


def _values_of(prefix: str, thread: int, start: int, count: int) -> list[str]:
    return [f"{prefix}-{thread}-{n}" for n in range(start, start + count)]


def _run_load(client: Client, queue: str, prefix: str, settings: UdpLossSettings) -> _Load:
    """`threads` threads enqueueing batches for `seconds`; every value accounted as ok, unknown or failed."""
    ok: list[str] = []
    unknown: list[str] = []
    counts = {"failed": 0, "requests": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + settings.seconds

    def producer(thread: int) -> None:
        n = 0
        mine_ok: list[str] = []
        mine_unknown: list[str] = []
        failed = requests = 0
        while time.monotonic() < stop_at:
            values = _values_of(prefix, thread, n, settings.batch)
            n += settings.batch
            tasks = [{"queue": queue, "data": value.encode().ljust(settings.data_bytes, b".")} for value in values]
            requests += 1
            try:
                client.enqueue_many(tasks)
            except (errors.RequestTimeout, errors.ConnectionLost, errors.Unavailable):
                mine_unknown.extend(values)
            except errors.KittiwakeError:
                failed += 1
            else:
                mine_ok.extend(values)
        with lock:
            ok.extend(mine_ok)
            unknown.extend(mine_unknown)
            counts["failed"] += failed
            counts["requests"] += requests

    started = time.monotonic()
    workers = [threading.Thread(target=producer, args=(k,), daemon=True) for k in range(settings.threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return _Load(ok, unknown, counts["failed"], counts["requests"], time.monotonic() - started)


def drain(client: Client, queue: str) -> list[str]:
    """Every value in `queue`, leased and dequeued over TCP, in the order found."""
    values: list[str] = []
    while True:
        leased = client.lease(queue, max_tasks=DRAIN_BATCH, lease_secs=300)
        if not leased:
            return values
        values.extend(task.data.rstrip(b".").decode() for task in leased)
        client.dequeue(leased)


def audit(ok: list[str], unknown: list[str], drained: list[str]) -> dict[str, int]:
    """The queue checker's counts for an enqueue-then-drain run."""
    seen = Counter(drained)
    attempted = set(ok) | set(unknown)
    return {
        "lost": sum(1 for value in ok if value not in seen),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "unexpected": sum(1 for value in seen if value not in attempted),
        "recovered": sum(1 for value in unknown if value in seen),
    }


def _row(transport: str, loss: float | None, load: _Load, counts: dict[str, int]) -> dict[str, Any]:
    tasks = len(load.ok)
    return {
        "transport": transport,
        "loss": loss,
        "tasks": tasks,
        "requests": load.requests,
        "seconds": round(load.elapsed_secs, 3),
        "tasks_per_s": round(tasks / load.elapsed_secs, 1) if load.elapsed_secs > 0 else 0.0,
        "unknown": len(load.unknown),
        "failed_requests": load.failed,
        **counts,
        "valid": counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0,
    }


def measure(settings: UdpLossSettings = UdpLossSettings(), *, parent_dir: str | None = None) -> list[dict[str, Any]]:
    """One broker; a row per loss rate over UDP through the relay, then the TCP reference row."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kittiwake-bench-udp-", dir=parent_dir) as scratch:
        broker = BrokerProcess(Path(scratch) / "data", Path(scratch) / "broker.log", settings.durability,
                               extra_args=["--udp-port", "0"])
        broker.start()
        try:
            tcp_url = f"kw://{broker.host}:{broker.port}"
            assert broker.udp_port is not None
            with Client(tcp_url) as checker_client:
                # unmeasured: the first row must not pay for a cold broker (caches, the SQLite file growing)
                warmup = replace(settings, seconds=min(settings.seconds, WARMUP_SECS))
                with Client(f"kwu://{broker.host}:{broker.udp_port}") as client:
                    _run_load(client, f"{QUEUE_PREFIX}.warmup", "w", warmup)
                drain(checker_client, f"{QUEUE_PREFIX}.warmup")
                for index, loss in enumerate(settings.loss_rates):
                    queue = f"{QUEUE_PREFIX}.{index}"
                    faults = Faults(drop_rate=loss, seed=settings.seed + index)
                    with UdpRelay((broker.host, broker.udp_port), faults) as relay:
                        with Client(f"kwu://{relay.host}:{relay.port}") as client:
                            load = _run_load(client, queue, f"u{index}", settings)
                            channel = client._channel
                            sent, retransmits = getattr(channel, "sent", 0), getattr(channel, "retransmits", 0)
                        counts = relay.counts()
                    row = _row("udp", loss, load, audit(load.ok, load.unknown, drain(checker_client, queue)))
                    row.update(datagrams_sent=sent, retransmits=retransmits,
                               relay_dropped=counts.total("dropped"), relay_received=counts.total("received"))
                    rows.append(row)
                if settings.tcp:
                    queue = f"{QUEUE_PREFIX}.direct"
                    with Client(f"kwu://{broker.host}:{broker.udp_port}") as client:
                        load = _run_load(client, queue, "d", settings)
                        retransmits = getattr(client._channel, "retransmits", 0)
                    row = _row("udp-direct", None, load, audit(load.ok, load.unknown, drain(checker_client, queue)))
                    row.update(retransmits=retransmits)
                    rows.append(row)
                    queue = f"{QUEUE_PREFIX}.tcp"
                    with Client(tcp_url) as client:
                        load = _run_load(client, queue, "t", settings)
                    rows.append(_row("tcp", None, load, audit(load.ok, load.unknown, drain(checker_client, queue))))
        finally:
            broker.stop()
    lossless = next((row["tasks_per_s"] for row in rows if row["transport"] == "udp" and row["loss"] == 0.0), None)
    for row in rows:
        row["ratio_to_lossless"] = round(row["tasks_per_s"] / lossless, 3) if lossless else None
        if row["transport"] == "udp" and row["loss"] == TARGET_LOSS:
            row["target"] = {"ratio_to_lossless_min": TARGET_RATIO}
            row["meets_target"] = row["ratio_to_lossless"] is not None and row["ratio_to_lossless"] >= TARGET_RATIO
    return rows


def table(rows: list[dict[str, Any]]) -> Any:
    """The rows as a rich table."""
    from rich.table import Table

    result = Table(title="kittiwake bench udp — enqueue through a lossy relay, one broker", title_justify="left")
    for column in ("transport", "loss", "tasks/s", "× 0%", "requests", "retransmits", "dropped",
                   "unknown", "lost", "duplicated", "unexpected", "target", "met"):
        result.add_column(column, justify="left" if column == "transport" else "right")
    for row in rows:
        met = row.get("meets_target")
        result.add_row(
            row["transport"],
            "—" if row["loss"] is None else f"{row['loss']:.1%}",
            f"{row['tasks_per_s']:,.0f}",
            "—" if row.get("ratio_to_lossless") is None else f"{row['ratio_to_lossless']:.2f}",
            f"{row['requests']:,}",
            f"{row.get('retransmits', 0):,}" if row["transport"] != "tcp" else "—",
            f"{row.get('relay_dropped', 0):,}" if row["transport"] == "udp" else "—",
            f"{row['unknown']:,}",
            f"{row['lost']}",
            f"{row['duplicated']}",
            f"{row['unexpected']}",
            f"≥ {TARGET_RATIO:.2f} × 0%" if "target" in row else "",
            "" if met is None else ("[green]yes" if met else "[red]no"),
        )
    return result
