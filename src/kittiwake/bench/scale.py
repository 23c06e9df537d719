"""`kittiwake bench scale`: a big queue, many queues, memory and restart (TaskMaster §5.4, §5.3).

TaskMaster holds O(1B) tasks in O(100K) queues per node within a 1–2 GB cache
(§5.4) and recovers in "a few seconds" (§5.3). This benchmark builds that
shape at a size one machine can hold, on a durable broker, and measures what
the size costs:

1. `lease_dequeue_empty`: lease + dequeue latency on a broker holding nothing
   but a small queue (the peer for step 4).
2. `fill_enqueue`: fill one queue with `--big` tasks of 1 KB in batches of
   `--fill-batch`, from several connections; the rate of the first and the
   last tenth shows whether enqueue slows as the queue grows.
3. `spread_enqueue`: `--spread` more tasks dealt round-robin over `--queues`
   queues.
4. `lease_dequeue_big`: lease + dequeue latency at the head of the big queue.
5. `list_queues` (a regex matching 100 of the queues, or 1 in 1000 when there
   are fewer) and `stats` of one queue, with every queue present.
6. `memory`: the broker's RSS (VmRSS, and the peak VmHWM) with all of it loaded.
7. `restart`: SIGTERM, start again on the same directory, and time from
   spawning the process to its listening line and to the first successful
   lease at the head of the big queue (`recovery_s`); then check every task is
   still there and measure lease + dequeue once more on the cold broker
   (`lease_dequeue_after_restart`).
8. `cold_restart`: `--recovery-tasks` tasks (10M by default) written straight
   through the store into a second data directory, then a broker started on
   it: spawn to first lease against the full scan recovery used to run on
   the same file (see `cold_restart`). `--recovery-tasks 0` skips it.

Latency figures are sequential (one connection, one request in flight) so
they show the cost of one call, not queueing behind others.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any, Callable

from rich.console import Console

from kittiwake.bench import references
from kittiwake.bench.cold_restart import FULL_SCAN_SOURCE, run_cold_restart
from kittiwake.bench.harness import Measured, Session, first_lease
from kittiwake.bench.jobs import Scenario
from kittiwake.bench.report import check_target, figure, machine_info, numbers_table, progress_bars, show_figures
from kittiwake.bench.settings import (
    FILL_CONNECTIONS,
    SCALE_BIG_QUEUE,
    SCALE_SMALL_QUEUE,
    SCALE_SPREAD_PREFIX,
    ScaleSettings,
)

WARMUP_OPS = 50
LIST_SAMPLES = 200


def spread_queue(index: int) -> str:
    return f"{SCALE_SPREAD_PREFIX}{index:06d}"


def list_pattern(queue_count: int) -> str:
    """A regex matching 100 spread queues at 100,000 queues, one in ten below that."""
    prefix = "^" + SCALE_SPREAD_PREFIX.replace(".", "\\.")
    return prefix + "0004" if queue_count >= 100_000 else prefix + "\\d*7$"


class RateTrace:
    """Records (time, tasks) from progress callbacks to find the rate at the start and end of a fill."""

    def __init__(self, progress: Callable[[float, int], None]) -> None:
        self.progress = progress
        self.points: list[tuple[float, int]] = []

    def __call__(self, fraction: float, tasks: int) -> None:
        self.points.append((time.monotonic(), tasks))
        self.progress(fraction, tasks)

    def rate_between(self, low: float, high: float, total: int) -> float | None:
        """tasks/s between the moments the count crossed low*total and high*total."""
        inside = [(t, n) for t, n in self.points if low * total <= n <= high * total]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return round((n1 - n0) / (t1 - t0), 1)


def _lease_probe(session: Session, queue: str, samples: int, label: str,
                 bar: Callable[[str], Callable[[float, int], None]]) -> Measured:
    return session.counted(Scenario("lease_dequeue", (queue,)), connections=1, ops=samples,
                           warmup_ops=WARMUP_OPS, progress=bar(label))


def _fill(session: Session, scenario_kind: str, queues: tuple[str, ...], total: int, batch: int, data: int,
          label: str, bar: Callable[[str], Callable[[float, int], None]]) -> tuple[Measured, RateTrace]:
    connections = max(1, min(FILL_CONNECTIONS, math.ceil(total / batch)))
    per_connection = math.ceil(total / connections)
    scenario = Scenario(scenario_kind, queues, batch=batch, budget_tasks=per_connection, data_bytes=data)
    trace = RateTrace(bar(label))
    measured = session.counted(scenario, connections, None, total_tasks=per_connection * connections,
                               progress=trace)
    if measured.result.errors:
        raise RuntimeError(f"{label} failed: {measured.result.first_error}")
    return measured, trace


def _first_lease(session: Session) -> float:
    """Seconds until a lease at the head of the big queue returns a task; the task is then dequeued."""
    started = time.monotonic()
    with session.link() as link:
        _, leased_at = first_lease(link, SCALE_BIG_QUEUE)
    return leased_at - started


def _count_on_disk(session: Session, queue_count: int) -> tuple[int, int]:
    """(tasks in the big queue, spread queues holding tasks) as the broker reports them."""
    with session.link() as link:
        big = link.request("list_queues", pattern=f"^{SCALE_BIG_QUEUE.replace('.', chr(92) + '.')}$", limit=10)
        spread = link.request("list_queues", pattern="^" + SCALE_SPREAD_PREFIX.replace(".", "\\."),
                              limit=max(1, queue_count))
    return (big[0]["size"] if big else 0), len(spread)


def run_scale(settings: ScaleSettings, console: Console, *,
              parent_dir: str | None = None) -> tuple[dict[str, Any], dict[str, Measured]]:
    measured: dict[str, Measured] = {}
    data = settings.data_bytes
    # the big queue is leased from twice (before and after the restart) plus once
    head_samples = max(1, min(settings.samples, (settings.big - 1) // 2 - WARMUP_OPS))
    spread_queues = tuple(spread_queue(k) for k in range(settings.queues))
    pattern = list_pattern(settings.queues)
    extras: dict[str, dict[str, Any]] = {}
    with Session(durability=settings.durability, parent_dir=parent_dir) as session, \
            progress_bars(console) as bar:
        broker = session.broker
        session.fill({SCALE_SMALL_QUEUE: settings.samples + WARMUP_OPS + 10}, progress=bar("small queue (unmeasured)"))
        measured["lease_dequeue_empty"] = _lease_probe(session, SCALE_SMALL_QUEUE, settings.samples,
                                                       "lease + dequeue, empty broker", bar)

        fill, trace = _fill(session, "fifo_enqueue", (SCALE_BIG_QUEUE,), settings.big, settings.fill_batch, data,
                            f"fill {SCALE_BIG_QUEUE} with {settings.big:,}", bar)
        measured["fill_enqueue"] = fill
        extras["fill_enqueue"] = {
            "tasks": settings.big,
            "batch": settings.fill_batch,
            "connections": FILL_CONNECTIONS,
            "tasks_per_s_first_tenth": trace.rate_between(0.0, 0.1, settings.big),
            "tasks_per_s_last_tenth": trace.rate_between(0.9, 1.0, settings.big),
        }
        if settings.spread and settings.queues:
            spread, _ = _fill(session, "spread_enqueue", spread_queues, settings.spread, settings.fill_batch,
                              data, f"spread {settings.spread:,} over {settings.queues:,} queues", bar)
            measured["spread_enqueue"] = spread
            extras["spread_enqueue"] = {"tasks": settings.spread, "queues": settings.queues,
                                        "batch": settings.fill_batch}

        measured["lease_dequeue_big"] = _lease_probe(session, SCALE_BIG_QUEUE, head_samples,
                                                     "lease + dequeue, head of big queue", bar)
        if settings.queues:
            measured["list_queues"] = session.counted(
                Scenario("list_queues", (), pattern=pattern), connections=1, ops=LIST_SAMPLES,
                warmup_ops=5, progress=bar(f"list_queues {pattern}"))
            with session.link() as link:
                matches = len(link.request("list_queues", pattern=pattern, limit=settings.queues))
            extras["list_queues"] = {"pattern": pattern, "matches": matches, "queues": settings.queues}
            measured["stats"] = session.counted(
                Scenario("stats", (spread_queue(settings.queues // 2),)), connections=1, ops=settings.samples,
                warmup_ops=WARMUP_OPS, progress=bar("stats of one queue"))
            extras["stats"] = {"queues": settings.queues}
        rss_mb, rss_peak_mb = broker.rss_mb(), broker.peak_rss_mb()

        shutdown_s = broker.stop()
        restart_at = time.monotonic()
        listening_s = broker.start()
        first_lease_s = (time.monotonic() - restart_at - listening_s) + _first_lease(session)
        recovery_s = listening_s + first_lease_s
        big_on_disk, spread_queues_on_disk = _count_on_disk(session, settings.queues)
        measured["lease_dequeue_after_restart"] = _lease_probe(session, SCALE_BIG_QUEUE, head_samples,
                                                               "lease + dequeue after restart", bar)
        rss_after_restart_mb = broker.rss_mb()
        expected_big = settings.big - (head_samples + WARMUP_OPS) - 1
        cold: dict[str, Any] | None = None
        if settings.recovery_tasks:
            broker.stop()  # its memory and housekeeping stay out of the cold restart's way
            cold = run_cold_restart(session.root, settings.recovery_tasks, settings.durability, bar)

    report = _report(settings, measured, extras, pattern)
    figures = report["scale"]
    figures["memory"] = figure(
        None, rss_mb=rss_mb, rss_peak_mb=rss_peak_mb, rss_after_restart_mb=rss_after_restart_mb,
        target={"rss_mb_max": references.TARGET_RSS_MB},
    )
    figures["memory"]["meets_target"] = check_target(figures["memory"])
    figures["restart"] = figure(
        None,
        recovery_s=round(recovery_s, 3),
        listening_s=round(listening_s, 3),
        first_lease_s=round(first_lease_s, 3),
        shutdown_s=round(shutdown_s, 3),
        tasks_on_disk=big_on_disk + settings.spread,
        big_queue_tasks=big_on_disk,
        big_queue_tasks_expected=expected_big,
        spread_queues_found=spread_queues_on_disk,
        reference={"source": references.TASKMASTER_RECOVERY},
        target={"recovery_s_max": references.TARGET_RECOVERY_S},
    )
    figures["restart"]["meets_target"] = check_target(figures["restart"])
    if cold is not None:
        figures["cold_restart"] = figure(
            None,
            rate=False,
            ratio=round(cold["full_scan_s"] / cold["recovery_s"], 2) if cold["recovery_s"] > 0 else None,
            reference={"source": FULL_SCAN_SOURCE, "full_scan_s": cold["full_scan_s"]},
            target={"recovery_s_max": references.TARGET_RECOVERY_S},
            **cold,
        )
        figures["cold_restart"]["meets_target"] = check_target(figures["cold_restart"])
    figures["rss_mb"] = rss_mb
    figures["recovery_s"] = round(recovery_s, 3)
    return report, measured


def _report(settings: ScaleSettings, measured: dict[str, Measured], extras: dict[str, dict[str, Any]],
            pattern: str) -> dict[str, Any]:
    empty = measured["lease_dequeue_empty"].latency_ms
    empty_p50 = empty["p50"] if empty else None
    figures: dict[str, Any] = {}
    for name, result in measured.items():
        target: dict[str, float] | None = None
        ratio = None
        reference = None
        rate = name in ("fill_enqueue", "spread_enqueue")
        latency = result.latency_ms
        p50 = latency["p50"] if latency else None
        if name in ("lease_dequeue_big", "lease_dequeue_after_restart") and empty_p50:
            reference = {"source": "lease_dequeue_empty", "latency_ms": {"p50": empty_p50}}
            ratio = references.latency_ratio(empty_p50, p50)
            if name == "lease_dequeue_big":
                target = {"latency_ms_p50_max": round(references.TARGET_BIG_QUEUE_LEASE_P50_FACTOR * empty_p50, 4)}
        elif name == "list_queues":
            target = {"latency_ms_p50_max": references.TARGET_LIST_QUEUES_MS}
        elif name == "stats":
            target = {"latency_ms_p50_max": references.TARGET_STATS_MS}
        record = figure(result, rate=rate, ratio=ratio, reference=reference, target=target,
                        **extras.get(name, {}))
        record["meets_target"] = check_target(record)
        figures[name] = record
    return {"machine": machine_info(), "settings": asdict(settings), "scale": figures}


def show(console: Console, report: dict[str, Any]) -> None:
    figures = report["scale"]
    show_figures(console, "kittiwake bench scale", figures)
    memory, restart = figures["memory"], figures["restart"]
    console.print(numbers_table("memory and restart", [
        ("broker RSS", f"{memory['rss_mb']:,.0f} MB (peak {memory['rss_peak_mb']:,.0f} MB, "
                       f"{memory['rss_after_restart_mb']:,.0f} MB after restart)",
         f"≤ {references.TARGET_RSS_MB:,.0f} MB", memory["meets_target"]),
        ("restart", f"{restart['recovery_s']:.2f} s (listening {restart['listening_s']:.2f} s, "
                    f"then first lease {restart['first_lease_s']:.2f} s; stop took {restart['shutdown_s']:.2f} s)",
         f"≤ {references.TARGET_RECOVERY_S:g} s", restart["meets_target"]),
        ("after restart", f"{restart['big_queue_tasks']:,} tasks in {SCALE_BIG_QUEUE} "
                          f"(expected {restart['big_queue_tasks_expected']:,}), "
                          f"{restart['spread_queues_found']:,} spread queues", "", None),
    ]))
    cold = figures.get("cold_restart")
    if cold is not None:
        console.print(numbers_table(f"cold restart with {cold['tasks_on_disk']:,} tasks on disk", _cold_rows(cold)))


def _cold_rows(cold: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    built = (f"{cold['build_s']:,.1f} s through the store ({cold['build_tasks_per_s'] or 0:,} tasks/s), "
             f"{cold['db_mb']:,.0f} MB on disk; {cold['queues']} queues, {cold['leased_running']:,} running leases, "
             f"{cold['leased_expired']:,} expired, {cold['blocked']:,} blocked")
    recovery = (f"{cold['recovery_s']:.2f} s (listening {cold['listening_s']:.2f} s, then first lease "
                f"{cold['first_lease_s']:.2f} s); store.recover() {cold['store_recover_s'] * 1000:,.1f} ms; "
                f"RSS {cold['rss_after_restart_mb']:,.0f} MB")
    scan = f"{cold['full_scan_s']:.2f} s, {cold['ratio'] or 0:,.2f}× the whole recovery"
    found = f"{cold['tasks_found']:,} tasks (expected {cold['tasks_expected']:,})" + "".join(
        f"; {line}" for line in cold["stats_mismatches"])
    return [
        ("built", built, "", None),
        ("recovery", recovery, f"≤ {references.TARGET_RECOVERY_S:g} s", cold["meets_target"]),
        ("reference: full scan", scan, "", None),
        ("stats after restart", found, "", cold["stats_match"]),
    ]
