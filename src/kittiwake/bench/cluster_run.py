"""The run of `kittiwake bench cluster`: brokers and nodes, phases, records (see `bench.cluster`).

Every broker is a real process on a throwaway directory: one broker (`harness.BrokerProcess`) and
cluster nodes (`testing.ClusterNodes`, loopback ports, a map file of their own); every client is a
helper process (`cluster_jobs`) or, for the user path, `kittiwake worker` commands and the `bench
workers` submitter. Broker CPU is read from `/proc/PID/stat` of each broker process, summed.

Phases, each failing on its own (its records say `status: failed` and why; the others still run):

1. one broker and a 2-node cluster, both up: the broker-bound drain on each in turn (fill, then
   every consumer starts at one instant);
2. on the same two, in turn: the user path, `app.map` to `kittiwake worker` (a worker process picks
   its near node among those of this host: here, any); then single enqueues on each in alternating blocks,
   and on a reference: two plain brokers (the one broker and a second one, no cluster) pushed to in
   turn by one client, as the 2-node cluster's FIFO spreader does — what alternating between two
   broker processes costs on this machine, with no routing;
3. the hop runs, a fresh cluster per node count;
4. the load deviation on a fresh cluster of `spread_nodes` nodes.

The report: `{"machine", "settings", "load_average", "cluster": {figure: record}}` with the records
of `bench.report` (plus `status`, `reason` and each figure's own numbers), and beside them the
plain figures: `drain_per_s` (by node count), `ratio_2_vs_1`, `user_path_drain_per_s`,
`user_path_ratio_2_vs_1`, `broker_cpu_us_per_task`, `cpu_per_task_ratio`, `hops_per_pop` (by node
count: `measured`, `model`), `extra_requests_per_task`, `load_deviation`, `push_p50_ms` (by node
count), `node_loads`; a figure that did not run is null. The 2-node drain's record also says
`cpu_ratio_ceiling`: the best ratio its CPU costs per task allow on this machine's cores (brokers
and consumers share them), and `push_2` the median of paired differences against one broker
(`paired_median_extra_ms`) and against the two plain brokers (`paired_median_extra_vs_plain_pair_ms`);
`push_p50_ms` and the records also carry that reference (`2_plain`, `push_2_plain`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from kittiwake import balance
from kittiwake.bench import cluster_jobs as jobs
from kittiwake.bench.cluster_settings import (
    FABRIQ_LOAD_DEVIATION,
    TARGET_CPU_PER_TASK_RATIO_MAX,
    TARGET_EXTRA_REQUESTS_PER_TASK_MAX,
    TARGET_HOPS_TOLERANCE,
    TARGET_LOAD_DEVIATION_MAX,
    TARGET_PUSH_P50_EXTRA_MS,
    TARGET_RATIO_2_VS_1_MIN,
    USER_PATH_CEILING,
    ClusterBenchSettings,
)
from kittiwake.bench.harness import BrokerProcess, latency_summary_ms
from kittiwake.bench.processes import ProcessPool, process_cpu_secs
from kittiwake.bench.report import check_target, machine_info, progress_bars
from kittiwake.testing.cluster_nodes import ClusterNodes

QUEUE = "bench.cluster"
PLAIN_PAIR = "2_plain"  # the push reference: two plain brokers, one client pushing to each in turn
PUSH_LABELS = {"1": "push, 1 broker", "2": "push, 2 nodes", PLAIN_PAIR: "push, 2 plain brokers in turn (reference)"}
POLL_SECS = 0.05
START_DELAY_SECS = 0.5  # between sending the drain jobs and their common start
SETTLE_SECS = 0.3  # after a fill: the nodes' announcements (coalesced ≤ 50 ms) have gone out
READY_TIMEOUT_SECS = 60.0
STALL_SECS = 60.0
FABRIQ_SOURCE = "Fabriq (chapter 4): 1 − 1/s + (s − 1)/(2m), s servers, m messages in all; 1.053 measured at s = 64"

Bar = Callable[[str], Callable[[float, int], None]]


class FigureFailed(Exception):
    """A phase could not finish; its records say why."""


def _record(name: str, label: str, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"figure": name, "label": label, "status": "ok", "reason": None, "tasks_per_s": None,
                              "latency_ms": None, "samples": 0, "errors": 0, "ratio": None, "reference": None,
                              "target": None, "meets_target": None}
    record.update(extra)
    return record


def _failed(record: dict[str, Any], reason: str) -> dict[str, Any]:
    record.update(status="failed", reason=reason, errors=1)
    return record


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _cpu(pids: Sequence[int]) -> float:
    return sum(process_cpu_secs(pid) or 0.0 for pid in pids)


def node_names(count: int) -> list[str]:
    return [f"n{index}" for index in range(count)]


def model_hops(nodes: int, tasks: int) -> float:
    """Fabriq's average hops per pop with `tasks` messages in all spread over `nodes` servers (m > s)."""
    return 1 - 1 / nodes + (nodes - 1) / (2 * tasks)


