"""A producer process SIGKILLed before its flush: every task whose `sent()` returned is in the
queue, and nothing is there that the process did not enqueue (the queue checker's lost = 0 and
unexpected = 0). The tasks it held unanswered may or may not be there: their outcome is unknown.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from kittiwake import Client
from support.broker_process import BrokerProcess
from support.checker import ENQUEUE, History, check

COUNT = 1_000_000  # far more than it gets through before the kill
ACKED_BEFORE_KILL = 5_000
WAIT_SECS = 60.0
CHILD = Path(__file__).with_name("producer_child.py")


def acknowledged(path: Path) -> list[str]:
    if not path.exists():
        return []
    text = path.read_text()
    return text[: text.rfind("\n") + 1].split()  # a line cut by the kill names no value


def test_every_acknowledged_task_survives_the_producer_being_killed(broker: BrokerProcess, tmp_path: Path) -> None:
    ack_path, intent_path = tmp_path / "acked.txt", tmp_path / "intent.txt"
    command = [sys.executable, str(CHILD), broker.url, "killed", str(ack_path), str(intent_path), str(COUNT)]
    child = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + WAIT_SECS
        while len(acknowledged(ack_path)) < ACKED_BEFORE_KILL:
            assert child.poll() is None, "the producer process exited by itself"
            assert time.monotonic() < deadline, "the producer acknowledged too little in time"
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    acked = acknowledged(ack_path)
    with Client(broker.url) as client:
        present: list[str] = []
        from_pid = None
        while page := [task for task in client.peek("killed", 1000, from_pid) if task.pid != from_pid]:
            present.extend(task.data.decode() for task in page)
            from_pid = page[-1].pid
    # the history: every value the process said it might enqueue was attempted; those whose sent()
    # returned are ok, the rest unknown (the process died holding them, or before enqueueing them)
    history = History()
    acked_set = set(acked)
    intended = max(int(line) for line in acknowledged(intent_path))
    for i in range(intended):
        op = history.invoke("producer", ENQUEUE, [f"v{i}"])
        if f"v{i}" in acked_set:
            history.ok(op)
        else:
            history.unknown(op, "killed before sent() returned")
    result = check(history, present)
    print(result.format())
    assert result.valid, result.format()
    assert len(acked) >= ACKED_BEFORE_KILL and not result.duplicated
    assert all(value.startswith("v") for value in present)
