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

The job's record (`job_records`: what the dashboard lists) goes into the
app's ``job_registry`` queue (``_jobs``; None writes none) in the same
enqueue request as the first bundle, ahead of it: the broker applies a
request whole or not at all, so no task of the job exists without its
record (a user without rights on the registry gets FORBIDDEN and nothing is
enqueued: name a queue of its own, or None). The job id, and so the record's
pid, is drawn when the job is made: submitting the same `Job` again — after
a failure half-way, say — collapses into the same record as its tasks
collapse into theirs. A job built anew is another job, with a record of its
own, even when its keyed tasks collapse into the live ones of an earlier
job (both records then show the same sinks, so the same state).

On a cluster (`kw://a,b,c`, `kittiwake.cluster.routing`), a child waits for its parents on one
broker, so a job's DAG must live on one node. A job has a **routing tag** (`Job.tag`: the job
id, or `app.job(tag=...)`), and every task id it draws carries it: ``{<tag>}<new id>``
(`routing.tagged`), which routes by the tag alone, whatever the queue; a delayed node's entry
folds onto its task id and follows it. A node given `key=` keeps the key as its pid, unchanged,
so that it collapses with the same key in other jobs and plain submits exactly as on one broker;
to keep such a node with the rest of its job on a cluster, put the job's tag in the key
(`job.key("fetch")` is ``{<tag>}fetch``; with `app.job(tag="nightly")` jobs built anew share
it, and their keyed nodes still collapse). A job on a cluster whose child and parent would be
placed by different rules (a key without the tag, a parent of another job or tag, a named group
and a default-group queue) is refused by `submit` with ValueError before anything is sent,
naming the pair — the nodes would refuse it too (`shard_guard`: an `after` key another node
owns), but less clearly. Queues of one named group (`G#q`) live on one node anyway. The job's
record keeps its pid (the job id: lookups by id and retention are unchanged), so it lives on the
node of ``(_jobs, <job id>)``: sent in the same step as the first bundle, it is atomic with it
only when both land on one node; a job submitted again collapses into both.

With tracing on (`tracing`), one PRODUCER span ``"<job name> send"`` sends
the whole job: every task carries its context.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from kittiwake import errors
from kittiwake.app import tracing
from kittiwake.app.definitions import DEFAULT_MAP_CHUNK, TaskDefinition
from kittiwake.app.envelope import delayed_pid, delayed_queue_of, new_ids
from kittiwake.app.handles import Handle, results_of
from kittiwake.app.job_records import job_record, new_job_id, record_task, validate_job_name
from kittiwake.app.locality import local_queue_of
from kittiwake.cluster.routing import fold, tag_of, tagged
from kittiwake.model import group_of


