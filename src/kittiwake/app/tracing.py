"""OpenTelemetry: one trace from a task's submit to its run on a worker, across processes.

Kittiwake speaks the OpenTelemetry API (the optional dependency
``opentelemetry-api``, extra ``otel``) and never configures it: a program that
set a tracer provider gets Kittiwake's spans in its traces, one that did not
pays (almost) nothing.

Submitting (`App.submit`, a `batch()` block or ``batching=``, `map`, `Job.submit`)
starts a PRODUCER span ``"<task name> send"`` (a job: ``"<job name> send"``)
as a child of whatever span is current, and writes its context into the
task's headers with the W3C Trace Context propagator: ``traceparent`` and,
when there is one, ``tracestate`` (`constants.TRACEPARENT_HEADER`). Its
attributes follow OpenTelemetry's messaging conventions: ``messaging.system``
= ``kittiwake``, ``messaging.destination.name`` = the queue,
``messaging.message.id`` = the pid; a `map` or a job is one span for all its
tasks (``messaging.batch.message_count``). The span ends once the tasks are
enqueued — handed to the batching producer, for a batched submit.

Running (`worker.runner.TaskRunner.run`), a worker reads that context back
from the task's headers and runs the task inside a CONSUMER span
``"<task name> process"`` whose parent is the producer span: the submitter's
trace goes on in the worker, and spans the task's own code starts (or tasks
it submits, or tasks it adds with `enqueue_on_success`, or a gang's joins)
are children of it. The span records ``kittiwake.task.attempt``,
``kittiwake.task.deliveries`` and ``kittiwake.task.outcome`` (done, retry,
fail...); a run that raised, timed out or was refused gets an ``exception``
event and status ERROR. A task with a `timeout` runs in a child process:
the context goes with it. A ``traceparent`` that does not parse, or a
``tracestate`` over `MAX_TRACESTATE_BYTES`, is ignored (the span starts a
trace of its own); the task runs as always.

Setting up a worker's tracing. Each worker process (and each child running
timed tasks) is a fresh interpreter that imports the app by reference
(``kittiwake worker shop:app``), so the app's module is where its tracer
provider is made::

    # shop.py
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    app = App()

A worker process exits through the interpreter's normal exit, so the
provider's own exit hook flushes what its batch processor holds. The tests
do the same with a file exporter (``tests/app/traced_app.py``).

Cost. Off — `opentelemetry` not importable, or no tracer provider set — a
submit asks `tracer` twice (the span, the headers) and adds nothing; a worker
asks once per task. `tracer` reads the API's global provider directly:
90 ns when none is set (`trace.get_tracer_provider()` would cost 830 ns
there, looking up its environment variable every time), 35 ns without the
package. Measured on this project's 2-core test machine (Python 3.11.7,
opentelemetry 1.45), `definition.submit(i)` of a task without a result with
the network taken out (`enqueue_prepared` a no-op), 20 000 submits, best of
5, two rounds:

    without the tracing calls at all        5.8 - 6.4 µs a submit
    no `opentelemetry` package             6.0 - 6.3 µs
    package, no tracer provider            6.3 - 6.9 µs   (the same within noise)
    SDK provider, no exporter             29.5 - 32 µs    (a PRODUCER span, its context, the header)

A real submit round trip to a local broker (3 000 submits, best of 3) took
430 - 500 µs in every one of those cases: the spread between runs is larger
than what tracing adds, on or off. On a worker, the CONSUMER span of a run
(extracting the context, the span, its attributes) costs 0.12 µs a task off
and 26 µs on.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping, cast

from kittiwake.constants import MAX_TRACESTATE_BYTES, TRACEPARENT_HEADER, TRACESTATE_HEADER
from kittiwake.model import Limits

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the optional dependency is not installed: everything here is a no-op
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from kittiwake.client import LeasedTask

log = logging.getLogger("kittiwake.tracing")

INSTRUMENTATION_NAME = "kittiwake"
MESSAGING_SYSTEM = "kittiwake"
TRACEPARENT_BYTES = 55  # version 00: "00-" 32 hex "-" 16 hex "-" 2 hex
MAX_TRACEPARENT_BYTES = 512  # later versions may add fields; the propagator reads no more than this
MAX_HEADERS = Limits().max_headers

_PROPAGATOR = TraceContextTextMapPropagator() if trace is not None else None
_PROVIDER_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ  # the API loads that provider itself
_UNKNOWN = object()
_seen_provider: object = None  # the global provider last looked at, and the tracer it gave
_tracer: Tracer | None = None


def tracer() -> Tracer | None:
    """Kittiwake's tracer from the global tracer provider, or None when tracing is off (no
    `opentelemetry`, or no provider set: the API's proxy or no-op provider)."""
    global _seen_provider, _tracer
    if trace is None:
        return None
    # the API's global as it stands, read without `get_tracer_provider`'s look-up of its environment
    # variable (most of a microsecond, at every submit, while nothing is set); the public call when
    # that variable names a provider to load, or when the attribute is not there
    global_provider: object = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if global_provider is None and not _PROVIDER_FROM_ENVIRONMENT:
        return None
    # the API's global holds the TracerProvider it was set to (or None, or nothing in another version)
    provider = (
        trace.get_tracer_provider() if global_provider is None or global_provider is _UNKNOWN
        else cast("TracerProvider", global_provider)
    )
    if provider is _seen_provider:
        return _tracer
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        found = None
    else:
        version = getattr(sys.modules.get("kittiwake"), "__version__", None)  # imported first, always
        found = provider.get_tracer(INSTRUMENTATION_NAME, version)
    _seen_provider, _tracer = provider, found
    return found


