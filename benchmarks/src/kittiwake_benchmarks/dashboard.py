"""`kittiwake bench dashboard`: the broker's HTTP views under a big broker, against `/healthz` on the same port.

A broker subprocess with `--http-port 0` gets `queues` queues (`dash.000000`
…) of one task each, then `workers` threads in a load process lease and
dequeue while enqueueing (each thread: enqueue into a random queue, lease it,
dequeue), so rates move and leases come and go while the views are measured.
Each figure is `samples` sequential GETs on one kept-alive connection after a
few unmeasured ones:

* `healthz`: the reference — the HTTP server and the event loop alone;
* `queues …`: a page of `/api/queues` sorted by name (the engine's order),
  by size, by enqueue rate, by oldest age, filtered by a substring (1 in 10
  queues) and by a glob, and a page deep into the name order;
* `queue`: `/api/queue` of one queue; `overview`: `/api/overview`;
* `metrics`: `/metrics` when the broker serves it;
* `stream delay`: from an enqueue's ack to the `queues` event of an open
  `/api/stream` that shows it, each enqueue at a random moment (the stream
  looks once a second, so about half a second is expected).

`× healthz` is a figure's median over `healthz`'s median (how many times the
plain HTTP round trip it costs); `ratio` in the JSON is the inverse, as in
every bench (above 1 is better). The broker's CPU during each figure is
shown; so is the load's throughput, to show the views do not stall it.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from rich.table import Table

from kittiwake.bench.harness import BrokerProcess, Measured
from kittiwake.bench.jobs import LoadResult
from kittiwake.bench.report import figure, machine_info
from kittiwake.client import Client

QUEUE_PREFIX = "dash."
FILL_BATCH = 10_000
WARMUP_REQUESTS = 5
REFERENCE = "healthz"


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    queues: int = 100_000
    workers: int = 10
    samples: int = 200
    stream_samples: int = 10
    durability: str = "fsync"


def queue_name(index: int) -> str:
    return f"{QUEUE_PREFIX}{index:06d}"


def figures_of(settings: DashboardSettings) -> dict[str, str]:
    """Figure name → path, in the order measured."""
    middle = queue_name(settings.queues // 2)
    return {
        REFERENCE: "/healthz",
        "queues by name": "/api/queues",
        "queues by size": "/api/queues?sort=size",
        "queues by enqueue rate": "/api/queues?sort=enqueue_rate",
        "queues by oldest age": "/api/queues?sort=oldest_age",
        "queues filtered": f"/api/queues?filter={QUEUE_PREFIX}0",
        "queues by glob": f"/api/queues?filter={QUEUE_PREFIX}*7",
        "queues deep page": f"/api/queues?offset={max(0, settings.queues - 100)}&limit=100",
        "queue": f"/api/queue?name={middle}",
        "overview": "/api/overview",
        "metrics": "/metrics",
    }


# -------------------------------------------------------------------- load


def _worker(url: str, queues: int, stop: Any, done: Any, seed: int) -> None:
    pick = random.Random(seed)
    with Client(url) as client:
        while not stop.is_set():
            queue = queue_name(pick.randrange(queues))
            try:
                client.enqueue(queue, "w")
                leased = client.lease(queue, max_tasks=1, lease_secs=30)
                if leased:
                    client.dequeue(leased)
            except Exception:  # noqa: BLE001  a load thread reports nothing; the figures show the broker's state
                continue
            with done.get_lock():
                done.value += 1


def run_workers(url: str, queues: int, workers: int, stop: Any, done: Any) -> None:
    """The load process: `workers` threads leasing and dequeuing until `stop` is set."""
    threads = [threading.Thread(target=_worker, args=(url, queues, stop, done, seed), daemon=True)
               for seed in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# ------------------------------------------------------------------ probes


def _get(connection: http.client.HTTPConnection, path: str) -> int:
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    return response.status


def measure_path(host: str, port: int, path: str, samples: int, broker_cpu: Callable[[], float]) -> Measured | None:
    """`samples` GETs of `path`; None when the broker does not serve it."""
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        if _get(connection, path) == 404:
            return None
        for _ in range(WARMUP_REQUESTS):
            _get(connection, path)
        result = LoadResult()
        cpu_before, started = broker_cpu(), time.monotonic()
        for _ in range(samples):
            start = time.monotonic_ns()
            status = _get(connection, path)
            if status != 200:
                result.errors += 1
                result.first_error = result.first_error or f"HTTP {status}"
                continue
            result.latencies_ns.append(time.monotonic_ns() - start)
        seconds = time.monotonic() - started
        return Measured(result, seconds, round(100.0 * (broker_cpu() - cpu_before) / seconds, 1) if seconds else None)
    finally:
        connection.close()


def measure_stream_delay(broker: BrokerProcess, samples: int) -> Measured:
    """From an enqueue's ack to the stream's `queues` event showing it, `samples` times."""
    assert broker.http_port is not None
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=30)
    connection.request("GET", "/api/stream?view=queues&filter=dash.stream.&sort=size")
    response = connection.getresponse()
    result = LoadResult()

    def next_queues() -> dict[str, Any]:
        name = None
        while True:
            line = response.readline().decode()
            if not line:
                raise RuntimeError("the stream ended")
            if line.startswith("event: "):
                name = line[7:].strip()
            elif line.startswith("data: ") and name == "queues":
                return json.loads(line[6:])

    try:
        next_queues()
        pause = random.Random(0)
        with Client(broker_url(broker)) as client:
            for index in range(samples):
                time.sleep(pause.random())  # anywhere in the stream's second, not just after an event
                client.enqueue(f"dash.stream.{index:04d}", "x")
                acked = time.monotonic_ns()
                while next_queues()["total"] <= index:
                    pass
                result.latencies_ns.append(time.monotonic_ns() - acked)
    finally:
        connection.close()
    return Measured(result, 0.0)


def broker_url(broker: BrokerProcess) -> str:
    return f"kw://{broker.host}:{broker.port}"


# -------------------------------------------------------------------- run


def fill(url: str, queues: int) -> None:
    with Client(url, timeout=300) as client:
        for start in range(0, queues, FILL_BATCH):
            client.enqueue_many([{"queue": queue_name(index), "data": "x"}
                                 for index in range(start, min(queues, start + FILL_BATCH))])


def run_dashboard(settings: DashboardSettings, *, parent_dir: str | None = None,
                  say: Callable[[str], None] = lambda text: None) -> dict[str, Any]:
    """Measure every figure; the report (`kittiwake.bench.report` records under "dashboard")."""
    with tempfile.TemporaryDirectory(prefix="kittiwake-bench-dashboard-", dir=parent_dir) as directory:
        broker = BrokerProcess(Path(directory) / "data", Path(directory) / "broker.log", settings.durability,
                               extra_args=["--http-port", "0"])
        broker.start()
        context = multiprocessing.get_context("spawn")
        stop, done = context.Event(), context.Value("q", 0)
        load = None
        try:
            assert broker.http_port is not None
            say(f"filling {settings.queues:,} queues")
            fill(broker_url(broker), settings.queues)
            process = context.Process(target=run_workers, args=(broker_url(broker), settings.queues,
                                                                settings.workers, stop, done), daemon=True)
            process.start()
            load = process
            time.sleep(1.0)  # the workers connect and get going
            measured: dict[str, Measured | None] = {}
            load_started, ops_before = time.monotonic(), done.value
            for name, path in figures_of(settings).items():
                say(f"measuring {name}")
                measured[name] = measure_path(broker.host, broker.http_port, path, settings.samples, broker.cpu_secs)
            load_ops_per_sec = (done.value - ops_before) / (time.monotonic() - load_started)
            say("measuring stream delay")
            measured["stream delay"] = measure_stream_delay(broker, settings.stream_samples)
        finally:
            try:
                stop.set()
                if load is not None:
                    load.join(30)
                    if load.is_alive():
                        load.kill()
            finally:
                broker.stop()
    return {
        "machine": machine_info(),
        "settings": asdict(settings),
        "dashboard": records(measured),
        "load_ops_per_s": round(load_ops_per_sec, 1),
    }


def records(measured: dict[str, Measured | None]) -> dict[str, Any]:
    reference = measured.get(REFERENCE)
    reference_p50 = (reference.latency_ms or {}).get("p50") if reference is not None else None
    figures: dict[str, Any] = {}
    for name, result in measured.items():
        if result is None:
            figures[name] = figure(None, rate=False, served=False)
            continue
        p50 = (result.latency_ms or {}).get("p50")
        ratio = round(reference_p50 / p50, 4) if reference_p50 and p50 and name != REFERENCE else None
        figures[name] = figure(
            result, rate=False, ratio=ratio,
            reference={"figure": REFERENCE, "latency_ms_p50": reference_p50} if ratio is not None else None,
            times_reference=round(p50 / reference_p50, 1) if ratio is not None and p50 and reference_p50 else None,
        )
    return figures


def table(title: str, figures: dict[str, Any]) -> Table:
    view = Table(title=title, title_justify="left")
    view.add_column("figure")
    for label in ("p50", "p90", "p99", "max"):
        view.add_column(f"{label} ms", justify="right")
    view.add_column("× healthz", justify="right")
    view.add_column("samples", justify="right")
    view.add_column("errors", justify="right")
    view.add_column("broker CPU", justify="right")
    for name, record in figures.items():
        latency = record.get("latency_ms")
        if not latency:
            view.add_row(name, *(["—"] * 4), "", "0", "", "", style="dim")
            continue
        view.add_row(
            name,
            *(f"{latency[key]:.2f}" for key in ("p50", "p90", "p99", "max")),
            f"{record['times_reference']:,.1f}" if record.get("times_reference") else "",
            str(record["samples"]),
            str(record["errors"]),
            f"{record['broker_cpu_percent']:.0f}%" if "broker_cpu_percent" in record else "",
        )
    return view


__all__ = ["DashboardSettings", "run_dashboard", "table"]
