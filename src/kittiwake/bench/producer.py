"""`kittiwake bench producer`: one thread submitting through a batching producer (CMQ's producer).

Everything is measured in one run, against one broker started on a throwaway directory, from one
measuring process of its own (spawned, so the parent's progress bars take no time from it):

* `producer_enqueue`: `--tasks` calls of `producer.enqueue(queue, data)` in a loop from one
  thread, then `flush()`: tasks per second from the first call until flush returned, every task
  durable. The batches the producer sent and why are in the record (`producer_stats`).
* `client_enqueue` (the reference): `--client-tasks` calls of `Client.enqueue` in a loop, each a
  durable round trip.
* `huey_enqueue`: Huey's single enqueue (`f(x)`) on Redis, `--huey-tasks` of them, from a process
  of its own through the `bench peers` submitter, on its claimed database, emptied before and
  after. Redis acknowledges before anything is on disk; the row says how durable. It is measured
  by the benchmarks distribution (`kittiwake_benchmarks.huey_reference`, found through
  `distribution.reference`); where that is not installed the row says it was skipped and why.
* `producer_sent_latency` vs `client_enqueue_latency`: on the idle broker, one task at a time,
  `producer.enqueue(...).sent()` and `client.enqueue(...)` alternately, `--samples` each; the
  producer's added latency is the difference of their percentiles.

Targets: ≥ 50,000 tasks/s from one thread; ≥ 15× Huey's single enqueue; added p50 ≤ 0.2 ms.

Other transports measured against the same references plug in through `extra_sections`: each is
called with the run's `SectionContext` (the broker's URL, the payload, the reference figures) and
returns figure records (`report.figure`'s shape) that join the table and the JSON; `show` also
takes rows measured elsewhere.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rich.console import Console

from kittiwake.bench import distribution, references
from kittiwake.bench.harness import BrokerProcess, latency_summary_ms
from kittiwake.bench.processes import ProcessPool, cpu_secs, serve_jobs
from kittiwake.bench.report import check_target, figure, figures_table, machine_info, numbers_table, progress_bars
from kittiwake.bench.settings import PRODUCER_QUEUE, ProducerBenchSettings

POLL_SECS = 0.05
PROGRESS_EVERY = 1000
WARMUP_TASKS = 2000
HUEY_REFERENCE = "huey_enqueue"  # the entry point of `distribution.REFERENCES_GROUP` measuring it


# ------------------------------------------------------------------ jobs of the measuring process


@dataclass(frozen=True)
class Throughput:
    url: str
    tasks: int
    data_bytes: int
    producer: bool  # through a producer (durable at flush), else Client.enqueue one by one


@dataclass(frozen=True)
class Latency:
    url: str
    samples: int
    data_bytes: int


@dataclass
class Throughputs:
    tasks: int
    seconds: float
    cpu_secs: float
    stats: dict[str, Any] | None = None


@dataclass
class Latencies:
    producer_ns: array = field(default_factory=lambda: array("q"))
    client_ns: array = field(default_factory=lambda: array("q"))


def _throughput(job: Throughput, counter: Any) -> Throughputs:
    from kittiwake import Client

    data = b"x" * job.data_bytes
    with Client(job.url) as client:
        if not job.producer:
            client.enqueue(PRODUCER_QUEUE, data)  # connected before the clock starts
            cpu_before, begin = cpu_secs(), time.perf_counter()
            enqueue = client.enqueue
            for index in range(job.tasks):
                enqueue(PRODUCER_QUEUE, data)
                if index % PROGRESS_EVERY == 0:
                    counter.value = index
            return Throughputs(job.tasks, time.perf_counter() - begin, cpu_secs() - cpu_before)
        with client.producer() as warm:  # a first producer warms the broker's queue and this process
            for _ in range(WARMUP_TASKS):
                warm.enqueue(PRODUCER_QUEUE, data)
        producer = client.producer()
        producer.enqueue(PRODUCER_QUEUE, data).sent()  # connected before the clock starts
        cpu_before, begin = cpu_secs(), time.perf_counter()
        send = producer.enqueue
        for index in range(job.tasks):
            send(PRODUCER_QUEUE, data)
            if index % PROGRESS_EVERY == 0:
                counter.value = index
        producer.flush()
        seconds = time.perf_counter() - begin
        cpu = cpu_secs() - cpu_before
        producer.close()
        stats = asdict(producer.stats)
        return Throughputs(job.tasks, seconds, cpu, stats)


def _latency(job: Latency, counter: Any) -> Latencies:
    from kittiwake import Client

    data = b"x" * job.data_bytes
    measured = Latencies()
    with Client(job.url) as client, client.producer() as producer:
        for _ in range(20):  # both connected and warm
            client.enqueue(PRODUCER_QUEUE, data)
            producer.enqueue(PRODUCER_QUEUE, data).sent()
        clock = time.perf_counter_ns
        for index in range(job.samples):
            begin = clock()
            client.enqueue(PRODUCER_QUEUE, data)
            middle = clock()
            producer.enqueue(PRODUCER_QUEUE, data).sent()
            end = clock()
            measured.client_ns.append(middle - begin)
            measured.producer_ns.append(end - middle)
            counter.value = index + 1
    return measured


def _run(job: Any, counter: Any) -> Any:
    if isinstance(job, Throughput):
        return _throughput(job, counter)
    if isinstance(job, Latency):
        return _latency(job, counter)
    raise ValueError(f"unknown job {job!r}")


def serve(pipe: Any, counter: Any) -> None:
    """The measuring process: run each job the parent sends."""
    serve_jobs(pipe, counter, lambda job: _run(job, counter))


def call_job(pool: ProcessPool, job: Any, bar: Callable[[float, int], None], expected: int) -> Any:
    """Run `job` in the pool's process 0, its progress on `bar` (out of `expected`); its result."""
    pool.start(0, job)
    while not pool.done(0, POLL_SECS):
        done = pool.count(0)
        bar(min(1.0, done / max(1, expected)), done)
    bar(1.0, expected)
    return pool.result(0)