def enabled() -> bool:
    return tracer() is not None


# ------------------------------------------------------------------ submitting


def start_send(name: str, *, count: int | None = None, job_id: str | None = None) -> Span | None:
    """A PRODUCER span ``"<name> send"`` (not yet current: `use` it), or None when tracing is off.
    `count`: how many tasks it sends, for a bundle (`map`, a job)."""
    found = tracer()
    if found is None:
        return None
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    if job_id is not None:
        attributes["kittiwake.job.id"] = job_id
    return found.start_span(f"{name} send", kind=trace.SpanKind.PRODUCER, attributes=attributes)


def sent(span: Span, queue: str | None, pid: str | None = None, task_id: str | None = None) -> None:
    """Where the span's task went (set once `prepare` chose the queue and pid)."""
    if queue is not None:
        span.set_attribute("messaging.destination.name", queue)
    if pid is not None:
        span.set_attribute("messaging.message.id", pid)
    if task_id is not None:
        span.set_attribute("kittiwake.task.id", task_id)


@contextmanager
def use(span: Span) -> Iterator[Span]:
    """`span` current inside the block, ended after it; an exception escaping the block is
    recorded on it (status ERROR) and raised."""
    with trace.use_span(span, end_on_exit=True):
        yield span


def context_headers() -> dict[str, str]:
    """The current span's context as task headers (``traceparent``, ``tracestate``), checked
    (see `inject`); empty when tracing is off or no span is current."""
    carrier: dict[str, str] = {}
    if _PROPAGATOR is None or tracer() is None:
        return carrier
    _PROPAGATOR.inject(carrier)
    traceparent = carrier.get(TRACEPARENT_HEADER)
    if traceparent is None or len(traceparent) != TRACEPARENT_BYTES:
        return {}  # an invalid context injects nothing; another version we do not know
    tracestate = carrier.get(TRACESTATE_HEADER)
    if tracestate is not None and (not tracestate or len(tracestate.encode()) > MAX_TRACESTATE_BYTES):
        del carrier[TRACESTATE_HEADER]  # the receiver would drop it anyway (W3C: at least 512)
    return carrier


