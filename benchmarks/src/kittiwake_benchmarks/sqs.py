"""`kittiwake bench sqs`: one boto3 send → receive → delete loop against Kittiwake's SQS API and `moto_server`.

The same script runs against both endpoints in the same run, one after the
other, with the same load: `processes` load processes of `threads` threads,
each thread with its own boto3 client, each doing for `seconds`

* `single`: send_message, receive_message (one message), delete_message;
* `batch`: send_message_batch of 10, receive_message of up to 10,
  delete_message_batch of what came back.

A figure's tasks/s is messages sent, received and deleted per second; its
latency is one whole loop (three calls). Kittiwake runs as a broker
subprocess with `--sqs-port 0` (ok means on disk with `--durability fsync`,
the default); moto runs as `moto_server` (moto's standalone server, state in
memory), the reference. `ratio` is Kittiwake's rate over moto's in the same
figure; the target is ≥ 3×. boto3 spends about as much CPU per call as the
servers do, so the load processes' CPU is shown too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kittiwake.bench.harness import BrokerProcess, Measured
from kittiwake.bench.jobs import LoadResult
from kittiwake.bench.processes import cpu_secs
from kittiwake.bench.report import check_target, figure, machine_info

if TYPE_CHECKING:  # boto3 is imported by the processes that send (the `sqs` extra)
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

FIGURES = ("single", "batch")
TARGET_RATIO = 3.0
SERVER_START_SECS = 60.0
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench", "region_name": "us-east-1"}


@dataclass(frozen=True, slots=True)
class SqsBenchSettings:
    seconds: float = 5.0
    warmup_secs: float = 1.0
    processes: int = 2
    threads: int = 8
    body_bytes: int = 64
    durability: str = "fsync"
    figures: tuple[str, ...] = FIGURES


# ------------------------------------------------------------------- load


def _client(endpoint: str) -> SQSClient:
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 0}, max_pool_connections=4)
    return boto3.client(
        "sqs", endpoint_url=endpoint, config=config, aws_access_key_id=CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=CREDENTIALS["aws_secret_access_key"], region_name=CREDENTIALS["region_name"],
    )


def _loop(client: SQSClient, url: str, figure_name: str, body: str, end_ns: int, measured_from_ns: int,
          result: LoadResult, lock: threading.Lock) -> None:
    latencies = array("q")
    done = errors = empties = 0
    first_error: str | None = None
    entries: list[SendMessageBatchRequestEntryTypeDef] = [{"Id": str(index), "MessageBody": body} for index in range(10)]
    while True:
        start = time.monotonic_ns()
        if start >= end_ns:
            break
        try:
            if figure_name == "single":
                client.send_message(QueueUrl=url, MessageBody=body)
                messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=1).get("Messages", [])
                for message in messages:
                    client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            else:
                client.send_message_batch(QueueUrl=url, Entries=entries)
                messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
                if messages:
                    client.delete_message_batch(QueueUrl=url, Entries=[
                        {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]} for index, message in enumerate(messages)
                    ])
        except Exception as exc:  # counted and shown: a benchmark reports failures rather than stopping
            errors += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
            continue
        end = time.monotonic_ns()
        if start < measured_from_ns:
            continue
        if not messages:
            empties += 1
        done += len(messages)
        latencies.append(end - start)
    with lock:
        result.tasks += done
        result.ops += len(latencies)
        result.errors += errors
        result.empties += empties
        result.first_error = result.first_error or first_error
        result.latencies_ns.extend(latencies)


def run_load_process(endpoint: str, url: str, figure_name: str, settings: SqsBenchSettings,
                     start_ns: int) -> LoadResult:
    """One load process: `threads` threads running the loop from `start_ns` (the monotonic clock is shared)."""
    result = LoadResult()
    lock = threading.Lock()
    clients = [_client(endpoint) for _ in range(settings.threads)]
    body = "x" * settings.body_bytes
    measured_from = start_ns + int(settings.warmup_secs * 1e9)
    end = measured_from + int(settings.seconds * 1e9)
    while time.monotonic_ns() < start_ns:
        time.sleep(0.001)
    cpu_before, wall_before = cpu_secs(), time.monotonic()
    threads = [
        threading.Thread(target=_loop, args=(client, url, figure_name, body, end, measured_from, result, lock))
        for client in clients
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.cpu_secs = cpu_secs() - cpu_before
    result.wall_secs = time.monotonic() - wall_before
    result.first_start_ns, result.last_end_ns = measured_from, end
    return result


def measure(endpoint: str, figure_name: str, settings: SqsBenchSettings, pool: ProcessPoolExecutor,
            server_cpu: Any) -> Measured:
    """One figure against one endpoint, on a queue of its own."""
    client = _client(endpoint)
    url = client.create_queue(QueueName=f"bench-{figure_name}-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    start_ns = time.monotonic_ns() + 2_000_000_000  # every process has its clients by then
    cpu_before = server_cpu()
    futures = [pool.submit(run_load_process, endpoint, url, figure_name, settings, start_ns)
               for _ in range(settings.processes)]
    merged = LoadResult()
    for future in futures:
        merged.merge(future.result())
    cpu_used = server_cpu() - cpu_before
    window = settings.seconds + settings.warmup_secs + 2.0
    return Measured(merged, settings.seconds, round(100.0 * cpu_used / window, 1))


# ---------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class MotoServer:
    """`moto_server` on a free loopback port, as a subprocess."""

    def __init__(self, log_path: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + SERVER_START_SECS
        while True:
            try:
                _client(self.endpoint).list_queues()
                return
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start; see {log_path}") from None
                time.sleep(0.2)

    def cpu_secs(self) -> float:
        return _process_cpu(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ------------------------------------------------------------------- run


def run_sqs(settings: SqsBenchSettings, parent_dir: str | None = None) -> dict[str, Any]:
    """Every figure against Kittiwake, then against moto_server; the report."""
    with tempfile.TemporaryDirectory(prefix="kittiwake-bench-sqs-", dir=parent_dir) as root_name:
        root = Path(root_name)
        kittiwake: dict[str, Measured] = {}
        moto: dict[str, Measured] = {}
        with ProcessPoolExecutor(settings.processes) as pool:
            broker = BrokerProcess(root / "data", root / "broker.log", settings.durability, ["--sqs-port", "0"])
            broker.start()
            try:
                assert broker.sqs_port is not None
                endpoint = f"http://{broker.host}:{broker.sqs_port}"
                for name in settings.figures:
                    kittiwake[name] = measure(endpoint, name, settings, pool, broker.cpu_secs)
            finally:
                broker.stop()
            server = MotoServer(root / "moto.log")
            try:
                for name in settings.figures:
                    moto[name] = measure(server.endpoint, name, settings, pool, server.cpu_secs)
            finally:
                server.stop()
    figures: dict[str, Any] = {}
    for name in settings.figures:
        ours, theirs = kittiwake[name], moto[name]
        ratio = round(ours.tasks_per_sec / theirs.tasks_per_sec, 2) if theirs.tasks_per_sec > 0 else None
        record = figure(ours, ratio=ratio, reference={"system": "moto_server", "figure": name},
                        target={"ratio_min": TARGET_RATIO})
        record["meets_target"] = check_target(record)
        figures[f"kittiwake {name}"] = record
        figures[f"moto_server {name}"] = figure(theirs)
    return {
        "machine": machine_info(),
        "settings": {"seconds": settings.seconds, "warmup_secs": settings.warmup_secs,
                     "processes": settings.processes, "threads": settings.threads,
                     "body_bytes": settings.body_bytes, "durability": settings.durability,
                     "figures": list(settings.figures)},
        "sqs": figures,
    }
