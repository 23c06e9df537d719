"""The app `kittiwake bench workers` and `bench cluster`'s user path run, written as users write one: `@app.task`s.

Workers load it by reference — `kittiwake worker
kittiwake.bench.user_app:app --processes P [--concurrency C]`,
default flags otherwise — and find the broker at `$KITTIWAKE_URL`, as the
submitter does. Every task leaves its record in the tally
(`tally`): start, end, and the process and thread that ran it.

* `null`: the 1 KB payload in, nothing out, fire and forget (`ignore_result=True`).
* `null_kept`: the same, its (empty) result sent back to the submitter.
* `sleep`: sleeps its argument in seconds, fire and forget.
"""

from __future__ import annotations

from kittiwake.app import App
from kittiwake.bench.tally import null_task, sleep_task
from kittiwake.bench.settings import WORKERS_QUEUE

app = App()


@app.task(queue=WORKERS_QUEUE, ignore_result=True)
def null(payload: str) -> None:
    null_task(payload)


@app.task(queue=WORKERS_QUEUE)
def null_kept(payload: str) -> None:
    null_task(payload)


@app.task(queue=WORKERS_QUEUE, ignore_result=True)
def sleep(seconds: float) -> None:
    sleep_task(seconds)


TASKS = {"null": null, "null_kept": null_kept, "sleep": sleep}
