"""How a worker is told what to do: one record, passed from the command line to every worker process.

The supervisor turns `kittiwake worker` options into a `WorkerConfig` and
hands it to each worker process it starts as JSON on the command line, so a
respawned process runs exactly as its predecessor did.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import msgspec

from kittiwake.constants import WORKERS_QUEUE

DEFAULT_WAIT_SECS = 1.0
DEFAULT_SHUTDOWN_SECS = 30.0
DEFAULT_REGISTRY_EVERY_SECS = 2.0
DEFAULT_DELAYED_POLL_SECS = 0.5
DEFAULT_STEAL_AFTER_SECS = 2.0
# The supervisor hands the broker URL to its processes here, not in the JSON on their
# command line: a URL may carry a token, and command lines are visible to every local user.
WORKER_URL_ENV = "KITTIWAKE_WORKER_URL"


class WorkerConfig(msgspec.Struct, kw_only=True):
    """Options of `kittiwake worker`, as each worker process receives them."""

    app: str | None = None  # "module:attribute" of the App; None: the built-in tasks only
    url: str | None = None  # broker; None: the app's, then $KITTIWAKE_URL, then the default
    queues: list[str] | None = None  # None: every queue the app's tasks are defined on
    processes: int = 1
    concurrency: int = 1  # tasks run at once per process (threads)
    prefetch: int | None = None  # leased tasks waiting for a free slot; None: sized from run times (`prefetch`)
    max_tasks_per_child: int | None = None
    max_memory_mb: float | None = None
    shutdown_secs: float = DEFAULT_SHUTDOWN_SECS  # SIGTERM: time running tasks get to finish
    wait_secs: float = DEFAULT_WAIT_SECS  # long-poll; also the most a due delayed task waits
    delayed_poll_secs: float = DEFAULT_DELAYED_POLL_SECS
    registry_every_secs: float = DEFAULT_REGISTRY_EVERY_SECS
    registry_queue: str = WORKERS_QUEUE  # where each process keeps its record (`registry`)
    beat: bool = False  # run the periodic scheduler (in the supervisor)
    name: str | None = None  # prefix of worker ids; default: the host name
    node: str | None = None  # data locality: also serve the local queues `<queue>@<node>`
    near: str | None = None  # a cluster's node leases ask first (`Client(near=...)`); None: the client's default
    steal_after_secs: float = DEFAULT_STEAL_AFTER_SECS  # idle this long: steal from other nodes' queues
    autoscale: tuple[int, int] | None = None  # (MIN, MAX) worker processes; None: `processes`, fixed
    scale_cmd: str | None = None  # run with KITTIWAKE_DESIRED when more than MAX are wanted
    scale_window_secs: float = 2.0  # a backlog not shrinking over this long adds a process
    scale_idle_secs: float = 10.0  # an empty backlog this long retires a process
    sys_path: list[str] = []  # prepended to sys.path in worker processes (where the app module is)

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerConfig:
        return msgspec.json.decode(text, type=cls)


def load_app(reference: str | None, sys_path: list[str] | None = None) -> Any:
    """The App at "module:attribute" (cwd and `sys_path` importable), or the app of an object
    there with a ``kittiwake_app()`` method (a `kittiwake.flow.Flow`); a bare App for None."""
    for entry in reversed([os.getcwd(), *(sys_path or [])]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if reference is None:
        from kittiwake.app import App

        return App()
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    target: Any = module
    for part in (attribute or "app").split("."):
        target = getattr(target, part)
    from kittiwake.app import App

    if not isinstance(target, App) and callable(getattr(target, "kittiwake_app", None)):
        target = target.kittiwake_app()  # an object that runs on an app: a flow's python steps
    if not isinstance(target, App):
        raise TypeError(f"{reference} is a {type(target).__name__}, not a kittiwake App")
    return target


def find_app_reference(app: Any) -> str | None:
    """"module:attribute" of an app object already imported, so a child process can import it too."""
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        try:
            items = vars(module).items()
        except TypeError:
            continue
        for attribute, value in list(items):
            if value is app:
                return f"{name}:{attribute}"
    return None