# ------------------------------------------------------------------------------- Huey


def _huey_enqueue(settings: ProducerBenchSettings, payload: str, root: Path,
                  bar: Callable[[float, int], None]) -> dict[str, Any]:
    """Huey's single enqueue, measured by the benchmarks distribution where it is installed, or why it was skipped."""
    measure = distribution.reference(HUEY_REFERENCE)
    if measure is None:
        return {"skipped": f"Huey's reference is part of the {distribution.DISTRIBUTION} distribution, "
                           "not installed here (make setup, or pip install -e ./benchmarks)"}
    result: dict[str, Any] = measure(settings, payload, root, bar)
    return result


# ---------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class SectionContext:
    """What an extra section measures against: the run's broker and the reference figures."""

    url: str
    queue: str
    data_bytes: int
    client_tasks_per_s: float | None
    huey_tasks_per_s: float | None
    client_latency_ms: Mapping[str, float] | None
    bar: Callable[[str], Callable[[float, int], None]]


ExtraSection = Callable[[SectionContext], Mapping[str, dict[str, Any]]]


def run_producer(settings: ProducerBenchSettings, console: Console, *, parent_dir: str | None = None,
                 extra_sections: Sequence[ExtraSection] = ()) -> dict[str, Any]:
    """Every figure of the module docstring, plus each extra section's; the JSON report."""
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-", dir=parent_dir))
    broker = BrokerProcess(root / "data", root / "broker.log", settings.durability)
    pool: ProcessPool | None = None
    figures: dict[str, dict[str, Any]] = {}
    try:
        broker.start()
        url = f"kw://{broker.host}:{broker.port}"
        pool = ProcessPool(1, serve)
        with progress_bars(console) as bar:
            measured = {}
            for name, count, through_producer in (
                ("producer_enqueue", settings.tasks, True),
                ("client_enqueue", settings.client_tasks, False),
            ):
                broker_cpu = broker.cpu_secs()
                measured[name] = call_job(pool, Throughput(url, count, settings.data_bytes, through_producer),
                                       bar(name.replace("_", " ")), count)
                measured[name].broker_cpu = broker.cpu_secs() - broker_cpu
            latencies: Latencies = call_job(pool, Latency(url, settings.samples, settings.data_bytes),
                                         bar("latency, producer and client alternately"), settings.samples)
            huey: dict[str, Any] = (_huey_enqueue(settings, "x" * settings.data_bytes, root, bar("huey single enqueue"))
                    if settings.huey else {"skipped": "--no-huey"})
            client_latency = latency_summary_ms(latencies.client_ns)
            figures = _figures(settings, measured, latencies, huey)
            context = SectionContext(url, PRODUCER_QUEUE, settings.data_bytes, figures["client_enqueue"]["tasks_per_s"],
                                     huey.get("tasks_per_s"), client_latency, bar)
            for section in extra_sections:
                for name, record in section(context).items():
                    figures[name] = _against_references(record, context)
    finally:
        if pool is not None:
            pool.close()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "machine": machine_info(),
        "settings": asdict(settings),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "producer": figures,
    }


