"""Workers: pull tasks of an `App` from the broker, run them, post their results (CloudKon §3.2).

`kittiwake worker module:app --processes N --concurrency M` starts a
`Supervisor` that runs N worker processes; each runs a `WorkerLoop` with M
slots. Module map: `supervisor` (processes, respawning, recycling, signals),
`loop` (the pull loop of one process), `capacity` (how many tasks it may
hold), `runner` (one task: checks, call, timeout sandbox, outcome),
`outcomes` (outcomes to broker updates), `heartbeat` (lease renewal and
progress), `registry` (worker records in ``_workers``), `beat` (the periodic
scheduler), `config` (`WorkerConfig`), `ledger` (what a process holds and
runs, told to its supervisor), `lost` (a process that died: how it is named,
its tasks handed back), `stopping` (a stop that does not wait for a broker
that has gone away).

A worker writes with its own rights where the tasks it runs tell it to, and
those tasks come from whoever may enqueue into its queues. So every queue a
task names is held to the app's own: a result goes only into a reply queue of
the app (``<group>#<reply prefix><app id>``, the task's group; any other
``kittiwake-reply-to`` is dead-lettered unrun as REPLY_TO_REFUSED — and the
broker takes that header only from a user who may produce into the queue it
names: see `kittiwake.app.envelope`, "Reply queues are the submitter's"); a
gang join runs only from a ``.gang`` queue and posts only into its mailboxes
(`gang`); a tick marker is written only for a tick already due (`loop`).
"""

from kittiwake.worker.config import WorkerConfig, load_app
from kittiwake.worker.loop import WorkerLoop
from kittiwake.worker.registry import WorkerRecord, live_workers
from kittiwake.worker.supervisor import Supervisor

__all__ = ["Supervisor", "WorkerConfig", "WorkerLoop", "WorkerRecord", "live_workers", "load_app"]
