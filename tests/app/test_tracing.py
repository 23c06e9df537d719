"""Tracing (`kittiwake.app.tracing`): a task's trace goes from the submitting process to the worker's.

The test process submits inside its own spans, kept in memory by the SDK's
`InMemorySpanExporter`; a real worker process (`app.traced_app`, over a real
broker) exports its spans to a file, read back here. A consumer span whose
parent is the producer span, in the same trace, is the trace connecting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.util._once import Once

from app import traced_app
from kittiwake import Client
from kittiwake.app import TaskFailed, tracing
from kittiwake.constants import MAX_TRACESTATE_BYTES, TRACEPARENT_HEADER, TRACESTATE_HEADER
from kittiwake.model import Limits
from support.broker_process import BrokerProcess
from worker.harness import TESTS_DIR, WorkerProcess, wait_for

RESULT_SECS = 30


def set_global_provider(provider: TracerProvider | None) -> None:
    """The API sets its global provider once per process; tests set and clear it as the SDK's own
    tests do (`opentelemetry.test.globals_test`)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    if provider is not None:
        trace.set_tracer_provider(provider)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("traced") / "data")
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spans") / "worker-spans.jsonl"


@pytest.fixture(scope="module")
def worker(broker: BrokerProcess, spans_file: Path) -> Iterator[WorkerProcess]:
    with WorkerProcess(broker.url, spans_file.with_name("worker.log"), "--concurrency", "2",
                       app="app.traced_app:app", env={traced_app.SPANS_FILE_ENV: str(spans_file)}) as process:
        yield process


@pytest.fixture(scope="module")
def app(broker: BrokerProcess, worker: WorkerProcess) -> Iterator[Any]:
    traced_app.app.url = broker.url
    try:
        yield traced_app.app
    finally:
        traced_app.app.close()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """This process traced into memory for the test, untraced again after it."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    set_global_provider(provider)
    try:
        yield spans
    finally:
        set_global_provider(None)


def worker_spans(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def wait_for_span(path: Path, match: Callable[[dict[str, Any]], bool], count: int = 1) -> list[dict[str, Any]]:
    """The worker's spans matching `match`, once there are `count` of them (a span is written when it ends)."""
    return wait_for(lambda: (found := [span for span in worker_spans(path) if match(span)]) and len(found) >= count
                    and found, timeout=RESULT_SECS, message="the worker's spans")


def hex_id(value: int, digits: int) -> str:
    return f"0x{value:0{digits}x}"


def trace_of(span: ReadableSpan) -> str:
    return hex_id(span.context.trace_id, 32)


def id_of(span: ReadableSpan) -> str:
    return hex_id(span.context.span_id, 16)


