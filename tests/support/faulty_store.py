"""A store that fails on demand: a real store, with a failing disk's errors injected at each stage of a commit.

`FaultyStore` wraps a store (`SqliteStore`, or the memory store in the
simulation) and passes every call through, except that a test can `arm` a
fault at one `Stage`. The armed call then raises exactly what the SQLite store
raises when the disk fails under it (`Failure`): the `errors.StorageFailure`
that `store.faults.storage_failure` makes of SQLite's own error — an
`sqlite3.OperationalError` "database or disk is full" (ENOSPC), "disk I/O
error" (EIO) or "attempt to write a readonly database" (EROFS), with SQLite's
result code set as the real driver sets it — the error as its cause, and a
commit's outcome unknown when SQLite's store would say so.

The stages, in the order a pass meets them:

* `WRITE`: the engine hands mutations to the store (the real store only
  buffers them, so this stands for a driver that writes through);
* `READ`: a read inside an engine call (a dedupe or lease look-up beyond the
  head, a refill), which also flushes the buffered writes into the open
  transaction;
* `COMMIT`: `commit()` fails before anything is durable (the WAL write or
  its fsync failed; SQLite kept the transaction out of the database). The
  writes are left in the open transaction, as SQLite leaves them, for the
  broker to roll back;
* `AFTER_COMMIT`: the commit reached the disk, then `commit()` raised (an
  fsync that failed after the data was written, and which a restart finds).
  The broker cannot tell this from `COMMIT`, so its outcome is unknown;
* `ROLLBACK`: the rollback after a failure fails, leaving the failed pass's
  writes in the open transaction;
* `RECOVER`: rebuilding the engine fails (the store cannot be read).

A fault fires `times` times (None: until `clear()`), each on the next call of
its stage, and may arm another one as it fires (`then`: a rollback or a
recovery that fails after the commit that failed); `COMMIT` and `AFTER_COMMIT` only on a commit with writes to make
durable, since SQLite commits a transaction that wrote nothing without
touching the disk. The wrapper is shared by the test thread and the broker's loop
thread; a lock keeps its counters whole. `held_off()` lets a checker read the
store without setting off what is armed.
"""

from __future__ import annotations

import contextlib
import enum
import sqlite3
import threading
from collections import Counter
from typing import Any, Iterator, Sequence

from kittiwake import errors
from kittiwake.engine.mutations import Mutation
from kittiwake.engine.storage import Recovery, TaskStore
from kittiwake.model import Task
from kittiwake.store.faults import storage_failure


class Stage(enum.Enum):
    WRITE = "write"
    READ = "read"
    COMMIT = "commit"
    AFTER_COMMIT = "after_commit"
    ROLLBACK = "rollback"
    RECOVER = "recover"


