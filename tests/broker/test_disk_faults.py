"""A real broker on real failing file systems: a full disk, a disk that fails with EIO, a read-only data directory.

Each test mounts a small file system of its own (`support.scratch_mounts`;
root only: skipped elsewhere with the reason, but required under CI=true)
and runs a broker subprocess with its data directory there. The broker's log
stays outside, through a symlinked data directory, so a full or dead disk
does not take the evidence with it.

* Full disk (tmpfs): clients load the broker, a filler file takes every free
  byte, the load goes on. Clients must get UNAVAILABLE, the broker must stay
  up, answer reads and log a few lines, not one per request; when the filler
  is deleted the broker serves again by itself. Then it is SIGKILLed and
  restarted, everything is drained, and the queue checker must find nothing
  acknowledged lost and nothing refused as "not applied" present.
* I/O error (ext4 on a loop device, shut down with EXT4_IOC_SHUTDOWN): every
  read, write and fsync fails with EIO from one moment on, as when a disk
  dies. Clients must get UNAVAILABLE, the broker must stay up and stop
  cleanly; after the file system is mounted again, a new broker must hold
  everything acknowledged before.
* Read-only data directory: the broker refuses to start, saying so, and
  starts once it is writable again, with its data.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from kittiwake import errors
from kittiwake.client import Client
from support.broker_process import BrokerDidNotStart, BrokerProcess
from support.queue_load import QueueLoad, drain, hung_or_cut, wait_until_serving
from support.scratch_mounts import ext4, fill, mount_ext4, remount, shut_down, tmpfs, unmount

DISK_BYTES = 64 * 1024 * 1024  # room for SQLite's WAL (checkpointed at 16 MiB) and the load
HEALTHY_SECS = 0.7
FAULT_SECS = 1.5
AFTER_SECS = 0.5
MIN_ACKNOWLEDGED = 100
MAX_ERROR_LINES = 5


def data_on(disk: Path, tmp_path: Path) -> Path:
    """A data directory on `disk`, reached through a symlink in `tmp_path` so that the broker's
    stdout and log (written beside the data directory's path) stay on a healthy disk."""
    real = disk / "data"
    real.mkdir()
    link = tmp_path / "data"
    link.symlink_to(real)
    return link


def error_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_path.read_text(errors="replace").splitlines() if " ERROR " in line]


@pytest.mark.timeout(120)
def test_a_full_disk_answers_unavailable_and_serving_resumes_when_space_returns(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", DISK_BYTES) as disk:
        broker = BrokerProcess(data_on(disk, tmp_path))
        try:
            load = QueueLoad(broker.url, seed=random.randrange(2**32))
            print(f"\nfull disk: load seed={load.seed}")
            load.start()
            try:
                time.sleep(HEALTHY_SECS)
                filler = fill(disk)
                full_at = time.monotonic()
                time.sleep(FAULT_SECS)
                assert broker.alive(), broker.log_tail()
                with Client(broker.url, timeout=10.0) as client:
                    assert client.ping()  # reads are served on a full disk
                    with pytest.raises(errors.Unavailable, match="the disk is full"):
                        client.enqueue("probe", b"x", pid="refused")
                lines_while_full = error_lines(broker)
                filler.unlink()
                resumed_secs = wait_until_serving(broker.url)
                time.sleep(AFTER_SECS)
            finally:
                load.finish()
            full_secs = time.monotonic() - full_at
            load.history.crash("SIGKILL after the load")
            broker.kill()
            broker.restart()
            verdict = load.verify(drain(broker.url))
            report = (
                f"{verdict.format()}\n  disk full for {full_secs:.1f} s; serving again {resumed_secs:.2f} s after "
                f"space returned; {len(lines_while_full)} error lines logged"
            )
            print(report)
            assert any("UNAVAILABLE" in key for key in verdict.errors), f"the disk never filled up\n{report}"
            assert not hung_or_cut(verdict.errors), f"a request timed out or lost its connection\n{report}"
            assert verdict.ok, report
            assert verdict.result.acknowledged >= MIN_ACKNOWLEDGED, report
            assert len(lines_while_full) <= MAX_ERROR_LINES, "\n".join(lines_while_full[:20])
        finally:
            broker.kill()


@pytest.mark.timeout(120)
def test_an_io_error_on_every_write_and_fsync_loses_nothing_acknowledged(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    image = tmp_path / "disk.img"
    with ext4(disk, image, DISK_BYTES):
        broker = BrokerProcess(data_on(disk, tmp_path))
        try:
            load = QueueLoad(broker.url, seed=random.randrange(2**32))
            print(f"\nI/O error: load seed={load.seed}")
            load.start()
            try:
                time.sleep(HEALTHY_SECS)
                shut_down(disk)
                time.sleep(FAULT_SECS)
                assert broker.alive(), broker.log_tail()
                with Client(broker.url, timeout=10.0) as client:
                    with pytest.raises(errors.Unavailable):
                        client.enqueue("probe", b"x", pid="refused")
            finally:
                load.finish()
            lines = error_lines(broker)
            assert broker.terminate(timeout_secs=30.0) == 0, broker.log_tail()
            # the disk is "replaced": mounted again, its journal replayed
            unmount(disk)
            mount_ext4(disk, image)
            broker.restart()
            verdict = load.verify(drain(broker.url))
            print(f"{verdict.format()}\n  {len(lines)} error lines logged")
            assert any("UNAVAILABLE" in key for key in verdict.errors), verdict.format()
            assert not hung_or_cut(verdict.errors), verdict.format()
            assert verdict.ok, verdict.format()
            assert verdict.result.acknowledged >= MIN_ACKNOWLEDGED, verdict.format()
            assert len(lines) <= MAX_ERROR_LINES, "\n".join(lines[:20])
        finally:
            broker.kill()


@pytest.mark.timeout(60)
def test_a_read_only_data_directory_stops_the_broker_from_starting_and_says_why(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", DISK_BYTES) as disk:
        data = data_on(disk, tmp_path)
        broker = BrokerProcess(data)
        try:
            with Client(broker.url) as client:
                client.enqueue("kept", b"kept", pid="kept")
            assert broker.terminate() == 0
            remount(disk, "ro")
            with pytest.raises(BrokerDidNotStart) as refused:
                BrokerProcess(data)
            assert refused.value.returncode == 1, refused.value
            assert re.search(r"cannot start: .*the data directory is read-only", refused.value.log_tail), refused.value
            remount(disk, "rw")
            broker.restart()
            with Client(broker.url) as client:
                assert [task.pid for task in client.peek("kept")] == ["kept"]
                client.enqueue("kept", b"more", pid="more")
        finally:
            broker.kill()
