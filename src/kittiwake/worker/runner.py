"""Running one leased task: decode it, check it may run, call the function, decide the outcome.

The decision, in order:

0. A task whose ``kittiwake-reply-to`` is not a reply queue of this app in
   the task's consistency group (`envelope.is_reply_queue_for` with the app's
   ``reply_prefix``) is not run: FAIL with REPLY_TO_REFUSED, no result posted
   anywhere, a warning logged. The header is its submitter's word, and the
   worker would write there with its own rights (the threat and the rule:
   `envelope`, "Reply queues are the submitter's").
1. The payload must decode and name a task of the app, else FAIL
   (BAD_PAYLOAD, UNKNOWN_TASK): no retry can fix either. A gang join
   (`gang.GANG_JOIN`) is a task of the app only in a ``.gang`` queue and
   only when it names that queue's own mailbox (`gang.join_refusal`).
2. At most once: a task delivered before (``deliveries > 1``) runs only if
   the previous delivery ended cleanly and said so (``[redeliver N]`` note,
   see `envelope`); otherwise its worker was lost mid-run: FAIL with
   WORKER_LOST — dead-lettered, never started again. This errs on the safe
   side: a task the lost worker had leased ahead (prefetched) but not yet
   started is dead-lettered too. Serve at-most-once queues with
   ``--prefetch 0`` to keep that window to the task in hand.
3. The function runs: in this process on the slot's thread, or — when the
   task has a `timeout` — in a child process (`Sandbox`), because a thread
   cannot be stopped: the child is killed when the time is up and replaced
   for the next task (a child that dies during a run fails it with WORKER_LOST,
   naming its signal or exit status as `lost` words it). The timeout is the run's: it starts once the child has
   imported the app and said so, so a slow import (pandas, PySpark) is never
   taken for a slow task; a child that has not imported it within
   `SANDBOX_START_SECS` is killed and the run fails with WORKER_LOST, as it
   does when the import fails. Progress reports travel from the child over its pipe.
4. It returned: DONE with the encoded result (an unencodable or oversize
   result becomes an error result: the handle learns why instead of hanging).
   It raised (or timed out): RETRY with exponential backoff if attempts are
   left and the exception is one of `retry_on`, else FAIL with the error.

A sandbox child imports the app by its reference ("module:attribute"); an
app that cannot be found that way runs timed tasks in a thread and can only
report a TIMEOUT after the run, not stop it.

With tracing on (`kittiwake.app.tracing`), each run is a CONSUMER span, child
of the span that submitted the task; a sandboxed run takes its context along.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable

from kittiwake import errors
from kittiwake.app import context as task_context
from kittiwake.app import tracing
from kittiwake.app.definitions import Delivery, TaskDefinition
from kittiwake.app.envelope import is_reply_queue_for, redeliver_note, redelivery_allowed
from kittiwake.app.serialization import PayloadError, RemoteError, Serializer
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import JOIN_HEADER, REPLIES_PREFIX, REPLY_TO_HEADER, TASK_ID_HEADER
from kittiwake.worker import gang
from kittiwake.worker.heartbeat import Held, LeaseKeeper
from kittiwake.worker.lost import WORKER_LOST, exit_description
from kittiwake.worker.outcomes import DEFAULT_BROKER_MAX_ATTEMPTS, Kind, Outcome

log = logging.getLogger("kittiwake.worker.runner")

REPLY_TO_REFUSED = "REPLY_TO_REFUSED"  # the dead-letter reason of a task asking for its result elsewhere

SANDBOX_START_SECS = 120.0  # a sandbox child that has not imported the app by then is killed (WORKER_LOST)
SANDBOX_EXIT_WAIT_SECS = 1.0  # a child whose pipe closed is exiting: how long to wait to learn how


def call_function(definition: TaskDefinition, context: task_context.TaskContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call the task's function inside its context (coroutine functions run in a fresh event loop)."""
    token = task_context.enter(context)
    try:
        function = definition.function
        call_args = (context, *args) if definition.options.bind else tuple(args)
        if definition.is_coroutine:
            return asyncio.run(function(*call_args, **kwargs))
        return function(*call_args, **kwargs)
    finally:
        task_context.leave(token)


