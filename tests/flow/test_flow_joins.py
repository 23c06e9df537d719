"""A flow step's three-input join in the broker: tokens arriving in every order, and at once from
three threads, start exactly one job per key holding all three tokens — through the flow's own
declaration and token format."""

from __future__ import annotations

import itertools
import threading

from kittiwake import Client
from kittiwake.flow import Dataset, Flow
from kittiwake.flow.names import key_of
from kittiwake.flow.runs import declare_joins
from kittiwake.flow.tokens import decode_job, encode_token

triple = Flow("triple")


@triple.step(inputs={"a": triple.input("a"), "b": triple.input("b"), "c": triple.input("c")})
def combine(ctx, a, b, c):
    return [a.value, b.value, c.value]


STEP = triple.steps["combine"]
PORTS = ("a", "b", "c")


def token(port: str, run: str, index: int) -> dict:
    return {"queue": STEP.port_queue(port), "pid": key_of(run, [index]),
            "data": encode_token(Dataset.inline(f"{port}{index}"), [[index, False]], f"input.{port}")}


def jobs_of(client: Client) -> dict[str, dict[str, list[str]]]:
    jobs = {}
    for view in client.peek(STEP.job_queue, 10_000):
        job = decode_job(view.data)
        jobs[view.pid] = {port: [t.dataset.value for t in tokens] for port, tokens in job.tokens.items()}
    return jobs


def test_every_arrival_order_starts_one_job_with_every_token(client: Client) -> None:
    assert declare_joins(triple, client) == {STEP.join: "created"}
    assert declare_joins(triple, client) == {STEP.join: "unchanged"}
    orders = list(itertools.permutations(PORTS))
    for index, order in enumerate(orders):
        for position, port in enumerate(order):
            client.enqueue_many([token(port, "order", index)])
            started = jobs_of(client)
            assert (key_of("order", [index]) in started) == (position == 2), (order, position)
    jobs = jobs_of(client)
    assert len(jobs) == len(orders)
    for index in range(len(orders)):
        assert jobs[key_of("order", [index])] == {port: [f"{port}{index}"] for port in PORTS}
    assert sum(info.tokens_waiting for info in client.list_joins(f"^{triple.names.group}#")) == 0


def test_tokens_arriving_at_once_from_three_threads_start_each_job_once(client: Client, broker) -> None:
    declare_joins(triple, client)
    keys = 300
    barrier = threading.Barrier(len(PORTS))
    failures: list[BaseException] = []

    def send(port: str) -> None:
        try:
            with Client(broker.url) as own:
                barrier.wait()
                for start in range(0, keys, 3):  # small batches, so the threads' arrivals interleave
                    own.enqueue_many([token(port, "race", index) for index in range(start, start + 3)])
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    threads = [threading.Thread(target=send, args=(port,)) for port in PORTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    jobs = jobs_of(client)
    assert sorted(jobs) == sorted(key_of("race", [index]) for index in range(keys))
    assert all(job == {port: [f"{port}{key}"] for port in PORTS}
               for key, job in ((int(pid.rsplit("/", 1)[1]), job) for pid, job in jobs.items()))
    assert sum(info.tokens_waiting for info in client.list_joins(f"^{triple.names.group}#")) == 0
