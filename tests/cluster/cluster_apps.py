"""The app the cluster tests' workers run (`kittiwake worker cluster.cluster_apps:app`): a map's
task, a DAG's node, a gang task and a task that holds its slot a moment, all on default-group
(spread) queues, so that routing, not a named group, keeps what must stay together."""

from __future__ import annotations

import time
from typing import Any

from kittiwake.app import App
from kittiwake.worker.gang import gang_info

app = App()


@app.task(queue="capp.map")
def square(x: int) -> int:
    return x * x


@app.task(queue="capp.dag", lease_secs=10)
def step(name: str, *inputs: Any) -> str:
    return name


@app.task(queue="capp.gang", needs=2, gang_timeout=20)
def pair() -> int:
    info = gang_info()
    assert info is not None
    return int(info["size"])


@app.task(queue="capp.hold", ignore_result=True)
def hold(secs: float) -> None:
    time.sleep(secs)
