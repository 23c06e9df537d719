"""`kittiwake bench latency`: one request at a time on an idle broker, against Fabriq and the disk.

Fabriq reports push latency p50 0.42 ms, p90 0.89 ms, p99.9 11.98 ms (its
Figure 43). Kittiwake replies only once a task is on disk, so the floor under
its latency is the disk's own commit time; this benchmark measures that floor
in the same run and in the broker's own data directory, and reports each
figure against both. Three figures, each from `--samples` sequential samples
in one load process (one connection, nothing else running):

* `enqueue_round_trip`: send an enqueue of one 1 KB FIFO task, receive its
  reply (durable).
* `enqueue_to_lease`: a worker is parked in a long-poll lease on an empty
  queue; time from sending an enqueue on another connection to receiving the
  worker's lease reply. The worker dequeues the task before the next sample.
* `fsync`: write 4 KiB over a block of an already synced file and
  `os.fsync` it — a WAL commit once SQLite reuses its WAL file, so the floor
  under a durable reply; `fsync_append`: the same appended to the file, whose
  size then changes too (a commit while the WAL grows; dearer on most file
  systems). At most `--fsync-samples` each, stopping after 20 s on a slow disk.

Targets: enqueue round trip p50 ≤ fsync p50 + 0.3 ms (the in-place figure,
the stricter floor) and p99.9 ≤ 5 ms.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console

from kittiwake.bench import references
from kittiwake.bench.harness import Measured, Session
from kittiwake.bench.jobs import FsyncProbe, Scenario, WakeProbe
from kittiwake.bench.report import check_target, figure, machine_info, progress_bars
from kittiwake.bench.settings import (
    FSYNC_BLOCK_BYTES,
    LATENCY_ROUND_TRIP_QUEUE,
    LATENCY_WAKE_QUEUE,
    LatencySettings,
)

WARMUP_SAMPLES = 100


def run_latency(settings: LatencySettings, console: Console, *,
                parent_dir: str | None = None) -> tuple[dict[str, Any], dict[str, Measured]]:
    measured: dict[str, Measured] = {}
    with Session(durability=settings.durability, processes=1, parent_dir=parent_dir) as session, \
            progress_bars(console) as bar:
        data_dir = str(session.broker.data_dir)
        measured["fsync"] = session.probe(FsyncProbe(data_dir, settings.fsync_samples), settings.fsync_samples,
                                          bar("fsync of 4 KiB, in place"))
        measured["fsync_append"] = session.probe(FsyncProbe(data_dir, settings.fsync_samples, append=True),
                                                 settings.fsync_samples, bar("fsync of 4 KiB, appended"))
        measured["enqueue_round_trip"] = session.counted(
            Scenario("fifo_enqueue", (LATENCY_ROUND_TRIP_QUEUE,), data_bytes=settings.data_bytes),
            connections=1, ops=settings.samples, warmup_ops=WARMUP_SAMPLES, progress=bar("enqueue round trip"))
        measured["enqueue_to_lease"] = session.probe(
            WakeProbe(session.broker.host, session.broker.port, LATENCY_WAKE_QUEUE, settings.samples,
                      data_bytes=settings.data_bytes),
            settings.samples + WakeProbe.warmup, bar("enqueue → parked lease"))

    fsync_latency = measured["fsync"].latency_ms
    fsync_p50 = fsync_latency["p50"] if fsync_latency else None
    fabriq = {"source": references.FABRIQ, "latency_ms": references.FABRIQ_PUSH_LATENCY_MS}
    figures: dict[str, Any] = {}
    for name in ("enqueue_round_trip", "enqueue_to_lease"):
        latency = measured[name].latency_ms
        p50 = latency["p50"] if latency else None
        target = None
        if name == "enqueue_round_trip" and fsync_p50 is not None:
            target = {
                "latency_ms_p50_max": round(fsync_p50 + references.TARGET_P50_OVER_FSYNC_MS, 4),
                "latency_ms_p999_max": references.TARGET_P999_MS,
            }
        record = figure(
            measured[name],
            rate=name == "enqueue_round_trip",  # the wake probe's pace is set by its parking pause
            ratio=references.latency_ratio(references.FABRIQ_PUSH_LATENCY_MS["p50"], p50),
            reference=fabriq,
            target=target,
            over_fsync_p50_ms=round(p50 - fsync_p50, 4) if p50 is not None and fsync_p50 is not None else None,
        )
        record["meets_target"] = check_target(record)
        figures[name] = record
    figures["fsync"] = figure(measured["fsync"], rate=False, block_bytes=FSYNC_BLOCK_BYTES, write="in place")
    figures["fsync_append"] = figure(measured["fsync_append"], rate=False, block_bytes=FSYNC_BLOCK_BYTES,
                                     write="append")
    report = {
        "machine": machine_info(),
        "settings": asdict(settings),
        "latency": figures,
    }
    return report, measured