class JobSubmitter(Protocol):
    """What a job needs of its `App`: its task definitions, its clock, bundled submission, and
    where job records go (None: nowhere)."""

    clock: Callable[[], float]
    job_registry: str | None

    def on_cluster(self) -> bool: ...

    def definition_of(self, task: TaskDefinition | str) -> TaskDefinition: ...

    def prepare(
        self,
        definition: TaskDefinition,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None = ...,
        at: datetime | float | None = ...,
        after: Iterable[Any] | None = ...,
        task_id: str | None = ...,
        node: str | None = ...,
    ) -> tuple[dict[str, Any], Handle]: ...

    def enqueue_prepared(
        self, tasks: list[dict[str, Any]], handles: list[Handle], chunk: int = ..., *, lead: dict[str, Any] | None = ...
    ) -> None: ...


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
    """A graph of tasks under construction; `submit` sends it. `id` names it in its record."""

    def __init__(self, app: JobSubmitter, name: str | None = None, *, tag: str | None = None) -> None:
        self.app = app
        self.name = None if name is None else validate_job_name(name)
        self.created_at = app.clock()
        self.id = new_job_id(self.created_at)
        if tag is not None and (not isinstance(tag, str) or not tag or "{" in tag or "}" in tag):
            raise ValueError(f"a job's routing tag is a non-empty name without braces, got {tag!r}")
        self.tag = self.id if tag is None else tag
        self.nodes: list[Node] = []

    def key(self, name: str) -> str:
        """`name` as a key carrying this job's routing tag (``{<tag>}name``): a keyed node that stays
        with the rest of the job on a cluster (module docstring)."""
        return tagged(self.tag, name)

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
        task_id = key or tagged(self.tag, new_ids(1, self.app.clock())[0])
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
        added = Node(definition, args, kwargs, task_id, queue, pid, list(after), options, len(self.nodes))
        self.nodes.append(added)
        return added

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

    @property
    def display_name(self) -> str:
        """Its name, or its first task's name."""
        if self.name is not None:
            return self.name
        return self.nodes[0].definition.name if self.nodes else "job"

    def sinks(self) -> list[Node]:
        """The nodes no node of this job runs after, in the order added."""
        parents = {id(parent) for node in self.nodes for parent in node.parents if isinstance(parent, Node)}
        return [node for node in self.nodes if id(node) not in parents]

    def record(self) -> dict[str, Any]:
        """This job's record (`job_records`)."""
        return job_record(self.id, self.display_name, self.created_at, (node.queue for node in self.nodes),
                          ((node.queue, node.pid) for node in self.sinks()))

    def submit(self, *, chunk: int = DEFAULT_MAP_CHUNK) -> JobHandles:
        """Enqueue every node, parents first, `chunk` tasks per request, with the job's record in the
        first request; returns the handles. On a cluster, ValueError for a child placed apart from
        a parent (module docstring)."""
        ordered = self.order()
        if ordered and self.app.on_cluster():
            self.check_placement()
        span = tracing.start_send(self.display_name, count=len(ordered), job_id=self.id) if ordered else None
        if span is None:
            return self._submit(ordered, chunk)
        with tracing.use(span):
            return self._submit(ordered, chunk)

    def check_placement(self) -> None:
        """ValueError unless every node is placed by the same rule as each of its parents, so that
        a cluster keeps them on one node (module docstring)."""
        for node in self.nodes:
            mine = placement(node.queue, node.pid)
            for parent in node.parents:
                queue, pid = _coordinates(parent)
                if placement(queue, pid) != mine:
                    raise ValueError(
                        f"on a cluster, {node.queue}/{node.pid} cannot wait for {queue}/{pid}: they would live on "
                        f"different nodes; give keyed nodes the job's tag (key=job.key(...)), or put the job "
                        f"in a named group"
                    )

    def _submit(self, ordered: list[Node], chunk: int) -> JobHandles:
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
        registry = self.app.job_registry
        lead = record_task(registry, self.record()) if registry is not None and ordered else None
        try:
            self.app.enqueue_prepared(tasks, [handles[node.index] for node in ordered], chunk, lead=lead)
        except errors.Forbidden as error:
            if lead is None or f"queue {registry!r}" not in error.message:  # refused for another queue
                raise
            raise errors.Forbidden(
                f"{error.message} (a job's record goes to {registry!r} with its first tasks: "
                "App(job_registry=...) names a queue of yours, job_registry=None writes none)"
            ) from error
        return JobHandles(self.nodes, handles)


def placement(queue: str, pid: str) -> tuple[str, ...]:
    """What places task (queue, pid) on a cluster's node (`kittiwake.cluster.routing`): its named
    group, else its routing tag, else the task itself. Equal placements share a node on every map."""
    group = group_of(queue)
    if group:
        return ("group", group)
    queue, pid = fold(queue, pid)
    tag = tag_of(pid)
    if tag is not None:
        return ("tag", tag)
    return ("task", queue, pid)


def _coordinates(parent: Any) -> tuple[str, str]:
    if isinstance(parent, (tuple, list)) and len(parent) == 2:
        return str(parent[0]), str(parent[1])
    if isinstance(parent, Mapping):
        return str(parent["queue"]), str(parent["pid"])
    return str(parent.queue), str(parent.pid)