def inject(headers: dict[str, str]) -> None:
    """Add the current span's context to a task's `headers` when tracing is on. Headers the task
    already has are kept (a ``traceparent`` given by the caller wins), and the broker's limit on
    headers per task is respected: ``tracestate`` goes first, then the whole context."""
    if trace is None or tracer() is None or TRACEPARENT_HEADER in headers:
        return
    merge(headers, context_headers())


def merge(headers: dict[str, str], context: Mapping[str, str]) -> None:
    """`inject` with a context from `context_headers` (one for many tasks: a bundle)."""
    if not context or TRACEPARENT_HEADER in headers:
        return
    room = MAX_HEADERS - len(headers)
    if room <= 0:
        return
    headers[TRACEPARENT_HEADER] = context[TRACEPARENT_HEADER]
    if room >= 2 and TRACESTATE_HEADER in context and TRACESTATE_HEADER not in headers:
        headers[TRACESTATE_HEADER] = context[TRACESTATE_HEADER]


# --------------------------------------------------------------------- running


def extract(headers: Mapping[str, str] | None) -> Any:
    """The context a task's headers carry; None when they carry none. A malformed or oversize one
    gives an empty context (the propagator checks the form; oversize ones are dropped here first,
    quietly: a task's headers are anybody's, and would fill the worker's log with warnings)."""
    if _PROPAGATOR is None or not headers:
        return None
    traceparent = headers.get(TRACEPARENT_HEADER)
    if traceparent is None:
        return None
    if len(traceparent) > MAX_TRACEPARENT_BYTES:
        return _PROPAGATOR.extract({})
    carrier = {TRACEPARENT_HEADER: traceparent}
    tracestate = headers.get(TRACESTATE_HEADER)
    if tracestate is not None and len(tracestate) <= MAX_TRACESTATE_BYTES:
        carrier[TRACESTATE_HEADER] = tracestate
    try:
        return _PROPAGATOR.extract(carrier)
    except Exception:  # a task's headers are the submitter's: never let them stop the run
        log.debug("ignoring the trace context of a task", exc_info=True)
        return None


def start_process(task: LeasedTask, worker_id: str | None = None) -> Span | None:
    """A CONSUMER span ``"<queue> process"`` for a leased task (renamed after its task once known,
    `processed`), child of the context in its headers; None when tracing is off."""
    found = tracer()
    if found is None:
        return None
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": task.queue,
        "messaging.message.id": task.pid,
        "kittiwake.task.attempt": task.attempts + 1,
        "kittiwake.task.deliveries": task.deliveries,
    }
    if worker_id is not None:
        attributes["messaging.client.id"] = worker_id
    parent = extract(task.headers)
    if parent is None:  # a trace of its own, whatever the worker's thread has current
        parent = otel_context.Context()
    return found.start_span(f"{task.queue} process", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes)


def processed(span: Span, name: str | None, outcome: str) -> None:
    """The run's end as the span shows it: its task's name and its outcome (a run that retries or
    fails has status ERROR already: `failed`)."""
    if name is not None:
        span.update_name(f"{name} process")
        span.set_attribute("kittiwake.task.name", name)
    span.set_attribute("kittiwake.task.outcome", outcome)


def failed(error_type: str, message: str, stacktrace: str | None = None, exception: BaseException | None = None) -> None:
    """Record why the run failed on the current span (the run's CONSUMER span, in the runner): the
    exception when it was raised here, else an ``exception`` event from its description (raised
    in a child process, a timeout, a refused payload)."""
    if trace is None:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    if exception is not None:
        span.record_exception(exception)
    else:
        attributes = {"exception.type": error_type, "exception.message": message}
        if stacktrace:
            attributes["exception.stacktrace"] = stacktrace
        span.add_event("exception", attributes)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{error_type}: {message}"))


@contextmanager
def attached(headers: Mapping[str, str] | None) -> Iterator[None]:
    """The context in `headers` (from `context_headers`) current inside the block: a timed task's
    child process runs in its worker's CONSUMER span."""
    context = extract(headers) if trace is not None else None
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