class Failure(enum.Enum):
    """What the disk did; the value is SQLite's message and result code for it."""

    DISK_FULL = ("database or disk is full", sqlite3.SQLITE_FULL, "SQLITE_FULL")
    IO_ERROR = ("disk I/O error", sqlite3.SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC")
    READ_ONLY = ("attempt to write a readonly database", sqlite3.SQLITE_READONLY, "SQLITE_READONLY")

    def error(self) -> sqlite3.OperationalError:
        message, code, name = self.value
        error = sqlite3.OperationalError(message)
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
        error.sqlite_errorname = name  # type: ignore[attr-defined]
        return error


class FaultyStore:
    """A store whose calls fail when armed; see the module docstring."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._armed: dict[Stage, tuple[Failure, int | None, tuple[Stage, int] | None]] = {}
        self.injected: Counter[Stage] = Counter()
        self.calls: Counter[Stage] = Counter()
        self._dirty = False  # written since the last commit or rollback

    # ------------------------------------------------------------ control

    def arm(
        self,
        stage: Stage,
        failure: Failure = Failure.IO_ERROR,
        times: int | None = 1,
        then: tuple[Stage, int] | None = None,
    ) -> None:
        """Fail the next `times` calls of `stage` (None: every call until `clear`); when it
        fires, fail the next `then[1]` calls of stage `then[0]` with an I/O error too."""
        if stage is Stage.AFTER_COMMIT and failure is not Failure.IO_ERROR:
            raise ValueError("only an I/O error (a failed fsync) can follow a write that reached the disk")
        with self._lock:
            self._armed[stage] = (failure, times, then)

    def clear(self, stage: Stage | None = None) -> None:
        with self._lock:
            if stage is None:
                self._armed.clear()
            else:
                self._armed.pop(stage, None)

    def armed(self, stage: Stage) -> bool:
        with self._lock:
            return stage in self._armed

    @property
    def uncommitted(self) -> bool:
        """Written to since the last commit or rollback."""
        return self._dirty

    @contextlib.contextmanager
    def held_off(self) -> Iterator[None]:
        """Nothing armed fires inside (a checker reading the store); it stays armed after."""
        with self._lock:
            armed, self._armed = self._armed, {}
        try:
            yield
        finally:
            with self._lock:
                self._armed = {**armed, **self._armed}

    def _fault(self, stage: Stage) -> errors.StorageFailure | None:
        """The error to raise at this call of `stage`, if one is armed."""
        with self._lock:
            self.calls[stage] += 1
            armed = self._armed.get(stage)
            if armed is None:
                return None
            failure, times, then = armed
            if times is not None:
                if times <= 1:
                    del self._armed[stage]
                else:
                    self._armed[stage] = (failure, times - 1, then)
            if then is not None:
                self._armed[then[0]] = (Failure.IO_ERROR, then[1], None)
            self.injected[stage] += 1
            error = failure.error()
            failed = storage_failure(error, committing=stage in (Stage.COMMIT, Stage.AFTER_COMMIT))
            failed.__cause__ = error
            return failed

    def _check(self, stage: Stage) -> None:
        failed = self._fault(stage)
        if failed is not None:
            raise failed

    def _check_commit(self, stage: Stage) -> None:
        if self._dirty:
            self._check(stage)

    # -------------------------------------------------------------- store

    def write(self, mutations: Sequence[Mutation]) -> None:
        self._check(Stage.WRITE)
        self._dirty = True
        self.inner.write(mutations)

    def commit(self) -> None:
        self._check_commit(Stage.COMMIT)
        self.inner.commit()
        dirty, self._dirty = self._dirty, False
        if dirty:
            self._check(Stage.AFTER_COMMIT)

    def rollback(self) -> None:
        self._check(Stage.ROLLBACK)
        self.inner.rollback()
        self._dirty = False

    def load_available(self, queue: str, after_pid: str, limit: int, now: float) -> list[Task]:
        self._check(Stage.READ)
        return self.inner.load_available(queue, after_pid, limit, now)

    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]:
        self._check(Stage.READ)
        return self.inner.children_of(queue, pid)

    def parents_in(self, queue: str) -> list[str]:
        self._check(Stage.READ)
        return self.inner.parents_in(queue)

    def load_task(self, queue: str, pid: str) -> Task | None:
        self._check(Stage.READ)
        return self.inner.load_task(queue, pid)

    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]:
        self._check(Stage.READ)
        return self.inner.scan(queue, from_pid, limit)

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None = None
    ) -> list[Task]:
        self._check(Stage.READ)
        return self.inner.find_by_sender(sender, queue, limit, after)

    def queues_for_receiver(self, receiver: str) -> list[str]:
        self._check(Stage.READ)
        return self.inner.queues_for_receiver(receiver)

    def recover(self, now: float) -> Recovery:
        self._check(Stage.RECOVER)
        return self.inner.recover(now)

    def reap(self, limit: int = 1000) -> int:
        self._check(Stage.READ)
        reaped = self.inner.reap(limit)
        self._dirty = self._dirty or reaped > 0
        return reaped

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # anything the store grows later passes through unfaulted
        return getattr(self.inner, name)
