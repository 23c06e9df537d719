"""The random requests of the group-commit pass simulation (`tests/broker/test_pass_simulation.py`).

`PassRequests` makes what the simulation's clients send, as an op and its wire fields, from the
simulation's one random stream: enqueues of tasks with a pid of their own (so the checker can look
each one up), leases with and without a wait, dequeue, renew and release of leases handed out
before (the simulation adds them to `granted`), updates within one consistency group, cancel_wait
of a parked long-poll or of nothing, reads, now and then a request that hits the bug the
simulation plants on the `POISON` queue, and a frame that does not decode (`DECODE_ERROR`).
"""

from __future__ import annotations

import random
from typing import Any, Callable

QUEUES = ["mail", "mail.bulk", "crawl#fetch"]
POISON = "poison"  # a queue whose requests hit a bug planted in the engine
RECEIVERS = ["ada", "bob"]
MAX_TASKS = 4  # the largest lease asked for
DECODE_ERROR = "decode error"

Made = tuple[str, dict[str, Any]] | None


class PassRequests:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_pid = 0
        self.granted: list[tuple[str, str, int]] = []  # (queue, pid, lease_id) of leases handed out

    def make(self, waits: list[int], last_id: int) -> Made:
        """One request of a client whose unanswered long-polls are `waits`; None: nothing to send."""
        makers: list[tuple[float, Callable[[], Made]]] = [
            (20, self.enqueue), (14, self.lease), (8, self.long_poll), (10, self.dequeue), (4, self.renew),
            (4, self.release), (6, self.update), (4, lambda: self.cancel_wait(waits, last_id)), (3, self.read),
            (1, self.poison), (0.5, lambda: (DECODE_ERROR, {})),
        ]
        maker = self.rng.choices([make for _, make in makers], [weight for weight, _ in makers])[0]
        return maker()

    def new_task(self, queue: str) -> dict[str, Any]:
        rng = self.rng
        self.next_pid += 1
        task: dict[str, Any] = {"queue": queue, "data": rng.randbytes(rng.randint(0, 40)), "pid": f"p{self.next_pid:06}"}
        if rng.random() < 0.1:
            task["receiver"] = rng.choice(RECEIVERS)
        if rng.random() < 0.2:
            task["max_attempts"] = rng.randint(1, 2)
        return task

    def enqueue(self) -> tuple[str, dict[str, Any]]:
        queue = self.rng.choice(QUEUES)
        return "enqueue", {"tasks": [self.new_task(queue) for _ in range(self.rng.randint(1, 3))]}

    def lease_fields(self) -> dict[str, Any]:
        rng = self.rng
        fields: dict[str, Any] = {
            "queues": rng.sample(QUEUES + ["mail.dead"], rng.randint(1, 2)),
            "max_tasks": rng.randint(1, MAX_TASKS),
            "lease_secs": rng.choice([0.5, 5.0, 30.0]),
        }
        if rng.random() < 0.15:
            fields["receiver"] = rng.choice(RECEIVERS)
        return fields

    def lease(self) -> tuple[str, dict[str, Any]]:
        return "lease", self.lease_fields()

    def long_poll(self) -> tuple[str, dict[str, Any]]:
        return "lease", {**self.lease_fields(), "wait_secs": self.rng.choice([0.2, 1.0, 10.0])}

    def refs(self, most: int) -> list[dict[str, Any]]:
        if not self.granted:
            return []
        recent = self.granted[-10:]
        picked = {self.rng.choice(recent) for _ in range(self.rng.randint(1, most))}
        return [{"queue": queue, "pid": pid, "lease_id": lease_id} for queue, pid, lease_id in picked]

    def dequeue(self) -> tuple[str, dict[str, Any]] | None:
        refs = self.refs(3)
        return ("dequeue", {"leases": refs}) if refs else None

    def renew(self) -> tuple[str, dict[str, Any]] | None:
        refs = self.refs(2)
        return ("renew", {"leases": refs, "lease_secs": self.rng.choice([1.0, 30.0])}) if refs else None

    def release(self) -> tuple[str, dict[str, Any]] | None:
        refs = self.refs(2)
        return ("release", {"leases": refs, "reason": "the simulation gives up"}) if refs else None

    def update(self) -> tuple[str, dict[str, Any]] | None:
        refs = [ref for ref in self.refs(2) if "#" not in ref["queue"]]  # one consistency group
        enqueue = [self.new_task(self.rng.choice(["mail", "mail.bulk"])) for _ in range(self.rng.randint(0, 2))]
        if not (refs or enqueue):
            return None
        return "update", {"dequeue": refs, "enqueue": enqueue}

    def cancel_wait(self, waits: list[int], last_id: int) -> tuple[str, dict[str, Any]]:
        target = self.rng.choice(waits) if waits and self.rng.random() < 0.8 else self.rng.randint(1, max(1, last_id))
        return "cancel_wait", {"request_id": target}

    def read(self) -> tuple[str, dict[str, Any]]:
        if self.rng.random() < 0.5:
            return "ping", {}
        return "peek", {"queue": self.rng.choice(QUEUES), "n": 5}

    def poison(self) -> tuple[str, dict[str, Any]]:
        if self.rng.random() < 0.5:
            return "peek", {"queue": POISON}
        return "enqueue", {"tasks": [self.new_task("mail"), self.new_task(POISON)]}
