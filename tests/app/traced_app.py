"""The app of the tracing tests (`app.traced_app:app`), which sets up its own tracing as a user's would.

A worker process imports its app by reference, and so does the child process
that runs a timed task: the app's module is where a program makes its
tracer provider (see `kittiwake.app.tracing`). Here, when
``KITTIWAKE_TEST_SPANS`` names a file, every process that imports this
module exports its finished spans there, one JSON object per line (the SDK's
`Span.to_json`), so the test reads the worker's spans from outside; the
submitting test process does not set the variable and uses a tracer
provider of its own.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace

from kittiwake.app import App, TaskContext

SPANS_FILE_ENV = "KITTIWAKE_TEST_SPANS"
QUEUE = "traced"


def _export_spans_to(path: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(path, "a")  # one line per span, written and flushed when the span ends
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n"))
    )
    trace.set_tracer_provider(provider)


if os.environ.get(SPANS_FILE_ENV):
    _export_spans_to(os.environ[SPANS_FILE_ENV])

app = App()
tracer = trace.get_tracer("traced_app")


@app.task(queue=QUEUE)
def echo(value: Any) -> Any:
    with tracer.start_as_current_span(f"inside {value}"):
        return value


@app.task(queue=QUEUE, max_attempts=1)
def explode(message: str) -> None:
    raise ValueError(message)


@app.task(queue=QUEUE, max_attempts=2, retry_backoff=0, bind=True)
def flaky(task: TaskContext) -> int:
    if task.attempt == 1:
        raise ConnectionError("the first attempt fails")
    return task.attempt


@app.task(queue=QUEUE, timeout=30)
def timed(value: Any) -> Any:
    """Runs in the worker's child process (a timeout): its span there continues the trace."""
    with tracer.start_as_current_span(f"timed inside {value}"):
        return value


@app.task(queue=QUEUE, ignore_result=True)
def quiet(value: Any) -> None:
    return None


@app.task(queue=QUEUE)
def submits(value: Any) -> str:
    """Submits another task from inside its run: that task's trace goes on from this run."""
    return quiet.submit(value).id


@app.task(queue=QUEUE, bind=True)
def continues(task: TaskContext, queue: str, pid: str) -> None:
    task.enqueue_on_success(queue, b"next", pid=pid)


@app.task(queue=QUEUE, needs=2, gang_timeout=10, lease_secs=5)
def pair() -> int:
    """A gang of two slots: the member's run goes on in the leader's trace."""
    return int(os.environ["KITTIWAKE_RANK"])
