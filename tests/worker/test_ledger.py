"""The ledger between a worker process and its supervisor: what the supervisor knows a process holds
and runs, over a real pipe and a real shared slot table (pure: no broker)."""

from __future__ import annotations

import os
import threading

import pytest

from kittiwake.worker.ledger import LEDGER_FDS_VARIABLE, HeldTask, Ledger, LedgerWriter, SlotTable


def task(number: int, queue: str = "q") -> HeldTask:
    return HeldTask(queue, f"t{number}", lease_id=1000 + number, deliveries=1, lease_secs=30.0)


def connected(slots: int = 2) -> tuple[LedgerWriter, Ledger]:
    """A writer as the worker process builds it from what a supervisor's ledger passes."""
    ledger, (pipe_fd, slots_fd) = Ledger.for_child(slots)
    ledger.start()
    writer = LedgerWriter(pipe_fd, SlotTable(slots_fd))
    os.close(slots_fd)  # the mapping stays, as in the child once the supervisor closed its copy
    return writer, ledger


def test_the_ledger_holds_what_was_leased_and_not_dropped_and_knows_what_runs() -> None:
    writer, ledger = connected()
    writer.held([task(1), task(2), task(3)])
    writer.running(0, task(1).lease_id)
    writer.running(1, task(2).lease_id)
    writer.idle(1)  # its run ended; its outcome is not settled yet: held, not running
    writer.dropped([("q", "t3")])
    writer.running(5, 99)  # no such slot: ignored
    writer.close()  # the process is gone
    entries = {entry.task.pid: entry for entry in ledger.finish(5.0)}
    assert sorted(entries) == ["t1", "t2"]
    assert entries["t1"].running and not entries["t2"].running
    assert entries["t1"].task == task(1) and entries["t1"].name == "q/t1"


def test_a_torn_last_line_and_garbage_are_ignored() -> None:
    writer, ledger = connected()
    writer.held([task(1)])
    pipe_fd = writer._fd
    os.write(pipe_fd, b'not json\n["hold", 3]\n["drop", [["q", "t1')  # the last line torn by a death
    writer.close()
    assert [entry.task.pid for entry in ledger.finish(5.0)] == ["t1"]


def test_a_burst_larger_than_the_pipe_does_not_block_the_writer() -> None:
    writer, ledger = connected()
    tasks = [task(n) for n in range(20_000)]  # over a megabyte in one line
    done = threading.Event()

    def write() -> None:
        writer.held(tasks)
        writer.dropped((t.queue, t.pid) for t in tasks[:10_000])
        writer.close()
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(30)
    assert len(ledger.finish(30.0)) == 10_000


def test_a_writer_whose_supervisor_is_gone_stops_writing() -> None:
    ledger, (pipe_fd, slots_fd) = Ledger.for_child(1)
    ledger.close_unstarted()  # the reading end is gone
    writer = LedgerWriter(pipe_fd, SlotTable(slots_fd))
    writer.held([task(1)])  # EPIPE: no error, nothing more written
    writer.dropped([("q", "t1")])
    writer.close()


def test_without_the_variable_there_is_no_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEDGER_FDS_VARIABLE, raising=False)
    assert LedgerWriter.from_environment() is None
    monkeypatch.setenv(LEDGER_FDS_VARIABLE, "not numbers")
    assert LedgerWriter.from_environment() is None
