"""Kittiwake on the path its users take, for `kittiwake bench peers`.

An `App` with the null task on queue `bench`, fire and forget
(`ignore_result=True`), and its twin `null_kept` whose results come back to
the submitter (`app.results`). Workers load this module by reference:
`kittiwake worker kittiwake_benchmarks.peers.kittiwake_peer:app --processes 2`,
default flags otherwise; the app finds its broker at `$KITTIWAKE_URL`. One
at a time goes through `f.submit(x)`, many through `app.map(f, items,
chunk=1000)`.
"""

from __future__ import annotations

from typing import Any

from kittiwake.app import App
from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK, PEERS_QUEUE

app = App()


@app.task(queue=PEERS_QUEUE, ignore_result=True)
def null(payload: str) -> None:
    null_task(payload)


@app.task(queue=PEERS_QUEUE)
def null_kept(payload: str) -> None:
    null_task(payload)


class Submitter:
    """The submitting side: `keep_results` submits `null_kept` and keeps every handle."""

    bulk_api = f"app.map(f, items, chunk={PEERS_BULK_CHUNK})"

    def __init__(self, keep_results: bool = False) -> None:
        self.task = null_kept if keep_results else null
        self.keep_results = keep_results
        self.handles: list[Any] = []

    def submit(self, payload: str) -> None:
        handle = self.task.submit(payload)
        if self.keep_results:
            self.handles.append(handle)

    def submit_many(self, payloads: list[str]) -> None:
        handles = app.map(self.task, payloads, chunk=PEERS_BULK_CHUNK)
        if self.keep_results:
            self.handles.extend(handles)

    def forget(self) -> None:
        """Drop the handles held so far (the latency samples'): their results are not waited for."""
        self.handles = []

    def collect(self, timeout: float) -> int:
        """Wait for the result of every task submitted so far; how many came back."""
        results = app.results(self.handles, timeout=timeout)
        self.handles = []
        return len(results)

    def waiting(self) -> int | None:
        queues = app.client.list_queues(pattern=f"^{PEERS_QUEUE}$")
        return sum(queue.size for queue in queues)

    def purge(self) -> None:
        app.client.delete_queue(PEERS_QUEUE)

    def close(self) -> None:
        app.close()