def remote_error(error: BaseException, reason: str = "ERROR") -> RemoteError:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return RemoteError(type(error).__name__, str(error), text, reason)


class TimedOut(Exception):
    """The run took longer than the task's timeout and was killed."""


class Sandbox:
    """A child process that runs timed tasks one at a time and can be killed (see the module docstring)."""

    def __init__(self, app_reference: str, sys_path: list[str]) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(
            target=sandbox_main, args=(child_end, app_reference, sys_path), name="kittiwake-sandbox", daemon=True
        )
        self._process.start()
        child_end.close()
        self._ready = False  # the child sends ("ready",) once it has imported the app

    def alive(self) -> bool:
        return self._process.is_alive()

    def run(
        self, name: str, payload: bytes, context_fields: dict[str, Any], timeout: float,
        on_progress: Callable[[float, str | None], None],
    ) -> tuple[bool, Any]:
        """(True, (result payload, tasks to enqueue on success)) or (False, RemoteError); raises
        TimedOut after killing the child. The current trace context goes along (`tracing`)."""
        if not self._ready:
            lost = self._wait_ready()
            if lost is not None:
                return False, lost
        self._connection.send((name, payload, context_fields, tracing.context_headers()))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._connection.poll(remaining):
                self.kill()
                raise TimedOut(f"the task ran over its timeout of {timeout} s and was killed")
            try:
                message = self._connection.recv()
            except EOFError:
                return False, self._lost("during the task")
            kind = message[0]
            if kind == "progress":
                on_progress(message[1], message[2])
            elif kind == "result":
                return True, (message[1], message[2])
            elif kind == "error":
                return False, RemoteError.from_wire(message[1])

    def _wait_ready(self) -> RemoteError | None:
        """Wait for the child to import the app (not part of any task's timeout); the error when it
        died or took over `SANDBOX_START_SECS`, after killing it."""
        try:
            if self._connection.poll(SANDBOX_START_SECS):
                if self._connection.recv() == ("ready",):
                    self._ready = True
                    return None
                message = "the sandbox process sent something else than ready"
            else:
                message = f"the sandbox process did not import the app within {SANDBOX_START_SECS:.0f} s"
        except (EOFError, OSError):
            return self._lost("while importing the app (see the worker's log)")
        self.kill()
        return RemoteError("WorkerLost", message, reason=WORKER_LOST)

    def _lost(self, when: str) -> RemoteError:
        """The child closed its pipe: it died. Learn how (its signal or status), then clean up."""
        self._process.join(SANDBOX_EXIT_WAIT_SECS)
        code = self._process.exitcode
        pid = self._process.pid
        self.kill()
        how = "died" if code is None else exit_description(code)
        return RemoteError("WorkerLost", f"the sandbox process {pid} {how} {when}", reason=WORKER_LOST)

    def kill(self) -> None:
        if self._process.is_alive():
            try:
                os.kill(self._process.pid, signal.SIGKILL)  # type: ignore[arg-type]
            except ProcessLookupError:
                pass
        self._process.join(5.0)
        self._connection.close()

    def close(self) -> None:
        try:
            self._connection.send(None)
        except (OSError, ValueError):
            pass
        self._process.join(1.0)
        if self._process.is_alive():
            self.kill()


