"""`GET /api/flows?limit=N`: the newest runs of every flow, each as `kittiwake flow status` shows it.

The runs' state is derived by `kittiwake.flow.runs` (`read_runs`,
`run_status`) from the queues of the flow, as a client would; here it reads
through `EngineReader`, which answers the client's read calls it makes
(`list_queues`, `peek`, `get`) from the engine, without a network round trip
or a group-commit pass. `finish=False`: a view changes nothing, so a run
found done but not finished yet shows as done, and whoever finishes runs
(a worker, a handle, the CLI) still does.

With an auth file, a flow's runs show when the principal administers its
runs queue (`flow.<name>#runs`). Cost: each run shown reads its job queues
(as `kittiwake flow status` does), so `limit` is at most `MAX_RUNS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest
from kittiwake.engine import inspection
from kittiwake.engine.queue_patterns import name_matcher
from kittiwake.engine.state import EngineState
from kittiwake.flow.runs import read_runs
from kittiwake.model import QueueInfo
from kittiwake.observe import params
from kittiwake.observe.http_json import query
from kittiwake.observe.reads import Visible, engine_of, now_of, visibility
from kittiwake.protocol.replies import TaskView

if TYPE_CHECKING:
    from kittiwake.observe.registrar import Registrar

DEFAULT_RUNS = 20
MAX_RUNS = 100
_PATTERN_SPECIAL = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The text every name an anchored pattern (`^…`) matches starts with ("" when there is none)."""
    if not pattern.startswith("^") or "|" in pattern:  # an alternative may start anywhere
        return ""
    prefix: list[str] = []
    index = 1
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern) and not pattern[index + 1].isalnum():
            prefix.append(pattern[index + 1])
            index += 2
            continue
        if char in _PATTERN_SPECIAL:
            break
        prefix.append(char)
        index += 1
    if index < len(pattern) and pattern[index] in "*?{":  # the last character may repeat zero times
        prefix = prefix[:-1]
    return "".join(prefix)


class EngineReader:
    """The read calls of `kittiwake.Client` that `flow.runs` makes, answered from the engine at `now`."""

    def __init__(self, state: EngineState, now: float, visible: Visible | None) -> None:
        self.state = state
        self.now = now
        self.visible = visible

    def list_queues(self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000) -> list[QueueInfo]:
        """Queues holding at least max(1, min_tasks) tasks whose name matches `pattern`, in name
        order; an anchored literal start is looked up in the sorted names, not scanned for."""
        matches = name_matcher(pattern) if pattern is not None else None
        prefix = literal_prefix(pattern) if pattern is not None else ""
        floor = max(1, min_tasks)
        queues = self.state.queues
        rows: list[QueueInfo] = []
        for name in self.state.names.irange(minimum=prefix or None):
            if not name.startswith(prefix):
                break
            queue = queues[name]
            if queue.size >= floor and (matches is None or matches(name)) and (self.visible is None or self.visible(name)):
                rows.append(QueueInfo(name, queue.size, len(queue.leased)))
                if len(rows) >= limit:
                    break
        return rows

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> list[TaskView]:
        views, _ = inspection.scan_page(self.state, queue, min(n, self.state.limits.max_batch), from_pid, self.now)
        return [TaskView(**view) for view in views]

    def get(self, queue: str, pid: str) -> TaskView:
        return TaskView(**inspection.find_view(self.state, queue, pid, self.now))

    def __getattr__(self, name: str) -> Any:
        raise errors.BadRequest(f"a view reads only: {name} is not one of its calls")


def install(observer: Registrar) -> None:
    host = observer.host

    async def flows(request: HttpRequest, principal: Principal | None) -> Any:
        limit = params.integer(query(request), "limit", DEFAULT_RUNS, 1, MAX_RUNS)
        reader = EngineReader(engine_of(host).state, now_of(host), visibility(principal))
        return {"runs": [status.to_dict() for status in read_runs(reader, None, limit=limit, finish=False, newest=True)]}

    observer.add_json("/api/flows", flows)
