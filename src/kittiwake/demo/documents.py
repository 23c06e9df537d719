"""The classic demo (`kittiwake demo --classic`): a three-stage document pipeline on a real broker.

A generated corpus of documents goes through `demo#fetch → demo#extract →
demo#index` queues (TaskMaster §3.6 application design). Each stage is a pool
of worker processes that lease a bundle of tasks, process each one, and hand
it on with one atomic `update`: dequeue it from this stage and enqueue its
result into the next, so a crash between stages can neither lose a document
nor duplicate it. All queues share the consistency group `demo`.

* fetch: turns a document id into its text (generated deterministically from
  the id, standing in for a download), pid = document id so a resubmitted
  document collapses into the one already queued;
* extract: tokenises and counts terms;
* index: keeps the document's top terms and posts them to `demo#indexed`.

The driver then drains `demo#indexed` into an inverted index, answers a query
and prints per-queue statistics.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from kittiwake.client import Client
from kittiwake.testing import BrokerProcess

GROUP = "demo"
FETCH, EXTRACT, INDEX, INDEXED = (f"{GROUP}#{name}" for name in ("fetch", "extract", "index", "indexed"))
STAGES = (FETCH, EXTRACT, INDEX)
_WORDS = (
    "queue lease task worker broker priority durable commit spark pipeline token stage shard "
    "replica latency throughput fsync batch group update schedule data node cluster index "
    "extract fetch document corpus query result reply retry backoff dead letter heartbeat"
).split()


@dataclass
class PipelineReport:
    documents: int
    seconds: float
    index_terms: int
    query: str
    query_hits: list[str]
    stats: list


def document_text(doc_id: str) -> str:
    """The body of a document, the same for the same id on every run."""
    rng = random.Random(doc_id)
    sentences = []
    for _ in range(rng.randint(3, 8)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 14))]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def _fetch(data: bytes) -> tuple[str, bytes]:
    doc = json.loads(data)
    return EXTRACT, json.dumps({"id": doc["id"], "text": document_text(doc["id"])}).encode()


def _extract(data: bytes) -> tuple[str, bytes]:
    doc = json.loads(data)
    counts = Counter(re.findall(r"[a-z]+", doc["text"].lower()))
    return INDEX, json.dumps({"id": doc["id"], "terms": counts}).encode()


def _index(data: bytes) -> tuple[str, bytes]:
    doc = json.loads(data)
    top = sorted(doc["terms"].items(), key=lambda item: (-item[1], item[0]))[:5]
    return INDEXED, json.dumps({"id": doc["id"], "top": [term for term, _ in top]}).encode()


_STEPS = {FETCH: _fetch, EXTRACT: _extract, INDEX: _index}


def stage_worker(url: str, stage: str, worker: str, stop_after_idle_secs: float) -> int:
    """Lease bundles from one stage, process, and atomically hand each task on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    step = _STEPS[stage]
    done = 0
    idle_since = time.monotonic()
    with Client(url) as client:
        while True:
            tasks = client.lease(stage, max_tasks=20, lease_secs=30, wait_secs=0.5, worker=worker)
            if not tasks:
                if time.monotonic() - idle_since > stop_after_idle_secs:
                    return done
                continue
            idle_since = time.monotonic()
            outputs = []
            for task in tasks:
                next_queue, result = step(task.data)
                outputs.append({"queue": next_queue, "pid": task.pid, "data": result})
            client.update(dequeue=tasks, enqueue=outputs)
            done += len(tasks)