def only(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def consumer_spans(path: Path, task: Any, trace_id: str, count: int = 1) -> list[dict[str, Any]]:
    return wait_for_span(path, lambda span: span["name"] == f"{task.name} process"
                         and span["context"]["trace_id"] == trace_id, count)


# ------------------------------------------------------------ across processes


def test_a_task_submitted_in_a_span_runs_in_a_consumer_span_of_that_trace(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    with trace.get_tracer("test").start_as_current_span("request") as request:
        handle = traced_app.echo.submit("hello")
    assert handle.result(timeout=RESULT_SECS) == "hello"
    spans = exporter.get_finished_spans()
    send = only(spans, f"{traced_app.echo.name} send")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "kittiwake", "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.destination.name": traced_app.QUEUE, "messaging.message.id": handle.pid, "kittiwake.task.id": handle.id,
    }
    [run] = consumer_spans(spans_file, traced_app.echo, trace_of(send))
    assert run["kind"] == "SpanKind.CONSUMER"
    assert run["parent_id"] == id_of(send)  # the trace connects: producer → consumer
    assert run["status"]["status_code"] == "UNSET"
    attributes = run["attributes"]
    assert attributes["messaging.system"] == "kittiwake"
    assert attributes["messaging.destination.name"] == traced_app.QUEUE
    assert attributes["messaging.message.id"] == handle.pid
    assert attributes["kittiwake.task.attempt"] == 1 and attributes["kittiwake.task.deliveries"] == 1
    assert attributes["kittiwake.task.outcome"] == "done"
    assert attributes["kittiwake.task.name"] == traced_app.echo.name
    # the task's own spans are children of its run
    [inner] = wait_for_span(spans_file, lambda span: span["name"] == "inside hello")
    assert inner["parent_id"] == run["context"]["span_id"]
    assert inner["context"]["trace_id"] == trace_of(send)


def test_a_failing_run_s_span_records_the_error(app: Any, exporter: InMemorySpanExporter, spans_file: Path) -> None:
    with pytest.raises(TaskFailed):
        traced_app.explode.submit("boom").result(timeout=RESULT_SECS)
    send = only(exporter.get_finished_spans(), f"{traced_app.explode.name} send")
    [run] = consumer_spans(spans_file, traced_app.explode, trace_of(send))
    assert run["parent_id"] == id_of(send)
    assert run["status"]["status_code"] == "ERROR"
    assert run["attributes"]["kittiwake.task.outcome"] == "fail"
    [event] = [event for event in run["events"] if event["name"] == "exception"]
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "boom"


def test_a_retried_task_has_one_span_per_attempt_under_the_same_parent(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    assert traced_app.flaky.submit().result(timeout=RESULT_SECS) == 2
    send = only(exporter.get_finished_spans(), f"{traced_app.flaky.name} send")
    runs = consumer_spans(spans_file, traced_app.flaky, trace_of(send), count=2)
    runs.sort(key=lambda span: span["attributes"]["kittiwake.task.attempt"])
    assert [run["attributes"]["kittiwake.task.attempt"] for run in runs] == [1, 2]
    assert [run["attributes"]["kittiwake.task.deliveries"] for run in runs] == [1, 2]
    assert [run["attributes"]["kittiwake.task.outcome"] for run in runs] == ["retry", "done"]
    assert [run["status"]["status_code"] for run in runs] == ["ERROR", "UNSET"]
    assert runs[0]["events"][0]["attributes"]["exception.type"] == "ConnectionError"
    assert {run["parent_id"] for run in runs} == {id_of(send)}


def test_a_timed_task_s_child_process_continues_the_trace(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    assert traced_app.timed.submit("sandboxed").result(timeout=RESULT_SECS) == "sandboxed"
    send = only(exporter.get_finished_spans(), f"{traced_app.timed.name} send")
    [run] = consumer_spans(spans_file, traced_app.timed, trace_of(send))
    [inner] = wait_for_span(spans_file, lambda span: span["name"] == "timed inside sandboxed")
    assert inner["parent_id"] == run["context"]["span_id"]
    assert inner["resource"]["attributes"]["service.instance.id"] != run["resource"]["attributes"]["service.instance.id"]


def test_tasks_a_run_submits_or_enqueues_on_success_continue_its_trace(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    traced_app.submits.submit("nested").result(timeout=RESULT_SECS)
    send = only(exporter.get_finished_spans(), f"{traced_app.submits.name} send")
    [run] = consumer_spans(spans_file, traced_app.submits, trace_of(send))
    [inner_send] = wait_for_span(spans_file, lambda span: span["name"] == f"{traced_app.quiet.name} send"
                                 and span["context"]["trace_id"] == trace_of(send))
    assert inner_send["kind"] == "SpanKind.PRODUCER" and inner_send["parent_id"] == run["context"]["span_id"]
    [inner_run] = consumer_spans(spans_file, traced_app.quiet, trace_of(send))
    assert inner_run["parent_id"] == inner_send["context"]["span_id"]

    exporter.clear()
    traced_app.continues.submit("traced.next", "after-continues").result(timeout=RESULT_SECS)
    send = only(exporter.get_finished_spans(), f"{traced_app.continues.name} send")
    [run] = consumer_spans(spans_file, traced_app.continues, trace_of(send))
    with Client(app.url) as client:
        headers = client.get("traced.next", "after-continues").headers or {}
    assert headers[TRACEPARENT_HEADER].split("-")[1:3] == [run["context"]["trace_id"][2:], run["context"]["span_id"][2:]]


def test_a_gang_member_s_run_descends_from_its_leader_s(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    assert traced_app.pair.submit().result(timeout=RESULT_SECS) == 0
    send = only(exporter.get_finished_spans(), f"{traced_app.pair.name} send")
    [leader] = consumer_spans(spans_file, traced_app.pair, trace_of(send))
    assert leader["parent_id"] == id_of(send)
    [member] = wait_for_span(spans_file, lambda span: span["kind"] == "SpanKind.CONSUMER"
                             and span["attributes"]["messaging.destination.name"] == f"{traced_app.QUEUE}.gang"
                             and span["context"]["trace_id"] == trace_of(send))
    assert member["parent_id"] == leader["context"]["span_id"]


def test_maps_jobs_and_batches_send_in_spans_their_runs_descend_from(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    handles = traced_app.echo.map(["m1", "m2", "m3"])
    assert app.results(handles, timeout=RESULT_SECS) == ["m1", "m2", "m3"]
    send = only(exporter.get_finished_spans(), f"{traced_app.echo.name} send")
    assert send.attributes["messaging.batch.message_count"] == 3
    runs = consumer_spans(spans_file, traced_app.echo, trace_of(send), count=3)
    assert {run["parent_id"] for run in runs} == {id_of(send)}

    exporter.clear()
    job = app.job("nightly")
    first = job.add(traced_app.echo, "j1")
    job.add(traced_app.echo, "j2", after=[first])
    assert job.submit().results(timeout=RESULT_SECS) == ["j1", "j2"]
    send = only(exporter.get_finished_spans(), "nightly send")
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes["messaging.batch.message_count"] == 2 and send.attributes["kittiwake.job.id"] == job.id
    runs = consumer_spans(spans_file, traced_app.echo, trace_of(send), count=2)
    assert {run["parent_id"] for run in runs} == {id_of(send)}

    exporter.clear()
    with app.batch():
        batched = [traced_app.echo.submit(f"b{n}") for n in range(2)]
    assert app.results(batched, timeout=RESULT_SECS) == ["b0", "b1"]
    sends = [span for span in exporter.get_finished_spans() if span.name == f"{traced_app.echo.name} send"]
    assert len(sends) == 2
    for send in sends:
        [run] = consumer_spans(spans_file, traced_app.echo, trace_of(send))
        assert run["parent_id"] == id_of(send)


def test_a_malformed_trace_context_is_ignored_and_the_task_runs(
    app: Any, exporter: InMemorySpanExporter, spans_file: Path
) -> None:
    malformed = ["00-not-a-trace-context", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "x" * 600]
    handles = []
    for number, traceparent in enumerate(malformed):
        task, handle = app.prepare(traced_app.echo, (number,), {})
        task["headers"][TRACEPARENT_HEADER] = traceparent
        task["headers"][TRACESTATE_HEADER] = "vendor=" + "y" * 1000
        app.enqueue_prepared([task], [handle])
        handles.append(handle)
    assert app.results(handles, timeout=RESULT_SECS) == [0, 1, 2]
    runs = wait_for_span(spans_file, lambda span: span["name"] == f"{traced_app.echo.name} process"
                         and span["attributes"]["messaging.message.id"] in {handle.pid for handle in handles}, count=3)
    assert [run["parent_id"] for run in runs] == [None, None, None]  # each a trace of its own


def test_without_a_tracer_provider_nothing_is_added_and_nothing_traced(
    app: Any, spans_file: Path
) -> None:
    set_global_provider(None)
    assert tracing.tracer() is None
    task, handle = app.prepare(traced_app.echo, ("untraced",), {})
    assert TRACEPARENT_HEADER not in task["headers"] and TRACESTATE_HEADER not in task["headers"]
    assert tracing.start_send("anything") is None and tracing.context_headers() == {}
    handle = traced_app.echo.submit("untraced")
    assert handle.result(timeout=RESULT_SECS) == "untraced"
    [run] = wait_for_span(spans_file, lambda span: span["attributes"].get("messaging.message.id") == handle.pid)
    assert run["parent_id"] is None  # the worker traces (it has a provider), with nothing to connect to


def test_without_opentelemetry_submitting_works_and_adds_no_headers(tmp_path: Path) -> None:
    program = """
import sys
sys.modules["opentelemetry"] = None  # as if the optional dependency were not installed
from kittiwake.app import App, tracing
app = App()
@app.task(queue="anywhere", ignore_result=True)
def f(x): return x
task, handle = app.prepare(f, (1,), {})
assert set(task["headers"]) == {"kittiwake-task-id", "kittiwake-submitted-at"}, task["headers"]
assert tracing.tracer() is None and tracing.start_send("f") is None and tracing.context_headers() == {}
with tracing.attached({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
    pass
tracing.failed("ValueError", "boom")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          cwd=str(TESTS_DIR))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# ------------------------------------------------------------------ in process


def remote_parent(trace_state: TraceState | None = None) -> Any:
    context = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1), trace_state=trace_state)
    return trace.set_span_in_context(NonRecordingSpan(context))


def test_the_context_is_injected_within_the_broker_s_limits(exporter: InMemorySpanExporter) -> None:
    from opentelemetry import context

    token = context.attach(remote_parent(TraceState([("vendor", "v1")])))
    try:
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {TRACEPARENT_HEADER: f"00-{0x1234:032x}-{0x5678:016x}-01", TRACESTATE_HEADER: "vendor=v1"}
        given = {TRACEPARENT_HEADER: "00-mine"}
        tracing.inject(given)
        assert given == {TRACEPARENT_HEADER: "00-mine"}  # the caller's own context wins
        almost_full = {f"h{n}": "x" for n in range(Limits().max_headers - 1)}
        tracing.inject(almost_full)
        assert TRACEPARENT_HEADER in almost_full and TRACESTATE_HEADER not in almost_full
        full = {f"h{n}": "x" for n in range(Limits().max_headers)}
        tracing.inject(full)
        assert TRACEPARENT_HEADER not in full
    finally:
        context.detach(token)
    long_state = TraceState([(f"k{n}", "v" * 200) for n in range(4)])
    assert len(long_state.to_header()) > MAX_TRACESTATE_BYTES
    token = context.attach(remote_parent(long_state))
    try:
        assert set(tracing.context_headers()) == {TRACEPARENT_HEADER}  # an oversize state is not sent
    finally:
        context.detach(token)
    assert tracing.context_headers() == {}  # no span current: nothing to send