def _rate(measured: Throughputs) -> float:
    return round(measured.tasks / measured.seconds, 1) if measured.seconds > 0 else 0.0


def _figures(settings: ProducerBenchSettings, measured: Mapping[str, Any], latencies: Latencies,
             huey: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    producer, client = measured["producer_enqueue"], measured["client_enqueue"]
    producer_rate, client_rate = _rate(producer), _rate(client)
    huey_rate = huey.get("tasks_per_s")
    figures: dict[str, dict[str, Any]] = {}
    record = figure(
        None,
        ratio=references.rate_ratio(producer_rate, client_rate),
        reference={"source": "Client.enqueue one by one, same run", "tasks_per_s": client_rate},
        target={"tasks_per_s_min": references.TARGET_PRODUCER_TASKS_PER_SEC,
                **({"ratio_vs_huey_min": references.TARGET_PRODUCER_RATIO_VS_HUEY} if huey_rate else {})},
        ratio_vs_huey=round(producer_rate / huey_rate, 2) if huey_rate else None,
        producer_stats=producer.stats,
        load_cpu_percent=round(100 * producer.cpu_secs / producer.seconds, 1),
        broker_cpu_percent=round(100 * producer.broker_cpu / producer.seconds, 1),
    )
    record.update(tasks_per_s=producer_rate, samples=producer.tasks)
    record["meets_target"] = check_target(record)
    figures["producer_enqueue"] = record
    figures["client_enqueue"] = {
        **figure(None, load_cpu_percent=round(100 * client.cpu_secs / client.seconds, 1),
                 broker_cpu_percent=round(100 * client.broker_cpu / client.seconds, 1)),
        "tasks_per_s": client_rate, "samples": client.tasks,
    }
    if huey_rate:
        figures["huey_enqueue"] = {**figure(None, service=huey.get("service")), "tasks_per_s": round(huey_rate, 1),
                                   "samples": settings.huey_tasks}
    else:
        figures["huey_enqueue"] = {**figure(None), "skipped": huey.get("skipped")}
    producer_latency = latency_summary_ms(latencies.producer_ns)
    client_latency = latency_summary_ms(latencies.client_ns)
    added = ({key: round(producer_latency[key] - client_latency[key], 4) for key in producer_latency}
             if producer_latency and client_latency else None)
    # each sample pair ran back to back: the median of their differences is steadier than the difference
    # of medians when the disk's commit time wanders
    paired = sorted(p - c for p, c in zip(latencies.producer_ns, latencies.client_ns))
    record = figure(
        None, rate=False,
        ratio=references.latency_ratio(client_latency["p50"], producer_latency["p50"])
        if producer_latency and client_latency else None,
        reference={"source": "Client.enqueue round trip, alternating samples", "latency_ms": client_latency},
        target={"added_p50_ms_max": references.TARGET_PRODUCER_ADDED_P50_MS},
        added_p50_ms=added["p50"] if added else None,
        added_p99_ms=added["p99"] if added else None,
        added_paired_p50_ms=round(paired[len(paired) // 2] / 1e6, 4) if paired else None,
    )
    record.update(latency_ms=producer_latency, samples=len(latencies.producer_ns))
    record["meets_target"] = check_target(record)
    figures["producer_sent_latency"] = record
    figures["client_enqueue_latency"] = {**figure(None, rate=False), "latency_ms": client_latency,
                                         "samples": len(latencies.client_ns)}
    return figures


def _against_references(record: dict[str, Any], context: SectionContext) -> dict[str, Any]:
    """An extra section's record, with its ratio against the plain enqueue when it has none."""
    record = dict(record)
    if record.get("ratio") is None and record.get("tasks_per_s") and context.client_tasks_per_s:
        record["ratio"] = references.rate_ratio(record["tasks_per_s"], context.client_tasks_per_s)
    if record.get("ratio_vs_huey") is None and record.get("tasks_per_s") and context.huey_tasks_per_s:
        record["ratio_vs_huey"] = round(record["tasks_per_s"] / context.huey_tasks_per_s, 2)
    if record.get("target") and record.get("meets_target") is None:
        record["meets_target"] = check_target(record)
    return record


# -------------------------------------------------------------------------------- output


def show(console: Console, report: Mapping[str, Any], extra_rows: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """The figures table (×ref = vs Client.enqueue), the targets, and any `extra_rows` (figure records)."""
    figures = {**report["producer"], **(extra_rows or {})}
    shown = {name: record for name, record in figures.items()
             if record.get("tasks_per_s") is not None or record.get("latency_ms")}
    durability = report["settings"]["durability"]
    console.print(figures_table(f"kittiwake bench producer — one thread, {durability}, ×ref = vs Client.enqueue",
                                shown))
    producer = figures["producer_enqueue"]
    latency = figures["producer_sent_latency"]
    huey = figures.get("huey_enqueue", {})
    rows = [
        ("producer, one thread", f"{producer['tasks_per_s']:,.0f} tasks/s",
         f"≥ {references.TARGET_PRODUCER_TASKS_PER_SEC:,.0f}/s",
         producer["tasks_per_s"] >= references.TARGET_PRODUCER_TASKS_PER_SEC),
        ("× Huey single enqueue (Redis)",
         f"{producer['ratio_vs_huey']:,.1f}×" if producer.get("ratio_vs_huey") else f"— ({huey.get('skipped')})",
         f"≥ {references.TARGET_PRODUCER_RATIO_VS_HUEY:g}×",
         None if not producer.get("ratio_vs_huey") else producer["ratio_vs_huey"] >= references.TARGET_PRODUCER_RATIO_VS_HUEY),
        ("× Client.enqueue one by one", f"{producer['ratio']:,.1f}×" if producer.get("ratio") else "—", "", None),
        ("added latency p50 (enqueue + sent() vs enqueue)", _ms(latency.get("added_p50_ms")),
         f"≤ {references.TARGET_PRODUCER_ADDED_P50_MS:g} ms", latency.get("meets_target")),
        ("added latency p99", _ms(latency.get("added_p99_ms")), "", None),
        ("added latency, median of back-to-back pairs", _ms(latency.get("added_paired_p50_ms")), "", None),
    ]
    for name, record in (extra_rows or {}).items():
        if record.get("tasks_per_s"):
            rows.append((f"{name}", f"{record['tasks_per_s']:,.0f} tasks/s", "", record.get("meets_target")))
    console.print(numbers_table("targets", rows))
    stats = producer.get("producer_stats") or {}
    if stats:
        sends = ", ".join(f"{why} {count:,}" for why, count in (stats.get("sends") or {}).items() if count)
        console.print(f"[dim]producer: {stats['batches_sent']:,} batches for {stats['tasks_sent']:,} tasks "
                      f"(largest {stats['largest_batch_tasks']:,}); sent on {sends}")
    if huey.get("service"):
        console.print(f"[dim]huey: {huey['service']}")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f} ms"
