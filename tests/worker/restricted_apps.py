"""An app confined to one broker user's prefix (`worker.restricted_apps:app`): every queue under `alice.`.

Its tasks live in `alice.shop` (and through it `alice.shop.delayed`,
`.dead`, `.gang`, `.gang.<id>`, `.ticks-done`, `@<node>`), its results in
`alice.replies.<app id>`, its jobs' records in `alice.jobs`; its workers keep their registry in
`alice.workers`. So the user needs `alice.*` and nothing else.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kittiwake.app import App

app = App(reply_prefix="alice.replies.", job_registry="alice.jobs")


def note(path: str, *words: Any) -> None:
    with open(path, "a") as file:
        file.write(" ".join(str(word) for word in words) + "\n")


@app.task(queue="alice.shop")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="alice.shop", max_attempts=1)
def explode(message: str) -> None:
    raise ValueError(message)


@app.task(queue="alice.shop", needs=2, gang_timeout=10, lease_secs=5)
def pair() -> int:
    return int(os.environ["KITTIWAKE_RANK"]) + 10 * int(os.environ["KITTIWAKE_SIZE"])


@app.periodic(every=1, queue="alice.shop")
def tick() -> None:
    path = os.environ.get("KITTIWAKE_TEST_TICKS")
    if path:
        note(path, time.time())
