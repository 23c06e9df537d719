"""`App`: a registry of task functions and the submitting side of Kittiwake's task execution.

An app is the one object producers and workers share: producers import it to
submit tasks (`f.submit(...)`, `app.map`, `app.job()`), workers load it by
reference (``kittiwake worker module:app``) to find the function behind each
task name. It connects lazily, so importing a module that defines an app
costs nothing, and a worker may point the same app at another broker.

Submitting (CloudKon §3.2): a task is one broker task in its definition's
queue with pid = task id (see `envelope` for every queue and header name),
data = the call encoded by the app's `Serializer`, and ``max_attempts`` =
the definition's (one more for at-most-once tasks, see `TaskOptions`). Its
result comes back through this app's reply queue to the `ReplyCollector`,
named after the submission (`envelope.SUBMISSION_HEADER`): a handle gets
the result of the run it started, or of the live run its key collapsed
into (`collapse`).
`map` and `Job.submit` bundle many tasks per `enqueue` request (CloudKon's
task bundling), so submitting N tasks costs N / chunk round trips.

Batching (CMQ's producer): `App(batching=True)` (or a `ProducerSettings`, or a
map of them) sends every `submit` through one batching producer: a handle
comes back before its task reaches the broker, `handle.sent()` waits until it
is durable, and submits from a loop share requests. ``with app.batch():``
does the same for the submits a thread makes inside the block — through the
app's producer, or one made for the block — and waits for them at its end
(raising if any failed). `map` and jobs bundle by themselves and keep their
own requests; a submit naming as parent (`after=`) a handle that another path
still holds waits for that parent to be durable first, so a parent always
reaches the broker before its child.

Each `App` instance has an id (random, or `app_id=` to keep results across
restarts of the submitter); `close()` stops the collector and, for a random
id, deletes the app's reply queues. The reply queues are named
`<group>#<reply_prefix><app id>`; `reply_prefix` (default `_replies.`) lets a
broker user whose rights cover only its own prefix (`alice.*`) receive
results (`reply_prefix="alice.replies."`). Jobs write their records (`job_records`) into
`job_registry` (default `_jobs`): such a user names a queue of its own there
(`job_registry="alice.jobs"`), or None for no records. Records older than
`job_retention_secs` (default 7 days; None: this app removes none) are removed
by the apps writing to the registry, at most once a minute, after a submit
(`job_retention`).

Tracing: with an OpenTelemetry tracer provider set, each submit is a PRODUCER
span whose context travels in the task's headers to the worker's run
(`tracing`); without one, nothing is added.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterable

from kittiwake.app import job_retention, tracing
from kittiwake.app.bundles import BundleSender
from kittiwake.app.collapse import follow_collapsed
from kittiwake.app.definitions import (
    DEFAULT_MAP_CHUNK,
    PeriodicDefinition,
    TaskDefinition,
    make_options,
)
from kittiwake.app.envelope import delayed_pid, delayed_queue_of, gang_queue_of, new_ids, reply_queue_for
from kittiwake.app.handles import Handle, results_of
from kittiwake.app.job import Job
from kittiwake.app.join_handlers import JoinHandler
from kittiwake.app.locality import local_queue_of
from kittiwake.app.replies import ReplyCollector
from kittiwake.app.schedule import make_schedule
from kittiwake.app.serialization import Serializer
from kittiwake.app.shell import SHELL_TASK, run_shell
from kittiwake.client import Client, Producer, ProducerSettings
from kittiwake.constants import (
    JOBS_QUEUE,
    REPLIES_PREFIX,
    REPLY_TO_HEADER,
    SUBMISSION_HEADER,
    SUBMITTED_AT_HEADER,
    TASK_ID_HEADER,
)
from kittiwake.model import Limits, task_key, validate_pid, validate_queue

MAX_BATCH = Limits().max_batch
# close() waits this long for what the batching producer holds; tasks unanswered by then fail
# (CONNECTION_LOST, PRODUCER_CLOSED) rather than hang the program's exit on a broker that went silent
PRODUCER_CLOSE_SECS = 30.0
_REPLY_PREFIX_RE = re.compile(r"[A-Za-z0-9_.:@/\-]{1,200}")  # used with fullmatch: queue-name characters, no '#'


class App:
    """Task functions by name, and the way to submit them to a broker at `url`."""

    def __init__(
        self,
        url: str | None = None,
        *,
        serializer: str = "msgpack",
        app_id: str | None = None,
        connect_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
        reply_prefix: str = REPLIES_PREFIX,
        batching: bool | ProducerSettings | dict[str, Any] = False,
        job_registry: str | None = JOBS_QUEUE,
        job_retention_secs: float | None = job_retention.DEFAULT_RETENTION_SECS,
        near: str | None = None,
    ) -> None:
        self.batching = ProducerSettings.of(batching)
        if not isinstance(reply_prefix, str) or not _REPLY_PREFIX_RE.fullmatch(reply_prefix):
            raise ValueError(f"reply_prefix {reply_prefix!r} must be 1..200 characters of [A-Za-z0-9_.:@/-]")
        self.reply_prefix = reply_prefix
        if job_registry is not None:
            validate_queue(job_registry, Limits(), "job_registry")  # BadRequest
        self.job_registry = job_registry
        self.job_retention_secs = job_retention.validate_retention(job_retention_secs)
        self._job_pruner = job_retention.Pruner()
        self._url = url
        self._near = near
        self.serializer = Serializer(serializer)
        self._fixed_id = app_id is not None
        self.id = app_id or uuid.uuid4().hex[:16]
        self.connect_timeout = connect_timeout
        self.clock = clock
        self.tasks: dict[str, TaskDefinition] = {}
        self.periodics: dict[str, PeriodicDefinition] = {}
        self.join_handlers: dict[str, JoinHandler] = {}
        self._client: Client | None = None
        self._collector: ReplyCollector | None = None
        self._producer: Producer | None = None
        self._batch_scope = threading.local()  # .producer: the producer of this thread's `batch()` block
        self._lock = threading.Lock()
        self.task(name=SHELL_TASK, retry_on=())(run_shell)  # a command that cannot start will not start later

    def __repr__(self) -> str:
        return f"<App {self.id} tasks={len(self.tasks)}>"

    # ------------------------------------------------------------ connection

    @property
    def url(self) -> str | None:
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        if self._client is not None:
            raise RuntimeError("the app is connected: close() it before pointing it at another broker")
        self._url = value

    @property
    def near(self) -> str | None:
        """On a cluster (`kw://a,b,c`): the node the app's leases (its results) ask first; None:
        the client's default (a node whose address is this host's)."""
        return self._near

    @near.setter
    def near(self, value: str | None) -> None:
        if self._client is not None:
            raise RuntimeError("the app is connected: close() it before choosing another near node")
        self._near = value

    @property
    def client(self) -> Client:
        """The app's client, connected on first use (thread-safe, shared by handles and the collector)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = Client(self._url, connect_timeout=self.connect_timeout, near=self._near)
        return self._client

    @property
    def collector(self) -> ReplyCollector:
        if self._collector is None:
            with self._lock:
                if self._collector is None:
                    self._collector = ReplyCollector(lambda: self.client, self.serializer, self.id)
        return self._collector

    @property
    def producer(self) -> Producer | None:
        """The batching producer every submit goes through (made on first use), or None without batching."""
        if self.batching is None:
            return None
        if self._producer is None:
            client = self.client  # takes the lock itself
            with self._lock:
                if self._producer is None:
                    self._producer = client.producer(**dataclasses.asdict(self.batching))
        return self._producer

    def _new_producer(self, settings: ProducerSettings) -> Producer:
        return self.client.producer(**dataclasses.asdict(settings))

    @contextmanager
    def batch(self, settings: ProducerSettings | dict[str, Any] | None = None) -> Iterator[Producer]:
        """Batch this thread's submits inside the block; at its end wait until all are durable,
        raising the first failure (each handle's `sent()` tells its own). Uses the app's producer
        with `batching`, else one made for the block (with `settings`, or the defaults)."""
        outer = getattr(self._batch_scope, "producer", None)
        if outer is not None:  # nested: the outer block's producer, flushed by the outer block
            yield outer
            return
        producer = self.producer
        own = producer is None
        if producer is None:
            block_settings = ProducerSettings.of(settings or True)
            assert block_settings is not None  # only None and False give none
            producer = self._new_producer(block_settings)
        self._batch_scope.producer = producer
        try:
            yield producer
        except BaseException:
            self._batch_scope.producer = None
            if own:
                producer.close()  # sends what it holds; the block's own error is the one raised
            raise
        self._batch_scope.producer = None
        try:
            producer.flush()
        finally:
            if own:
                producer.close()

    def close(self) -> None:
        """Send what the batching producer holds, stop collecting results and disconnect; the app can
        be used (and re-pointed) again."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=PRODUCER_CLOSE_SECS)
        collector, self._collector = self._collector, None
        if collector is not None:
            collector.close()
        client, self._client = self._client, None
        if client is not None:
            if collector is not None and not self._fixed_id:
                for queue in collector.queues:
                    try:
                        client.delete_queue(queue, timeout=5.0)
                    except Exception:
                        pass  # best effort: an unreachable broker keeps its reply queue
            client.close()
        if not self._fixed_id:
            self.id = uuid.uuid4().hex[:16]

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------- definitions

    def task(self, function: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a function as a task: ``@app.task`` or ``@app.task(queue="emails", ...)``.

        Options are those of `TaskOptions` (`definitions` module docstring):
        name, queue, lease_secs, max_attempts, delivery, timeout,
        retry_backoff, retry_backoff_max, retry_on, rate_limit, ignore_result, bind.
        """

        def register(function: Callable[..., Any]) -> TaskDefinition:
            definition = TaskDefinition(self, function, make_options(function, **options))
            if definition.name in self.tasks and self.tasks[definition.name].function is not function:
                raise ValueError(f"a task named {definition.name!r} is already registered")
            self.tasks[definition.name] = definition
            return definition

        return register(function) if function is not None else register

    def periodic(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        every: Any = None,
        cron: str | None = None,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        """Register a task fired on a schedule: ``@app.periodic(every=60)`` or ``cron="*/5 * * * *"``.

        Workers started with ``--beat`` fire it; each tick runs once however
        many of them do. Its result is not kept (``ignore_result``).
        """
        schedule = make_schedule(every, cron)
        options.setdefault("ignore_result", True)

        def register(function: Callable[..., Any]) -> TaskDefinition:
            definition = self.task(**options)(function)
            self.periodics[definition.name] = PeriodicDefinition(definition, schedule, tuple(args), dict(kwargs or {}))
            return definition

        return register(function) if function is not None else register

    def handle_joins(self, queue: str, handler: JoinHandler) -> None:
        """Run the jobs a broker join starts in `queue` with `handler` (`join_handlers`); workers of
        this app serve the queue."""
        validate_queue(queue, Limits(), "queue")
        if queue in self.join_handlers and self.join_handlers[queue] is not handler:
            raise ValueError(f"queue {queue!r} already has a join handler")
        self.join_handlers[queue] = handler

    def definition(self, name: str) -> TaskDefinition | None:
        return self.tasks.get(name)

    def queues(self) -> list[str]:
        """Every queue the app's tasks are defined on (and ``<queue>.gang`` for gang tasks, and the
        job queues of its join handlers), in name order."""
        queues = {definition.queue for definition in self.tasks.values()} | set(self.join_handlers)
        queues |= {gang_queue_of(definition.queue) for definition in self.tasks.values() if definition.options.needs > 1}
        return sorted(queues)

    # ------------------------------------------------------------ submitting

    def definition_of(self, task: TaskDefinition | str) -> TaskDefinition:
        """The definition of `task`, given as a definition or a registered name (KeyError if unknown)."""
        if isinstance(task, TaskDefinition):
            return task
        definition = self.tasks.get(task)
        if definition is None:
            raise KeyError(f"no task named {task!r} in this app")
        return definition

    def submit(self, task: TaskDefinition | str, *args: Any, **kwargs: Any) -> Handle:
        """`task.submit(*args, **kwargs)` for a definition or a task name."""
        return self.definition_of(task).submit(*args, **kwargs)

    def prepare(
        self,
        definition: TaskDefinition,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None = None,
        delay: float | None = None,
        at: datetime | float | None = None,
        after: Iterable[Any] | None = None,
        task_id: str | None = None,
        node: str | None = None,
        via: Producer | None = None,
    ) -> tuple[dict[str, Any], Handle]:
        """The broker task for one call and its handle, nothing sent yet (for bundling). Parents
        (`after`) still held by a batching producer other than `via` are waited for first."""
        options = definition.options
        if key is not None:
            validate_pid(key, Limits(), "key")
        now = self.clock()
        task_id = key or task_id or new_ids(1, now)[0]
        due: float | None = None
        if delay is not None and at is not None:
            raise ValueError("give delay= or at=, not both")
        if delay is not None:
            due = now + float(delay)
        elif at is not None:
            due = at.timestamp() if isinstance(at, datetime) else float(at)
        queue, pid = options.queue if node is None else local_queue_of(options.queue, node), task_id
        task: dict[str, Any] = {}
        if due is not None and due > now:
            queue, pid = delayed_queue_of(options.queue), delayed_pid(due, task_id)
            if key is not None:
                task["unless"] = [(options.queue, key)]
        headers = {TASK_ID_HEADER: task_id, SUBMITTED_AT_HEADER: f"{now:.6f}"}
        tracing.inject(headers)  # the current span's context (the submit's own span: `tracing`)
        slot = reply_queue = submission = None
        if not options.ignore_result:
            reply_queue = reply_queue_for(options.queue, self.id, self.reply_prefix)
            submission = new_ids(1, now)[0]
            headers[REPLY_TO_HEADER] = reply_queue
            headers[SUBMISSION_HEADER] = submission
            slot = self.collector.slot(submission)
            self.collector.watch(reply_queue)
        task.update(
            queue=queue,
            pid=pid,
            data=self.serializer.dump_call(options.name, args, kwargs),
            headers=headers,
            max_attempts=options.broker_max_attempts,
        )
        if after:
            after = list(after)
            for parent in after:
                sending = getattr(parent, "sending", None)
                if sending is not None and sending.producer is not via:
                    parent.sent()  # the same producer keeps the order; another path might not
            task["after"] = [task_key(parent, "after") for parent in after]
        handle = Handle(self, task_id, options.name, queue, pid, slot, reply_queue, submission)
        if key is not None and slot is not None:
            # a key can collapse into a live task: keep its results from now on, in case
            # that task finishes before the handle learns which run it joined
            handle.capture = self.collector.capture(task_id)
        return task, handle

    def submit_call(
        self,
        definition: TaskDefinition,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        **options: Any,
    ) -> Handle:
        """Submit one call; `options` are those of `prepare` (key, delay, at, after, node).
        Through the batching producer if there is one (`batch`, `batching`); inside a PRODUCER
        span when tracing is on (`tracing`)."""
        span = tracing.start_send(definition.name)
        if span is None:
            return self._submit_call(definition, args, kwargs, options)
        with tracing.use(span):
            handle = self._submit_call(definition, args, kwargs, options)
            tracing.sent(span, handle.queue, handle.pid, handle.id)
            return handle

    def _submit_call(
        self, definition: TaskDefinition, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
    ) -> Handle:
        producer = getattr(self._batch_scope, "producer", None) or self.producer
        task, handle = self.prepare(definition, args, kwargs, via=producer, **options)
        if producer is None:
            self.enqueue_prepared([task], [handle])
            return handle
        if handle.capture is not None:
            handle.task = task  # a keyed submit learns which run it joined once the outcome is known
        handle.sending = producer.enqueue_task(task)
        return handle

    def enqueue_prepared(
        self,
        tasks: list[dict[str, Any]],
        handles: list[Handle],
        chunk: int = DEFAULT_MAP_CHUNK,
        *,
        lead: dict[str, Any] | None = None,
    ) -> None:
        """Enqueue prepared tasks in order, `chunk` per request (parents before children stay so);
        a handle whose task collapsed into a live one is pointed at that task's run. `lead`: one
        more task (a job's record), sent in the same request as the first chunk, before it."""
        chunk = max(1, min(chunk, MAX_BATCH))
        first = 0
        if lead is not None:
            first = min(chunk, MAX_BATCH - 1, len(tasks))
            outcomes = self.client.enqueue_many([lead, *tasks[:first]])
            follow_collapsed(self, tasks[:first], handles[:first], outcomes[1:])
        for start in range(first, len(tasks), chunk):
            outcomes = self.client.enqueue_many(tasks[start : start + chunk])
            follow_collapsed(self, tasks[start : start + chunk], handles[start : start + chunk], outcomes)
        if lead is not None:
            self._prune_job_records(lead["queue"])

    def _prune_job_records(self, registry: str) -> None:
        """Remove the registry's records past `job_retention_secs`, at most once a minute (`job_retention`)."""
        if self.job_retention_secs is None:
            return
        now = self.clock()
        with self._lock:
            due = self._job_pruner.due(now)
        if due:
            self._job_pruner.run(self.client, registry, now - self.job_retention_secs)

    def map(self, task: TaskDefinition | str, items: Iterable[Any], *, chunk: int = DEFAULT_MAP_CHUNK) -> list[Handle]:
        """One task per item, called as `task(item)`, submitted `chunk` per request; returns the handles.

        The next bundle is prepared while the one before it is in flight (`bundles`); no keys, so
        nothing collapses. With tracing on, one PRODUCER span sends them all (`tracing`)."""
        definition = self.definition_of(task)
        span = tracing.start_send(definition.name)
        if span is None:
            return self._map(definition, items, chunk)
        with tracing.use(span):
            handles = self._map(definition, items, chunk)
            tracing.sent(span, definition.queue)
            span.set_attribute("messaging.batch.message_count", len(handles))
            return handles

    def _map(self, definition: TaskDefinition, items: Iterable[Any], chunk: int) -> list[Handle]:
        chunk = max(1, min(chunk, MAX_BATCH))
        handles: list[Handle] = []
        if isinstance(items, (list, tuple, range)) and len(items) <= chunk:
            bundle, handles = self.prepare_bundle(definition, items)
            if bundle:
                self.client.enqueue_many(bundle)
            return handles
        remaining = iter(items)
        with BundleSender(self.client.enqueue_many) as sender:
            while part := list(itertools.islice(remaining, chunk)):
                bundle, made = self.prepare_bundle(definition, part)
                sender.send(bundle)
                handles.extend(made)
        return handles

    def prepare_bundle(
        self, definition: TaskDefinition, items: Iterable[Any]
    ) -> tuple[list[dict[str, Any]], list[Handle]]:
        """`prepare(definition, (item,), {})` for each item, sharing what the calls share: one
        clock reading, the reply queue, one draw of ids and one lock for the result slots."""
        options = definition.options
        name, queue, max_attempts = options.name, options.queue, options.broker_max_attempts
        calls = [self.serializer.dump_call(name, (item,), {}) for item in items]
        now = self.clock()
        submitted_at = f"{now:.6f}"
        count = len(calls)
        context = tracing.context_headers()  # one span sends the bundle: the same context in each task
        if options.ignore_result:
            task_ids = new_ids(count, now)
            tasks: list[dict[str, Any]] = [
                {"queue": queue, "pid": task_id, "data": call, "max_attempts": max_attempts,
                 "headers": {TASK_ID_HEADER: task_id, SUBMITTED_AT_HEADER: submitted_at}}
                for task_id, call in zip(task_ids, calls)
            ]
            if context:
                for item in tasks:
                    tracing.merge(item["headers"], context)
            return tasks, [Handle(self, task_id, name, queue, task_id, None) for task_id in task_ids]
        task_ids, submissions = new_ids(count, now), new_ids(count, now)
        reply_queue = reply_queue_for(queue, self.id, self.reply_prefix)
        collector = self.collector
        slots = collector.slots(submissions)
        collector.watch(reply_queue)
        tasks = [
            {"queue": queue, "pid": task_id, "data": call, "max_attempts": max_attempts,
             "headers": {TASK_ID_HEADER: task_id, SUBMITTED_AT_HEADER: submitted_at, REPLY_TO_HEADER: reply_queue,
                         SUBMISSION_HEADER: submission}}
            for task_id, submission, call in zip(task_ids, submissions, calls)
        ]
        if context:
            for item in tasks:
                tracing.merge(item["headers"], context)
        handles = [
            Handle(self, task_id, name, queue, task_id, slot, reply_queue, submission)
            for task_id, submission, slot in zip(task_ids, submissions, slots)
        ]
        return tasks, handles

    def job(self, name: str | None = None, *, tag: str | None = None) -> Job:
        """A `Job`: build a graph of tasks with `add`, then submit it in bundles. `name` names it in
        its record (`job_records`; default: its first task's name); `tag` is the routing tag its
        task ids carry, which keeps it on one node of a cluster (default: the job id; see `job`)."""
        return Job(self, name, tag=tag)

    def on_cluster(self) -> bool:
        """Whether the app's broker is a cluster (`kw://a,b,c`, or a client given a cluster map)."""
        client = self.client
        return client.address.cluster or client.cluster_map is not None

    def results(self, handles: Iterable[Handle], timeout: float | None = None) -> list[Any]:
        """The results of many handles in order; raises the first failure (or TimeoutError)."""
        return results_of(handles, timeout)
