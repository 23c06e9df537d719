"""What a worker process holds and runs, told to its supervisor as it changes, so that its death loses no time.

A worker process that dies (a task calling ``os.abort()``, a segfault in
native code, the kernel's OOM killer) cannot hand its tasks back; left alone
they come back only when their leases run out, a lease length later, and the
submitter learns nothing until then. Its supervisor sees the death at once
(`supervisor`), but not which tasks the process held: this ledger tells it.

The supervisor starts each worker process with two descriptors (their
numbers in `LEDGER_FDS_VARIABLE`, ``<pipe>,<slots>``):

* the write end of a pipe, on which the process writes one JSON line per
  lease and per batch of tasks settled (`LedgerWriter.held`, `dropped`) —
  ``["hold", [[queue, pid, lease id, deliveries, lease secs], ...]]`` and
  ``["drop", [[queue, pid], ...]]`` — read by the supervisor's `Ledger` in a
  thread of its own;
* a small shared memory (`SlotTable`): one 8-byte cell per slot, the lease id
  of the task the slot runs, 0 when idle. Written before a run begins and
  after it ends — a store, no system call, so a null task pays nothing for
  it — and read by the supervisor only once the process is dead.

When the process has died, what the ledger still holds is what it held, and
the cells say which of those were running (`lost.hand_back` gives them back:
the running ones with an attempt counted, the others without). A line is
written whole or not at all before a death, and a torn last line is
ignored: a task whose ``hold`` never arrived is simply not handed back (its
lease runs out, as before). The lease id is the fencing token, so handing
back an entry that was in fact already settled is refused by the broker and
harmless.

Writes block while the pipe is full, so the supervisor reads each pipe
continuously (and asks for a larger pipe); a supervisor that is gone makes
every write fail, and the writer then stops writing (its process is stopping
anyway: see `__main__`).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

log = logging.getLogger("kittiwake.worker.ledger")

LEDGER_FDS_VARIABLE = "KITTIWAKE_LEDGER_FDS"
PIPE_BYTES = 1 << 20  # asked for (Linux F_SETPIPE_SZ), so a burst of leases does not wait for the reader
F_SETPIPE_SZ = 1031
READ_BYTES = 1 << 16
CELL = struct.Struct("<q")  # a slot's cell: the lease id it runs, 0 when idle


class HeldTask(msgspec.Struct, array_like=True, frozen=True):
    """A task the process holds: what handing it back needs."""

    queue: str
    pid: str
    lease_id: int
    deliveries: int
    lease_secs: float


class Hold(msgspec.Struct, tag="hold", array_like=True, frozen=True):
    tasks: list[HeldTask]


class Drop(msgspec.Struct, tag="drop", array_like=True, frozen=True):
    keys: list[tuple[str, str]]


Change = Hold | Drop

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Change)


class SlotTable:
    """The shared cells of one worker process's slots (see the module docstring)."""

    def __init__(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        self.slots = size // CELL.size
        self._map = mmap.mmap(fd, size)

    @staticmethod
    def create(slots: int) -> int:
        """A new table of `slots` idle cells; returns its descriptor (an anonymous file)."""
        try:
            fd = os.memfd_create("kittiwake-slots", 0)
        except (AttributeError, OSError):  # not Linux: an unlinked temporary file
            with tempfile.TemporaryFile() as file:
                fd = os.dup(file.fileno())
        os.ftruncate(fd, max(1, slots) * CELL.size)
        return fd

    def note(self, slot: int, lease_id: int) -> None:
        if slot < self.slots:
            CELL.pack_into(self._map, slot * CELL.size, lease_id)

    def running(self) -> set[int]:
        """The lease ids the slots run now."""
        ids = {CELL.unpack_from(self._map, slot * CELL.size)[0] for slot in range(self.slots)}
        ids.discard(0)
        return ids

    def close(self) -> None:
        self._map.close()


def open_pipe() -> tuple[int, int]:
    """A new ledger pipe: (read end, write end), as large as the system allows up to `PIPE_BYTES`."""
    read_fd, write_fd = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(write_fd, F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, OSError):
        pass  # not Linux, or over the system's limit: the default size, and a reader that keeps up
    return read_fd, write_fd


# ----------------------------------------------------------------- the worker process's side


class LedgerWriter:
    """Tells the supervisor what this process holds (the pipe) and runs (the slot table); thread-safe."""

    def __init__(self, pipe_fd: int, slots: SlotTable) -> None:
        self._fd = pipe_fd
        self.slots = slots
        self._lock = threading.Lock()
        self._broken = False

    @classmethod
    def from_environment(cls) -> LedgerWriter | None:
        """The writer of what the supervisor passed (None when started without it); the variable
        is removed and the descriptors kept from child processes."""
        value = os.environ.pop(LEDGER_FDS_VARIABLE, None)
        if not value:
            return None
        try:
            pipe_fd, slots_fd = (int(part) for part in value.split(","))
            for fd in (pipe_fd, slots_fd):
                os.set_inheritable(fd, False)
            slots = SlotTable(slots_fd)
        except (ValueError, OSError):
            log.warning("%s=%r names no ledger: the supervisor will not know what this process holds",
                        LEDGER_FDS_VARIABLE, value)
            return None
        return cls(pipe_fd, slots)

    def held(self, tasks: Iterable[HeldTask]) -> None:
        tasks = list(tasks)
        if tasks:
            self._write(Hold(tasks))

    def dropped(self, keys: Iterable[tuple[str, str]]) -> None:
        keys = list(keys)
        if keys:
            self._write(Drop(keys))

    def running(self, slot: int, lease_id: int) -> None:
        """Slot `slot` starts running the task under `lease_id` (before the run: a run that kills the
        process is always known as running)."""
        self.slots.note(slot, lease_id)

    def idle(self, slot: int) -> None:
        self.slots.note(slot, 0)

    def close(self) -> None:
        with self._lock:
            if not self._broken:
                self._broken = True
                os.close(self._fd)

    def _write(self, change: Change) -> None:
        line = _encoder.encode(change) + b"\n"
        with self._lock:
            if self._broken:
                return
            view = memoryview(line)
            try:
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError:  # the supervisor is gone (EPIPE): nobody to tell any more
                self._broken = True


# ----------------------------------------------------------------- the supervisor's side


@dataclass(slots=True)
class Entry:
    """A task a worker process held when it died, as its ledger tells it."""

    task: HeldTask
    running: bool = False

    @property
    def name(self) -> str:
        return f"{self.task.queue}/{self.task.pid}"


class Ledger:
    """What one worker process holds: its pipe, read by a thread until the process closes it, and
    its slot table."""

    def __init__(self, read_fd: int, slots: SlotTable) -> None:
        self._fd = read_fd
        self.slots = slots
        self._held: dict[tuple[str, str], HeldTask] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="kittiwake-ledger", daemon=True)

    @classmethod
    def for_child(cls, slots: int) -> tuple[Ledger, tuple[int, int]]:
        """A ledger for a new worker process of `slots` slots, and the (pipe, slots) descriptors to
        pass to it (close them here once it started)."""
        read_fd, write_fd = open_pipe()
        slots_fd = SlotTable.create(slots)
        return cls(read_fd, SlotTable(slots_fd)), (write_fd, slots_fd)

    def start(self) -> None:
        self._thread.start()

    def close_unstarted(self) -> None:
        """Release a ledger whose process never started (`start` was not called)."""
        os.close(self._fd)
        self.slots.close()

    def apply(self, change: Change) -> None:
        with self._lock:
            if isinstance(change, Hold):
                for task in change.tasks:
                    self._held[(task.queue, task.pid)] = task
            else:
                for key in change.keys:
                    self._held.pop(key, None)

    def feed(self, line: bytes) -> None:
        """Apply one line (a torn or unreadable one is ignored)."""
        try:
            change = _decoder.decode(line)
        except msgspec.DecodeError:
            log.debug("ignoring a ledger line that does not parse: %r", line[:200])
            return
        self.apply(change)

    def held(self) -> list[Entry]:
        """The tasks held now, each marked running if a slot runs it."""
        running = self.slots.running()
        with self._lock:
            return [Entry(task, task.lease_id in running) for task in self._held.values()]

    def finish(self, wait_secs: float) -> list[Entry]:
        """What the process held at its end: waits up to `wait_secs` for the rest of the pipe (a
        grandchild that inherited the write end would keep it open; then what arrived is used)."""
        self._closed.wait(wait_secs)
        entries = self.held()
        self.slots.close()
        return entries

    def _follow(self) -> None:
        pending = b""
        try:
            while True:
                try:
                    data = os.read(self._fd, READ_BYTES)
                except OSError:
                    break
                if not data:
                    break  # every write end closed: the process is gone (a torn last line is dropped)
                lines = (pending + data).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line:
                        self.feed(line)
        finally:
            os.close(self._fd)
            self._closed.set()
