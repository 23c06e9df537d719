"""The settler against a real broker: a batch of finished tasks whose update's outcome was unknown.

The connection cut is injected on the client side (the first update raises CONNECTION_LOST without
being sent, as when a broker restarts before reading it); the broker, the leases and the refusals are
real."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.constants import REPLY_TO_HEADER, SUBMISSION_HEADER, TASK_ID_HEADER
from kittiwake.worker.heartbeat import Held
from kittiwake.worker.outcomes import Kind, Outcome, Settler
from support.broker_process import BrokerProcess


class CutOnce(Client):
    """A client whose first update is lost before it reaches the broker (outcome unknown to it)."""

    cut = False

    def update(self, *args: Any, **kwargs: Any) -> Any:
        if not self.cut:
            self.cut = True
            raise errors.ConnectionLost("the connection was cut before the broker read the update")
        return super().update(*args, **kwargs)


def test_a_lost_lease_in_a_batch_after_an_unknown_outcome_does_not_count_the_others_done(tmp_path: Path) -> None:
    # a refusal after an unknown outcome was taken as "the first try was applied": for a batch, one
    # task's lost lease made every other task count done, its result never posted, its lease left
    # to run out and the task to run again
    with BrokerProcess(tmp_path / "data") as broker, CutOnce(broker.url) as client:
        for name in ("a", "b"):
            client.enqueue("q", b"x", pid=name, headers={REPLY_TO_HEADER: "_replies.app1",
                                                         SUBMISSION_HEADER: f"s-{name}", TASK_ID_HEADER: name})
        [a] = client.lease("q", max_tasks=1, lease_secs=30)
        [b] = client.lease("q", max_tasks=1, lease_secs=0.5)
        time.sleep(1.0)
        assert [task.pid for task in client.lease("q", max_tasks=1, lease_secs=30)] == ["b"]  # another worker's now
        settler = Settler(client)
        now = time.monotonic()
        settler.settle([Outcome(Held(task, 30, now), Kind.DONE, payload=b"m\x92\xc3\x01") for task in (a, b)])
        assert (settler.done, settler.dropped) == (1, 1)
        assert [reply.pid for reply in client.peek("_replies.app1")] == ["s-a"]
        try:
            client.get("q", "a")
            raise AssertionError("task a was not finished")
        except errors.TaskNotFound:
            pass
