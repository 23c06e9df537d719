"""`Job`: build a graph of tasks, then submit all of it in bundles (Albatross §5.2.2).

    job = app.job()
    raw = [job.add(fetch, url) for url in urls]          # fan-out
    merged = job.add(merge, after=raw)                    # fan-in
    handles = job.submit()                                # N / chunk enqueue requests
    print(handles[merged].result(timeout=60))

The dependencies live in the broker, not here: each task is enqueued with
`after=` naming its parents, so it is blocked until all of them finished,
and a parent that fails (dead-lettered or cancelled) fails its whole subtree
with reason ``PARENT_FAILED <queue>/<pid>``. Nothing of the job runs on the
submitter: it may exit once `submit` returned.

Task ids are chosen when a node is added, so nodes can name each other
before anything is sent; `submit` orders the nodes so that every parent is
enqueued before its children (in the same request or an earlier one) —
the broker counts a parent it does not know as already finished — and
refuses a graph with a cycle.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

from kittiwake.app.definitions import DEFAULT_MAP_CHUNK, TaskDefinition
from kittiwake.app.envelope import delayed_pid, delayed_queue_of, new_ids
from kittiwake.app.handles import Handle, results_of
from kittiwake.app.locality import local_queue_of


class JobSubmitter(Protocol):
    """What a job needs of its `App`: its task definitions, its clock, and bundled submission."""

    clock: Callable[[], float]

    def definition_of(self, task: TaskDefinition | str) -> TaskDefinition: ...

    def prepare(
        self, definition: TaskDefinition, args: tuple[Any, ...], kwargs: dict[str, Any], **options: Any
    ) -> tuple[dict[str, Any], Handle]: ...

    def enqueue_prepared(self, tasks: list[dict[str, Any]], handles: list[Handle], chunk: int = ...) -> None: ...


@dataclass(eq=False, slots=True)
class Node:
    """One task of a job, before and after submission; `.queue` / `.pid` name it like a handle."""

    definition: TaskDefinition
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    task_id: str
    queue: str
    pid: str
    parents: list[Any] = field(default_factory=list)  # Nodes of this job, handles, (queue, pid) pairs
    options: dict[str, Any] = field(default_factory=dict)
    index: int = 0


class JobHandles:
    """The handles of a submitted job, by node (`handles[node]`) or in the order nodes were added."""

    def __init__(self, nodes: list[Node], handles: dict[int, Handle]) -> None:
        self._nodes = nodes
        self._handles = handles

    def __getitem__(self, node: Node | int) -> Handle:
        index = node if isinstance(node, int) else node.index
        return self._handles[index]

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self) -> Iterator[Handle]:
        return (self._handles[node.index] for node in self._nodes)

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every node's result in the order added; raises the first failure."""
        return results_of(self, timeout)

    def cancel(self, reason: str | None = None) -> int:
        """Withdraw every task not yet finished; returns how many were withdrawn."""
        return sum(1 for handle in self if handle.cancel(reason))


class Job:
    """A graph of tasks under construction; `submit` sends it."""

    def __init__(self, app: JobSubmitter) -> None:
        self.app = app
        self.nodes: list[Node] = []

    def add(
        self,
        task: TaskDefinition | str,
        *args: Any,
        after: Iterable[Any] = (),
        key: str | None = None,
        delay: float | None = None,
        node: str | None = None,
        **kwargs: Any,
    ) -> Node:
        """A node calling `task(*args, **kwargs)` once every task in `after` finished; with
        `node`, waiting in that node's local queue (data locality, see `locality`)."""
        definition = self.app.definition_of(task)
        task_id = key or new_ids(1, self.app.clock())[0]
        queue, pid = definition.queue, task_id
        options: dict[str, Any] = {"task_id": task_id}
        if key is not None:
            options["key"] = key
        if node is not None:
            if delay is not None and delay > 0:
                raise ValueError("give node= or delay=, not both: a delayed task waits in the shared queue")
            queue = local_queue_of(definition.queue, node)
            options["node"] = node
        if delay is not None and delay > 0:
            due = self.app.clock() + delay
            queue, pid = delayed_queue_of(definition.queue), delayed_pid(due, task_id)
            options["at"] = due
        node = Node(definition, args, kwargs, task_id, queue, pid, list(after), options, len(self.nodes))
        self.nodes.append(node)
        return node

    def order(self) -> list[Node]:
        """Nodes with every parent of this job before its children (Kahn); ValueError on a cycle."""
        mine = {id(node) for node in self.nodes}
        waiting: dict[int, int] = {}
        children: dict[int, list[Node]] = {}
        for node in self.nodes:
            parents = {id(parent) for parent in node.parents if isinstance(parent, Node) and id(parent) in mine}
            foreign = [parent for parent in node.parents if isinstance(parent, Node) and id(parent) not in mine]
            if foreign:
                raise ValueError("a node's parent belongs to another job: pass that job's handle instead")
            waiting[id(node)] = len(parents)
            for parent in node.parents:
                if isinstance(parent, Node):
                    children.setdefault(id(parent), []).append(node)
        ready = deque(node for node in self.nodes if waiting[id(node)] == 0)
        ordered: list[Node] = []
        while ready:
            node = ready.popleft()
            ordered.append(node)
            for child in children.get(id(node), ()):
                waiting[id(child)] -= 1
                if waiting[id(child)] == 0:
                    ready.append(child)
        if len(ordered) != len(self.nodes):
            raise ValueError("the job's dependencies form a cycle")
        return ordered

    def submit(self, *, chunk: int = DEFAULT_MAP_CHUNK) -> JobHandles:
        """Enqueue every node, parents first, `chunk` tasks per request; returns the handles."""
        ordered = self.order()
        tasks: list[dict[str, Any]] = []
        handles: dict[int, Handle] = {}
        for node in ordered:
            options = dict(node.options)
            parents = [(parent.queue, parent.pid) if isinstance(parent, Node) else parent for parent in node.parents]
            task, handle = self.app.prepare(
                node.definition, node.args, node.kwargs, after=parents or None, **options
            )
            # the handle must name the node's own coordinates (a delay was fixed at add time)
            task["queue"], task["pid"] = node.queue, node.pid
            handle.queue, handle.pid = node.queue, node.pid
            tasks.append(task)
            handles[node.index] = handle
        self.app.enqueue_prepared(tasks, [handles[node.index] for node in ordered], chunk)
        return JobHandles(self.nodes, handles)
