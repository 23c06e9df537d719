"""A producer process for the kill test: enqueues `v0, v1, …` through a batching producer and,
from a second thread, appends each value to the acknowledgement file as soon as its `sent()`
returned — so the file never names a value before the broker said it is durable. Before each
hundred values it appends to the intent file how many values it may have enqueued by then, so the
test knows every value it could have tried.

Usage: python producer_child.py URL QUEUE ACK_FILE INTENT_FILE COUNT
"""

from __future__ import annotations

import os
import queue
import sys
import threading

from kittiwake import Client


INTENT_STEP = 100


def main(url: str, queue_name: str, ack_path: str, intent_path: str, count: int) -> None:
    handed: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
    ack_file = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    intent_file = os.open(intent_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def acknowledge() -> None:
        while True:
            value, handle = handed.get()
            handle.sent()  # type: ignore[attr-defined]
            os.write(ack_file, f"{value}\n".encode())  # in the kernel at once: SIGKILL cannot lose it

    threading.Thread(target=acknowledge, daemon=True).start()
    with Client(url) as client:
        producer = client.producer(max_batch_tasks=200, max_buffer_tasks=2000)
        for i in range(count):
            if i % INTENT_STEP == 0:
                os.write(intent_file, f"{i + INTENT_STEP}\n".encode())
            value = f"v{i}"
            handed.put((value, producer.enqueue(queue_name, value)))
        producer.flush()
        threading.Event().wait()  # the test kills this process; it never exits by itself


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