def run_pipeline(
    documents: int = 2000,
    workers_per_stage: int = 2,
    url: str | None = None,
    progress: bool = True,
) -> PipelineReport:
    """Run the pipeline end to end; starts its own broker unless `url` is given."""
    root = Path(tempfile.mkdtemp(prefix="kittiwake-demo-"))
    broker: BrokerProcess | None = None
    try:
        if url is None:
            broker = BrokerProcess(root / "data")  # its log beside, in `root`
            broker.start()
            url = broker.url
        started = time.perf_counter()
        with Client(url) as client:
            for queue in (*STAGES, INDEXED):
                client.delete_queue(queue)
            ids = [f"doc-{number:06d}" for number in range(documents)]
            for start in range(0, documents, 500):
                client.enqueue_many(
                    [{"queue": FETCH, "pid": doc_id, "data": json.dumps({"id": doc_id}).encode()}
                     for doc_id in ids[start : start + 500]]
                )
            # a resubmitted document collapses into the queued one (dedupe by pid)
            client.enqueue(FETCH, json.dumps({"id": ids[0]}).encode(), pid=ids[0])
            context = multiprocessing.get_context("spawn")
            pools = [
                context.Process(target=stage_worker, args=(url, stage, f"{stage.split('#')[1]}-{n}", 1.5))
                for stage in STAGES
                for n in range(workers_per_stage)
            ]
            for process in pools:
                process.start()
            _wait_until_indexed(client, documents, progress)
            index, docs_seen = _drain_index(client)
            seconds = time.perf_counter() - started
            stats = client.stats([*STAGES, INDEXED])
            for process in pools:
                process.join(timeout=30)
        query = "durable"
        hits = sorted(index.get(query, ()))[:5]
        return PipelineReport(docs_seen, seconds, len(index), query, hits, stats)
    finally:
        if broker is not None and broker.alive():
            broker.terminate()
        shutil.rmtree(root, ignore_errors=True)


def _wait_until_indexed(client: Client, documents: int, progress: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        tracks = {queue: bar.add_task(queue, total=documents) for queue in STAGES}
        while True:
            sizes = {row.queue: row.size for row in client.list_queues(pattern=f"^{GROUP}#")}
            indexed = sizes.get(INDEXED, 0)
            remaining = 0
            for position, queue in enumerate(STAGES):
                downstream = sum(sizes.get(q, 0) for q in (*STAGES[position + 1 :], INDEXED))
                bar.update(tracks[queue], completed=downstream)
                remaining += sizes.get(queue, 0)
            if indexed >= documents and remaining == 0:
                return
            time.sleep(0.1)


def _drain_index(client: Client) -> tuple[dict[str, set[str]], int]:
    index: dict[str, set[str]] = defaultdict(set)
    seen = 0
    while True:
        tasks = client.lease(INDEXED, max_tasks=500, lease_secs=30)
        if not tasks:
            return index, seen
        for task in tasks:
            doc = json.loads(task.data)
            for term in doc["top"]:
                index[term].add(doc["id"])
        seen += len(tasks)
        client.dequeue(tasks)


def main(documents: int, workers_per_stage: int, url: str | None, as_json: bool) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    report = run_pipeline(documents, workers_per_stage, url, progress=not as_json)
    if as_json:
        rows = [
            {key: getattr(s, key) for key in ("queue", "size", "leased", "dead", "enqueue_rate_1m",
                                               "dequeue_rate_1m", "avg_lease_secs")}
            for s in report.stats
        ]
        print(json.dumps({"documents": report.documents, "seconds": report.seconds,
                          "index_terms": report.index_terms, "query": report.query,
                          "hits": report.query_hits, "queues": rows}))
    else:
        table = Table(title="Per-queue statistics")
        table.add_column("queue", no_wrap=True)
        for column in ("size", "leased", "dead", "enqueues/s (1m)", "dequeues/s (1m)", "avg lease ms"):
            table.add_column(column, justify="right")
        for s in report.stats:
            lease_ms = f"{s.avg_lease_secs * 1000:.1f}" if s.avg_lease_secs is not None else "-"
            table.add_row(s.queue, str(s.size), str(s.leased), str(s.dead), f"{s.enqueue_rate_1m:.1f}",
                          f"{s.dequeue_rate_1m:.1f}", lease_ms)
        console.print(table)
        console.print(
            f"{report.documents} documents through fetch → extract → index in {report.seconds:.2f} s "
            f"({report.documents / report.seconds:.0f} docs/s); {report.index_terms} terms indexed; "
            f"'{report.query}' appears in {len(report.query_hits)}+ documents, e.g. {', '.join(report.query_hits[:3])}"
        )
    ok = report.documents == documents
    if not ok:
        console.print(f"[red]expected {documents} documents, indexed {report.documents}[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(os.environ.get("KITTIWAKE_DEMO_DOCS", "2000")), 2, None, False))