def sandbox_main(connection: Connection, app_reference: str, sys_path: list[str]) -> None:
    """The sandbox child: import the app, then run (name, payload, context) requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from kittiwake.worker.config import load_app

    app = load_app(app_reference, sys_path)
    serializer: Serializer = app.serializer
    connection.send(("ready",))  # the task's timeout starts now (`Sandbox.run`)
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        name, payload, fields, trace_headers = request

        def report(fraction: float, note: str | None) -> None:
            connection.send(("progress", fraction, note))

        try:
            _, args, kwargs = serializer.load_call(payload)
            definition = app.tasks[name]
            context = task_context.TaskContext(reporter=report, **fields)
            with tracing.attached(trace_headers):
                value = call_function(definition, context, args, kwargs)
            connection.send(("result", serializer.dump_result(value), context.outbox))
        except BaseException as error:  # everything travels back as an error result
            connection.send(("error", remote_error(error).to_wire()))


class TaskRunner:
    """Runs held tasks for one worker process; `run` is called from the slot threads."""

    def __init__(
        self,
        app: Any,
        client: QueueClient,
        keeper: LeaseKeeper,
        *,
        app_reference: str | None,
        sys_path: list[str] | None = None,
        rng: random.Random | None = None,
        worker_id: str = "worker",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.clock = clock  # monotonic seconds: when a run started, how long it took
        self.worker_id = worker_id
        self.client = client
        self.keeper = keeper
        self.serializer: Serializer = app.serializer
        self.reply_prefix: str = getattr(app, "reply_prefix", REPLIES_PREFIX)
        self.app_reference = app_reference
        self.sys_path = list(sys_path or sys.path[:1])
        self.rng = rng or random.Random()
        self._sandboxes: dict[int, Sandbox] = {}  # by slot thread id

    def close(self) -> None:
        for sandbox in list(self._sandboxes.values()):
            sandbox.close()
        self._sandboxes.clear()

    def run(self, held: Held) -> Outcome:
        """Run one held task; with tracing on, inside a CONSUMER span (`tracing`)."""
        span = tracing.start_process(held.task, self.worker_id)
        if span is None:
            return self._run(held)
        with tracing.use(span):
            outcome = self._run(held)
            name = held.definition.name if held.definition is not None else None
            tracing.processed(span, name, outcome.kind.value)
            return outcome

    def _run(self, held: Held) -> Outcome:
        task = held.task
        reply_to = (task.headers or {}).get(REPLY_TO_HEADER)
        if reply_to is not None and not is_reply_queue_for(reply_to, task.queue, self.reply_prefix):
            return self._refuse_reply_to(held, reply_to)
        if task.headers and JOIN_HEADER in task.headers:
            handler = self.app.join_handlers.get(task.queue)
            if handler is not None:
                return self._run_join(held, handler)
        try:
            name, args, kwargs = self.serializer.load_call(task.data)
        except PayloadError as error:
            return self._fail(held, RemoteError("PayloadError", str(error), reason="BAD_PAYLOAD"))
        if name == gang.GANG_JOIN:
            refusal = gang.join_refusal(task.queue, args)
            if refusal is not None:
                log.warning("task %s/%s: %s; dead-lettered unrun", task.queue, task.pid, refusal)
                return self._fail(held, RemoteError("UnknownTask", refusal, reason="UNKNOWN_TASK"))
            return self._run_member(held, args)
        definition = self.app.tasks.get(name)
        if definition is None:
            return self._fail(held, RemoteError("UnknownTask", f"no task named {name!r} in this worker's app", reason="UNKNOWN_TASK"))
        held.definition = definition
        if definition.options.delivery is Delivery.AT_MOST_ONCE and task.deliveries > 1 and not self._may_redeliver(held):
            message = f"delivery {task.deliveries}: an earlier delivery's worker was lost mid-run"
            return self._fail(held, RemoteError("WorkerLost", message, reason=WORKER_LOST))
        headers = task.headers or {}
        fields: dict[str, Any] = {
            "id": headers.get(TASK_ID_HEADER, task.pid),
            "name": name,
            "queue": task.queue,
            "pid": task.pid,
            "attempt": task.attempts + 1,
            "deliveries": task.deliveries,
            "headers": dict(headers),
        }
        held.started_at = self.clock()
        timeout = definition.options.timeout
        if definition.options.needs > 1:
            return self._run_leader(held, definition, fields, args, kwargs)
        try:
            if timeout is not None and self.app_reference is not None:
                ok, value = self._run_sandboxed(held, name, fields, timeout)
                if not ok:
                    return self._failed_run(held, definition, value, exception=None)
                payload, outbox = value
                return Outcome(held, Kind.DONE, payload=None if definition.options.ignore_result else payload,
                               enqueue=outbox)
            context = task_context.TaskContext(reporter=lambda f, n: self.keeper.report(held, f, n), **fields)
            value = call_function(definition, context, args, kwargs)
            outbox = context.outbox
        except TimedOut as error:
            return self._failed_run(held, definition, RemoteError("TimeoutError", str(error), reason="TIMEOUT"), None)
        except Exception as error:
            return self._failed_run(held, definition, remote_error(error), error)
        ran_secs = self.clock() - held.started_at
        if timeout is not None and ran_secs > timeout:
            message = f"the task ran {ran_secs:.1f} s, over its timeout of {timeout} s"
            return self._failed_run(held, definition, RemoteError("TimeoutError", message, reason="TIMEOUT"), None)
        payload = None if definition.options.ignore_result else self.serializer.dump_result(value)
        return Outcome(held, Kind.DONE, payload=payload, enqueue=outbox)

    def _run_join(self, held: Held, handler: Any) -> Outcome:
        """A job a broker join started, run by the app's handler for its queue (`app.join_handlers`):
        DONE with what the handler returns enqueued in the job's dequeue; a raise retries the job
        while its attempts last, then dead-letters it."""
        task = held.task
        held.started_at = self.clock()
        try:
            enqueue = handler.run(task, self.client, lambda f, n: self.keeper.report(held, f, n))
        except Exception as error:
            log.warning("job %s/%s failed: %s: %s", task.queue, task.pid, type(error).__name__, error)
            tracing.failed(type(error).__name__, str(error), exception=error)
            attempt = task.attempts + 1
            if attempt < (task.max_attempts or DEFAULT_BROKER_MAX_ATTEMPTS):
                backoff = handler.backoff_secs(task)
                note = redeliver_note(task.deliveries, f"retry {attempt + 1} in {backoff:.1f}s after "
                                      f"{type(error).__name__}: {error}")
                return Outcome(held, Kind.RETRY, reason=note[:4000], backoff_secs=backoff)
            return Outcome(held, Kind.FAIL, reason=handler.failure_reason(error))
        return Outcome(held, Kind.DONE, enqueue=list(enqueue), settled=lambda: handler.settled(task, self.client))

    def _run_leader(
        self, held: Held, definition: TaskDefinition, fields: dict[str, Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome:
        """A gang task: assemble the gang as rank 0, run, and wait for every member's rank to end
        (see `kittiwake.worker.gang`). A gang that did not assemble is parked, not failed."""
        options = definition.options
        try:
            assembled = gang.lead(self, held, options.needs, options.gang_timeout)
        except errors.KittiwakeError as error:
            return self._failed_run(held, definition, remote_error(error, "GANG_ERROR"), None)
        if assembled is None:
            return Outcome(held, Kind.PARK, backoff_secs=self.rng.uniform(*gang.PARK_SECS))
        context = task_context.TaskContext(reporter=lambda f, n: self.keeper.report(held, f, n), **fields)
        failure: tuple[RemoteError, BaseException] | None = None
        try:
            with assembled:
                value = call_function(definition, context, args, kwargs)
        except Exception as error:
            failure = (remote_error(error), error)
        try:
            lost = gang.await_members(self, assembled)
        except errors.KittiwakeError as error:
            return self._failed_run(held, definition, remote_error(error, "GANG_ERROR"), None)
        if failure is not None:
            return self._failed_run(held, definition, *failure)
        if lost:
            message = f"gang {assembled.info['gang']} lost {', '.join(lost)} before its rank ended"
            return self._failed_run(held, definition, RemoteError("WorkerLost", message, reason=WORKER_LOST), None)
        payload = None if options.ignore_result else self.serializer.dump_result(value)
        return Outcome(held, Kind.DONE, payload=payload, enqueue=context.outbox)

    def _run_member(self, held: Held, join_args: list[Any]) -> Outcome:
        """A gang join: take a rank in the gang and run the gang's function with it. The join stays
        leased until the rank ended, then goes with a done message to the leader in one update;
        only the leader's run posts a result."""
        held.started_at = self.clock()
        try:
            assembled = gang.run_member(self, held, join_args)
        except errors.KittiwakeError as error:  # the join was cancelled: its gang gave up
            log.info("gang join %s/%s: %s", held.task.queue, held.task.pid, error)
            return Outcome(held, Kind.DROP)
        if assembled is None:
            return Outcome(held, Kind.DONE)  # finish the join: no gang to run in
        failure: BaseException | None = None
        try:
            name, args, kwargs = self.serializer.load_call(join_args[4])
            definition = self.app.tasks[name]
            fields: dict[str, Any] = {"id": f"{join_args[0]}-rank-{assembled.info['rank']}", "name": name, "queue": held.task.queue,
                      "pid": held.task.pid, "attempt": 1, "deliveries": held.task.deliveries, "headers": {}}
            context = task_context.TaskContext(**fields)
            with assembled:
                call_function(definition, context, args, kwargs)
        except Exception as error:
            log.exception("gang member %s/%s", held.task.queue, held.task.pid)
            tracing.failed(type(error).__name__, str(error), exception=error)
            failure = error
        done = gang.done_message(self, held, assembled, join_args, failure)
        return Outcome(held, Kind.DONE, enqueue=[done] if done is not None else [])

    def _may_redeliver(self, held: Held) -> bool:
        try:
            view = self.client.get(held.task.queue, held.task.pid)
        except errors.TaskNotFound:
            return False
        return redelivery_allowed(view.note, held.task.deliveries)

    def _run_sandboxed(self, held: Held, name: str, fields: dict[str, Any], timeout: float) -> tuple[bool, Any]:
        import threading

        slot = threading.get_ident()
        sandbox = self._sandboxes.get(slot)
        if sandbox is None or not sandbox.alive():
            assert self.app_reference is not None
            sandbox = Sandbox(self.app_reference, self.sys_path)
            self._sandboxes[slot] = sandbox
        try:
            return sandbox.run(name, held.task.data, fields, timeout, lambda f, n: self.keeper.report(held, f, n))
        except TimedOut:
            self._sandboxes.pop(slot, None)
            raise

    def _failed_run(
        self, held: Held, definition: TaskDefinition, error: RemoteError, exception: BaseException | None
    ) -> Outcome:
        options = definition.options
        attempt = held.task.attempts + 1
        retryable = exception is None or isinstance(exception, options.retry_on)
        if error.reason in ("RESULT_UNSERIALISABLE", "RESULT_TOO_LARGE", WORKER_LOST) and exception is None:
            # the process running it died (a sandbox, a gang member): it started, so at most once is over
            retryable = error.reason == WORKER_LOST and options.delivery is not Delivery.AT_MOST_ONCE
        if retryable and attempt < options.max_attempts:
            tracing.failed(error.type, error.message, error.traceback, exception)
            backoff = options.backoff_secs(attempt, self.rng.random())
            note = redeliver_note(
                held.task.deliveries,
                f"retry {attempt + 1} of {options.max_attempts} in {backoff:.1f}s after {error.type}: {error.message}",
            )
            return Outcome(held, Kind.RETRY, reason=note[:4000], backoff_secs=backoff)
        return self._fail(held, error, exception)

    def _refuse_reply_to(self, held: Held, reply_to: str) -> Outcome:
        """FAIL unrun, without a result: there is nowhere it may go (see the module docstring)."""
        task = held.task
        message = (f"asks for its result in {reply_to[:255]!r}, not a reply queue of this app "
                   f"({self.reply_prefix!r} + app id, in the task's consistency group)")
        log.warning("task %s/%s %s: dead-lettered unrun as %s", task.queue, task.pid, message, REPLY_TO_REFUSED)
        tracing.failed("ReplyToRefused", message)
        return Outcome(held, Kind.FAIL, reason=REPLY_TO_REFUSED)

    def _fail(self, held: Held, error: RemoteError, exception: BaseException | None = None) -> Outcome:
        tracing.failed(error.type, error.message, error.traceback, exception)
        payload = self.serializer.dump_error(error)
        return Outcome(held, Kind.FAIL, payload=payload, reason=error.reason)