def paired_median_extra_ms(first: Sequence[int], second: Sequence[int]) -> float | None:
    """The median of `second[i] − first[i]` (ns samples taken in turn), in ms: what the second system
    adds with the disk's and the machine's drift between samples cancelled out."""
    differences = sorted(b - a for a, b in zip(first, second))
    return round(differences[len(differences) // 2] / 1e6, 4) if differences else None


def cpu_ratio_ceiling(one: dict[str, Any], two: dict[str, Any], cores: int) -> float | None:
    """The best 2 nodes ÷ 1 broker drain these CPU costs allow on `cores` cores, had nothing else run:
    a broker serves one core at most, and brokers and consumers together at most `cores`."""
    try:
        broker_1, consumer_1 = float(one["broker_cpu_us_per_task"]), float(one["consumer_cpu_us_per_task"])
        broker_2, consumer_2 = float(two["broker_cpu_us_per_task"]), float(two["consumer_cpu_us_per_task"])
        best_1 = min(1e6 / broker_1, cores * 1e6 / (broker_1 + consumer_1))
        best_2 = min(2e6 / broker_2, cores * 1e6 / (broker_2 + consumer_2))  # each node serves half the tasks
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return round(best_2 / best_1, 3)


def load_deviation(loads: Sequence[int]) -> float:
    """The worst node's distance from the mean, as a fraction of the mean (`balance.load_deviation`)."""
    return balance.load_deviation(loads) / 100.0


# ------------------------------------------------------------------ jobs


def _run_jobs(pool: ProcessPool, work: Sequence[Any], progress: Callable[[float, int], None],
              expected: int) -> list[Any]:
    """One job per pool member, run together; their answers in order (the first failure raised)."""
    for index, job in enumerate(work):
        pool.start(index, job)
    waiting = set(range(len(work)))
    while waiting:
        done = sum(pool.count(index) for index in range(len(work)))
        progress(min(1.0, done / max(1, expected)), done)
        waiting = {index for index in waiting if not pool.done(index, POLL_SECS / len(work))}
    progress(1.0, sum(pool.count(index) for index in range(len(work))))
    results: list[Any] = []
    failure: str | None = None
    for index in range(len(work)):
        try:
            results.append(pool.result(index))
        except RuntimeError as exc:
            failure = failure or str(exc).strip().splitlines()[-1]
    if failure:
        raise FigureFailed(failure)
    return results


def _fill(pool: ProcessPool, url: str, tasks: int, settings: ClusterBenchSettings, bar: Bar, label: str) -> None:
    streams = max(1, min(pool.size, tasks // settings.batch or 1))
    shares = [tasks // streams + (1 if index < tasks % streams else 0) for index in range(streams)]
    _run_jobs(pool, [jobs.Fill(url, QUEUE, share, settings.batch, settings.data_bytes) for share in shares],
              bar(f"fill {label} ×{tasks:,}"), tasks)
    time.sleep(SETTLE_SECS)


def _left(url: str) -> int:
    from kittiwake.client import Client

    with Client(url) as client:
        return sum(row.size for row in client.stats(QUEUE))


# ------------------------------------------------------------------ 1. drains, pushes, 2. the user path


def _drain(pool: ProcessPool, url: str, pids: Sequence[int], nears: Sequence[str | None],
           settings: ClusterBenchSettings, bar: Bar, label: str) -> dict[str, Any]:
    tasks = settings.drain_tasks
    _fill(pool, url, tasks, settings, bar, label)
    start_ns = time.monotonic_ns() + int(START_DELAY_SECS * 1e9)
    work = [jobs.Drain(url, nears[index % len(nears)], QUEUE, settings.batch, start_ns)
            for index in range(settings.consumers)]
    cpu_before = _cpu(pids)
    drained: list[jobs.Drained] = _run_jobs(pool, work, bar(f"drain {label} ×{tasks:,}"), tasks)
    broker_cpu = _cpu(pids) - cpu_before
    done = sum(result.tasks for result in drained)
    seconds = (max(result.last_ns for result in drained) - start_ns) / 1e9
    left = _left(url)
    requests = sum(result.requests for result in drained)
    record = _record(
        "", label,
        tasks_per_s=round(done / seconds, 1) if seconds > 0 else None,
        tasks=done, seconds=round(seconds, 4), left_in_queue=left,
        consumers=settings.consumers, batch=settings.batch,
        broker_cpu_us_per_task=round(broker_cpu / done * 1e6, 2) if done else None,
        broker_cpu_percent=round(100 * broker_cpu / seconds, 1) if seconds > 0 else None,
        consumer_cpu_us_per_task=round(sum(result.cpu_secs for result in drained) / done * 1e6, 2) if done else None,
        requests=requests, requests_per_task=round(requests / done, 6) if done else None,
        leases=sum(result.leases for result in drained), router_hops=sum(result.hops for result in drained),
    )
    if done + left != tasks or left:
        record.update(errors=1, reason=f"{done:,} of {tasks:,} tasks drained, {left:,} left in the queue")
    return record


def _pushes(pool: ProcessPool, systems: dict[str, tuple[str, ...]], settings: ClusterBenchSettings,
            bar: Bar) -> dict[str, list[int]]:
    job = jobs.Pushes(tuple(systems.values()), QUEUE + ".push", settings.push_samples, settings.push_warmup,
                      settings.data_bytes)
    [samples] = _run_jobs(pool, [job], bar(f"push ×{settings.push_samples:,} each, in blocks of 50"),
                          settings.push_samples)
    return dict(zip(systems, samples, strict=True))


def _cluster(root: Path, name: str, count: int, durability: str) -> ClusterNodes:
    return ClusterNodes(root / name, node_names(count), args=["--durability", durability])


def _one_and_two(pool: ProcessPool, root: Path, settings: ClusterBenchSettings, bar: Bar,
                 records: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    """Phases 1 and 2 on one broker and a 2-node cluster, both up: the drains, the user paths, the pushes."""
    from kittiwake.bench.tally import make_payload

    pushed: dict[str, list[int]] = {}
    payload = make_payload(settings.data_bytes)
    with ExitStack() as stack:
        one = BrokerProcess(root / "one" / "data", root / "one" / "broker.log", settings.durability)
        stack.callback(one.stop)
        other = BrokerProcess(root / "other" / "data", root / "other" / "broker.log", settings.durability)
        stack.callback(other.stop)  # a second plain broker: the push reference (`push_2_plain`)
        with ThreadPoolExecutor(max_workers=2) as starting:  # the brokers start while the nodes do
            started = [starting.submit(broker.start) for broker in (one, other)]
            nodes = stack.enter_context(_cluster(root, "two", 2, settings.durability))
        for future in started:
            future.result()
        systems = (("1", "1 broker", one.url, [one.pid], [None]),
                   ("2", "2 nodes", nodes.url, [broker.pid for broker in nodes], node_names(2)))
        for count, label, url, pids, nears in systems:
            key = f"drain_{count}"
            try:
                records[key] = _drain(pool, url, pids, nears, settings, bar, label)
                records[key]["figure"] = key
            except FigureFailed as exc:
                records[key] = _failed(_record(key, label), str(exc))
        for count, label, url, pids, _ in systems:
            key = f"user_path_{count}"
            try:
                records[key] = _user_path(url, pids, settings, root / key, payload, bar, label)
                records[key]["figure"] = key
            except Exception as exc:  # a worker command or the submitter failing ends this row only
                records[key] = _failed(_record(key, label), _why(exc))
        try:
            pushed = _pushes(pool, {"1": (one.url,), "2": (nodes.url,), PLAIN_PAIR: (one.url, other.url)},
                             settings, bar)
        except FigureFailed as exc:
            for key in ("push_1", "push_2", f"push_{PLAIN_PAIR}"):
                records[key] = _failed(_record(key, "push"), str(exc))
    return pushed


# ------------------------------------------------------------------ 2. the user path


def _user_path(url: str, pids: Sequence[int], settings: ClusterBenchSettings, directory: Path,
               payload: str, bar: Bar, label: str) -> dict[str, Any]:
    from kittiwake.bench import tally
    from kittiwake.bench.worker_group import WorkerGroup
    from kittiwake.bench import map_submitter as submitter
    from kittiwake.client import Client
    from kittiwake.worker.registry import live_workers

    directory.mkdir(parents=True, exist_ok=True)
    tally_path = directory / "tally.bin"
    env = {"KITTIWAKE_URL": url, tally.TALLY_ENV: str(tally_path)}
    command = [sys.executable, "-m", "kittiwake", "worker", f"{submitter.APP_MODULE}:app",
               "--processes", str(settings.worker_processes)]
    workers = WorkerGroup([command], {**os.environ, **env}, directory / "workers.log")
    pool = ProcessPool(1, submitter.serve)
    client = Client(url)
    busy = False

    def check() -> None:
        failure = workers.failed()
        if failure:
            raise FigureFailed(failure)

    try:
        workers.start()
        pool.start(0, submitter.Open(env))
        while not pool.done(0, POLL_SECS):
            check()
        pool.result(0)
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            check()
            live = live_workers(client)
            if len(live) >= settings.worker_processes:
                worker_pids = [int(record.info["pid"]) for record in live if record.info.get("pid")]
                break
            if time.monotonic() > deadline:
                raise FigureFailed(f"{len(live)} of {settings.worker_processes} worker processes registered "
                                   f"within {READY_TIMEOUT_SECS:.0f}s{workers.log_tail()}")
            time.sleep(POLL_SECS)
        time.sleep(0.3)
        tasks = settings.user_tasks
        progress = bar(f"user path {label} ×{tasks:,}")
        broker_cpu, workers_cpu = _cpu(pids), _cpu(worker_pids)
        pool.start(0, submitter.Map("null", settings.chunk, count=tasks, payload=payload))
        busy = True
        mapped: Any = None
        last_count, last_change = -1, time.monotonic()
        while True:
            done = tally.count(tally_path)
            progress(min(1.0, done / tasks), done)
            if mapped is None and pool.done(0):
                busy = False
                mapped = pool.result(0)
            if done >= tasks and mapped is not None:
                break
            now = time.monotonic()
            if done != last_count:
                last_count, last_change = done, now
            elif now - last_change > STALL_SECS:
                raise FigureFailed(f"stalled: {done:,} of {tasks:,} tasks done{workers.log_tail()}")
            check()
            time.sleep(POLL_SECS)
        broker_cpu, workers_cpu = _cpu(pids) - broker_cpu, _cpu(worker_pids) - workers_cpu
        runs = tally.records(tally_path)
        seconds = max(run.ended for run in runs) - mapped.submitted_at
        return _record(
            "", label, tasks_per_s=round(len(runs) / seconds, 1) if seconds > 0 else None, tasks=len(runs),
            seconds=round(seconds, 4), worker_command=" ".join(["kittiwake", *command[3:]]),
            broker_cpu_us_per_task=round(broker_cpu / len(runs) * 1e6, 2),
            workers_cpu_us_per_task=round(workers_cpu / len(runs) * 1e6, 2),
            broker_cpu_percent=round(100 * broker_cpu / seconds, 1), workers_cpu_percent=round(100 * workers_cpu / seconds, 1),
        )
    finally:
        if not busy:
            try:
                pool.start(0, submitter.CLOSE)
                pool.done(0, 10.0)
            except (OSError, EOFError):
                pass
        pool.close()
        workers.stop()
        client.close()


# ------------------------------------------------------------------ 3. hops, 4. load


def hop_durability(settings: ClusterBenchSettings) -> str:
    return settings.hop_durability or settings.durability


def _hops(pool: ProcessPool, nodes: ClusterNodes, count: int, settings: ClusterBenchSettings,
          bar: Bar) -> dict[str, Any]:
    tasks = count * settings.hop_tasks_per_node
    _fill(pool, nodes.url, tasks, settings, bar, f"{count} nodes")
    near = node_names(count)[0]
    [popped] = _run_jobs(pool, [jobs.Pops(nodes.url, near, QUEUE, tasks)],
                         bar(f"pop one by one, {count} nodes ×{tasks:,}"), tasks)
    left = _left(nodes.url)
    pops = popped.pops
    measured = popped.remote_requests / pops if pops else None
    model = model_hops(count, tasks)
    deviation = abs(measured / model - 1) if measured is not None else None
    record = _record(
        f"hops_{count}", f"hops per pop, {count} nodes", nodes=count, tasks=tasks, pops=pops, left_in_queue=left,
        measured=round(measured, 4) if measured is not None else None, model=round(model, 4),
        model_deviation=round(deviation, 4) if deviation is not None else None,
        requests_per_pop=round(popped.lease_requests / pops, 4) if pops else None,
        router_hops_per_pop=round(popped.router_hops / pops, 4) if pops else None,
        empty_leases=popped.empties, requests_by_node=popped.per_node, near=near,
        durability=hop_durability(settings),
        reference={"source": FABRIQ_SOURCE, "hops_per_pop": round(model, 4)},
        target={"model_deviation_max": TARGET_HOPS_TOLERANCE},
    )
    if pops != tasks:
        record.update(errors=1, reason=f"{pops:,} of {tasks:,} tasks popped")
    record["meets_target"] = check_target(record) if pops == tasks else False
    return record


def _load(pool: ProcessPool, nodes: ClusterNodes, settings: ClusterBenchSettings, bar: Bar) -> dict[str, Any]:
    from kittiwake.client import Client

    count, total = settings.spread_nodes, settings.producers * settings.producer_tasks
    label = f"{count} nodes × {total:,} FIFO tasks from {settings.producers} producers"
    queue = QUEUE + ".load"
    start_ns = time.monotonic_ns() + int(START_DELAY_SECS * 1e9)
    work = [jobs.Produce(nodes.url, queue, settings.producer_tasks, settings.data_bytes, start_ns)
            for _ in range(settings.producers)]
    _run_jobs(pool, work, bar(f"push, {count} nodes ×{total:,}"), total)
    seconds = (time.monotonic_ns() - start_ns) / 1e9
    with Client(nodes.url) as client:
        per_node = client.node_stats(queue)
    loads = {node: sum(row.size for row in rows) for node, rows in sorted(per_node.items())}
    deviation = load_deviation(list(loads.values()))
    record = _record(
        "load_deviation", label, tasks_per_s=round(total / seconds, 1) if seconds > 0 else None, tasks=total,
        node_loads=loads, load_deviation=round(deviation, 4),
        reference={"source": "Fabriq (chapter 4): worst server vs the mean", "load_deviation": FABRIQ_LOAD_DEVIATION},
        target={"load_deviation_max": TARGET_LOAD_DEVIATION_MAX},
    )
    if sum(loads.values()) != total:
        record.update(errors=1, reason=f"{sum(loads.values()):,} of {total:,} tasks found on the nodes")
    record["meets_target"] = check_target(record)
    return record


def _hops_and_load(pool: ProcessPool, root: Path, settings: ClusterBenchSettings, bar: Bar,
                   records: dict[str, dict[str, Any]]) -> None:
    """Phases 3 and 4: a cluster per hop run; the load run on the hop run's cluster of as many nodes
    when its durability is the run's, else on a cluster of its own."""
    load_key = "load_deviation"
    for count in settings.hop_nodes:
        key = f"hops_{count}"
        try:
            with _cluster(root, key, count, hop_durability(settings)) as nodes:
                records[key] = _hops(pool, nodes, count, settings, bar)
                if count == settings.spread_nodes and hop_durability(settings) == settings.durability:
                    records[load_key] = _load(pool, nodes, settings, bar)
        except Exception as exc:  # a node that did not start, a helper process that failed
            records.setdefault(key, _failed(_record(key, f"hops per pop, {count} nodes", nodes=count), _why(exc)))
    if load_key not in records:
        try:
            with _cluster(root, "load", settings.spread_nodes, settings.durability) as nodes:
                records[load_key] = _load(pool, nodes, settings, bar)
        except Exception as exc:
            records[load_key] = _failed(_record(load_key, "load deviation"), _why(exc))


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, FigureFailed) else f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------ derived figures


def _rate(records: dict[str, dict[str, Any]], key: str) -> float | None:
    record = records.get(key) or {}
    value = record.get("tasks_per_s") if record.get("status") == "ok" else None
    return float(value) if isinstance(value, (int, float)) else None


def _ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    return round(numerator / denominator, digits) if numerator is not None and denominator else None


def _derive(records: dict[str, dict[str, Any]], pushed: dict[str, list[int]]) -> dict[str, Any]:
    one, two = records.get("drain_1", {}), records.get("drain_2", {})
    ratio = _ratio(_rate(records, "drain_2"), _rate(records, "drain_1"))
    if two:
        two.update(ratio=ratio, reference={"source": "1 broker, same run", "tasks_per_s": _rate(records, "drain_1")},
                   target={"ratio_min": TARGET_RATIO_2_VS_1_MIN})
        two["meets_target"] = check_target(two) if two.get("status") == "ok" else False
    user_ratio = _ratio(_rate(records, "user_path_2"), _rate(records, "user_path_1"))
    if "user_path_2" in records:
        records["user_path_2"].update(
            ratio=user_ratio, reference={"source": "1 broker, same run", "tasks_per_s": _rate(records, "user_path_1"),
                                         "expected_ratio_max": USER_PATH_CEILING})
    ok = one.get("status") == "ok" and two.get("status") == "ok"
    if ok and two:
        two["cpu_ratio_ceiling"] = cpu_ratio_ceiling(one, two, os.cpu_count() or 1)
    cpu_ratio = _ratio(two.get("broker_cpu_us_per_task"), one.get("broker_cpu_us_per_task")) if ok else None
    records["cpu_per_task"] = _record(
        "cpu_per_task", "broker CPU per task, 2 nodes ÷ 1 broker", cpu_per_task_ratio=cpu_ratio,
        broker_cpu_us_per_task={"1": one.get("broker_cpu_us_per_task"), "2": two.get("broker_cpu_us_per_task")},
        target={"cpu_per_task_ratio_max": TARGET_CPU_PER_TASK_RATIO_MAX},
    )
    extra = (round(two["requests_per_task"] - one["requests_per_task"], 6) if ok else None)
    records["extra_requests"] = _record(
        "extra_requests", "requests per task of a batched consumer, 2 nodes − 1 broker", extra_requests_per_task=extra,
        requests_per_task={"1": one.get("requests_per_task"), "2": two.get("requests_per_task")},
        target={"extra_requests_per_task_max": TARGET_EXTRA_REQUESTS_PER_TASK_MAX},
    )
    for key in ("cpu_per_task", "extra_requests"):
        if not ok:
            _failed(records[key], "a drain failed")
        records[key]["meets_target"] = check_target(records[key])
    p50: dict[str, float | None] = {"1": None, "2": None, PLAIN_PAIR: None}
    if pushed:
        for nodes, samples in pushed.items():
            summary = latency_summary_ms(samples)
            records[f"push_{nodes}"] = _record(f"push_{nodes}", PUSH_LABELS[nodes], latency_ms=summary,
                                               samples=len(samples))
            p50[nodes] = summary["p50"] if summary else None
        bound = p50["1"] + TARGET_PUSH_P50_EXTRA_MS if p50["1"] is not None else None
        if bound is not None:
            records["push_2"].update(target={"latency_ms_p50_max": round(bound, 4)},
                                     reference={"source": "1 broker, same run, in alternating blocks", "p50_ms": p50["1"]},
                                     paired_median_extra_ms=paired_median_extra_ms(pushed["1"], pushed["2"]),
                                     paired_median_extra_vs_plain_pair_ms=paired_median_extra_ms(
                                         pushed[PLAIN_PAIR], pushed["2"]))
            records["push_2"]["meets_target"] = check_target(records["push_2"])
        records[f"push_{PLAIN_PAIR}"].update(
            paired_median_extra_ms=paired_median_extra_ms(pushed["1"], pushed[PLAIN_PAIR]))
    hops = {str(record["nodes"]): {"measured": record.get("measured"), "model": record.get("model")}
            for key, record in records.items() if key.startswith("hops_") and "nodes" in record}
    load = records.get("load_deviation", {})
    return {
        "drain_per_s": {"1": _rate(records, "drain_1"), "2": _rate(records, "drain_2")},
        "ratio_2_vs_1": ratio,
        "user_path_drain_per_s": {"1": _rate(records, "user_path_1"), "2": _rate(records, "user_path_2")},
        "user_path_ratio_2_vs_1": user_ratio,
        "broker_cpu_us_per_task": records["cpu_per_task"]["broker_cpu_us_per_task"],
        "cpu_per_task_ratio": cpu_ratio,
        "hops_per_pop": hops,
        "extra_requests_per_task": extra,
        "load_deviation": load.get("load_deviation") if load.get("status") == "ok" else None,
        "node_loads": load.get("node_loads"),
        "push_p50_ms": p50,
    }


# ------------------------------------------------------------------ the run


def run_cluster(settings: ClusterBenchSettings, console: Console, *, parent_dir: str | None = None) -> dict[str, Any]:
    """Every phase (module docstring); the JSON report."""
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="kittiwake-bench-cluster-", dir=parent_dir))
    records: dict[str, dict[str, Any]] = {}
    pushed: dict[str, list[int]] = {}
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_signal)  # a SIGTERM cleans up like Ctrl-C
    pool = ProcessPool(max(settings.consumers, settings.producers), jobs.serve)
    try:
        with progress_bars(console) as bar:
            pushed = _one_and_two(pool, root, settings, bar, records)
            _hops_and_load(pool, root, settings, bar, records)
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    summary = _derive(records, pushed)
    order = ["drain_1", "drain_2", "user_path_1", "user_path_2", "cpu_per_task", "extra_requests",
             *[f"hops_{count}" for count in settings.hop_nodes], "load_deviation", "push_1", "push_2",
             f"push_{PLAIN_PAIR}"]
    return {
        "machine": machine_info(),
        "settings": {**asdict(settings), "hop_nodes": list(settings.hop_nodes), "queue": QUEUE},
        # other processes on the machine take cores from the brokers and the clients: 1, 5, 15 min load averages
        "load_average": {"before": [round(value, 2) for value in load_before],
                         "after": [round(value, 2) for value in os.getloadavg()]},
        "cluster": {key: records[key] for key in order if key in records},
        **summary,
    }
