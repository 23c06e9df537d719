"""Power loss: the crash loop on a lazy filesystem that drops every unsynced write at a cut.

A SIGKILL leaves the kernel's page cache alone, so it cannot tell a broker
that fsyncs before replying from one that leaves the sync to the OS. Here the
broker's data directory is a lazy filesystem (`support.lazyfs`, mounted by
`support.lazy_mount`): file data reaches its backing directory only when the
file is fsynced, and a new, unlinked or renamed name only when its directory
is. Each cycle SIGKILLs the broker, then cuts the power: every unsynced write
is dropped — or, every other cut, a random half of the unsynced 4 KiB blocks
reach the disk first (a torn cut, as the kernel's writeback would leave it) —
and names not made durable are undone. The filesystem is mounted again and the
broker restarted on what survived.

The load is the SIGKILL crash loop's (`test_crash`: producers, consumers with
short leases, atomic dequeue-and-enqueue updates, fenced late finishes); the
queue checker judges the run after a final drain.

* With `--durability fsync` no acknowledged value may be lost, none may
  appear from nowhere, and no acknowledged dequeue may be undone.
* With `--durability os` the same loop must find losses: proof that the test
  sees what a SIGKILL cannot. It is not a defect of that mode, which promises
  only to survive a process crash.

Both run again with the broker writing through the commit log
(`store.commit_log`) and checkpointing every 50 ms, so that cuts also land in
checkpoints and in the replacement of the log by an empty one.

`--soak` runs the fsync loop with many more cuts. The seed is printed; set
KITTIWAKE_CRASH_SEED to replay the schedule of cuts.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pytest

from kittiwake.client import Client
from support.broker_process import BrokerProcess
from support.checker import History, Result, check
from support.lazy_mount import LazyMount, require_fuse

# The crash loop's load and drain are reused as they are: this test differs only in what a crash is.
from test_crash import COMMIT_LOG_ARGS, Load, crash_seed, drain, error_counts, start_load

LOAD_SECS = (0.3, 1.0)  # load between a restart and the next cut
TORN_SHARE = 0.5  # at a torn cut, the chance that an unsynced block reaches the disk
DRAIN_DEADLINE_SECS = 60.0
SUITE_CUTS_FSYNC = 6
SUITE_CUTS_OS = 3
SOAK_CUTS_FSYNC = 200
MIN_ACKNOWLEDGED_PER_CUT = 20  # fewer and the run proves little


@dataclass
class PowerLossRun:
    """What one run of the loop produced: the checker's verdict and the lines of its report."""

    result: Result
    cuts: list[dict]
    lines: list[str] = field(default_factory=list)

    @property
    def report(self) -> str:
        return "\n".join(self.lines)


def run_power_loss_loop(
    tmp_path: Path, durability: str, cuts: int, seed: int, extra_args: Sequence[str] = ()
) -> PowerLossRun:
    rng = random.Random(seed)
    started = time.monotonic()
    history = History()
    with LazyMount(tmp_path / "disk", tmp_path / "data") as mount:
        broker = BrokerProcess(mount.path, extra_args=["--durability", durability, *extra_args])
        try:
            load = Load(history, broker)
            threads = start_load(load, rng)
            try:
                for cycle in range(cuts):
                    time.sleep(rng.uniform(*LOAD_SECS))
                    if load.stop.is_set():
                        break
                    torn = cycle % 2 == 1
                    history.crash(f"power cut {cycle + 1}{' (torn)' if torn else ''}")
                    broker.kill()
                    mount.cut(rng, torn_share=TORN_SHARE if torn else 0.0)
                    mount.mount()
                    broker.restart()
                time.sleep(rng.uniform(*LOAD_SECS))
            finally:
                load.stop.set()
                for thread in threads:
                    thread.join(timeout=30.0)
            assert not load.crashed, f"a load thread died: {load.crashed[0]!r}"
            assert not any(thread.is_alive() for thread in threads), "a load thread did not stop"
            load_secs = time.monotonic() - started
            drained, corrupt = drain(broker.url, DRAIN_DEADLINE_SECS)
            misfits = load.corrupt + corrupt
            assert not misfits, f"tasks whose pid does not fit their data: {misfits[:5]}"
        except BaseException:
            print(f"broker log:\n{broker.log_tail()}\nlazyfs log:\n{mount.log_tail()}")
            raise
        finally:
            broker.kill()
    result = check(history, drained)
    dropped = sum(cut["unsynced_bytes"] for cut in mount.cuts)
    torn_kept = sum(cut["torn_kept_bytes"] for cut in mount.cuts)
    undone = sum(cut["name_changes_undone"] for cut in mount.cuts)
    fsyncs = sum(cut["fsyncs"] for cut in mount.cuts)
    directory_fsyncs = sum(cut["directory_fsyncs"] for cut in mount.cuts)
    run = PowerLossRun(result, mount.cuts)
    run.lines = [
        f"power loss, --durability {durability} {' '.join(extra_args)}: {len(mount.cuts)} cuts, seed={seed} "
        f"(replay with KITTIWAKE_CRASH_SEED={seed})",
        result.format(),
        f"  client errors: {error_counts(history)}",
        f"  at the cuts: {dropped / 1e6:.1f} MB unsynced, of which {torn_kept / 1e6:.1f} MB reached the disk "
        f"in torn cuts; {undone} name changes undone",
        f"  until the last cut: {fsyncs} file fsyncs, {directory_fsyncs} directory fsyncs",
        f"  load={load_secs:.1f}s total={time.monotonic() - started:.1f}s",
    ]
    print("\n" + run.report)
    return run


def assert_nothing_acknowledged_lost(run: PowerLossRun, cuts: int) -> None:
    result = run.result
    assert result.lost == [] and result.unexpected == [], run.report
    assert result.unexplained == [], run.report  # an acknowledged dequeue undone shows up here as after_ack
    assert result.failed_present == [], run.report
    assert len(run.cuts) == cuts, run.report
    assert result.acknowledged >= MIN_ACKNOWLEDGED_PER_CUT * cuts, f"too few acknowledged enqueues\n{run.report}"
    dropped = sum(cut["unsynced_bytes"] for cut in run.cuts)
    assert dropped > 0, f"no cut found anything unsynced to drop\n{run.report}"


@pytest.mark.timeout(120)
def test_power_cuts_lose_nothing_acknowledged_with_fsync(tmp_path: Path) -> None:
    require_fuse()
    run = run_power_loss_loop(tmp_path, "fsync", SUITE_CUTS_FSYNC, crash_seed())
    assert_nothing_acknowledged_lost(run, SUITE_CUTS_FSYNC)


@pytest.mark.timeout(120)
def test_power_cuts_lose_acknowledged_tasks_with_os_durability(tmp_path: Path) -> None:
    """The same loop must fail a broker that acknowledges before syncing, or it proves nothing."""
    require_fuse()
    run = run_power_loss_loop(tmp_path, "os", SUITE_CUTS_OS, crash_seed())
    assert run.result.acknowledged > 0, run.report
    assert run.result.lost, f"nothing acknowledged was lost without fsync: the test cannot see a cut\n{run.report}"


@pytest.mark.timeout(120)
def test_power_cuts_behind_the_commit_log_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """Checkpoints every 50 ms: cuts land while the database takes the log and while the log is
    replaced by an empty one (its temporary name, rename and directory sync), as well as in appends."""
    require_fuse()
    run = run_power_loss_loop(tmp_path, "fsync", SUITE_CUTS_FSYNC, crash_seed(), COMMIT_LOG_ARGS)
    assert_nothing_acknowledged_lost(run, SUITE_CUTS_FSYNC)


@pytest.mark.timeout(120)
def test_power_cuts_behind_an_unsynced_commit_log_lose_acknowledged_tasks(tmp_path: Path) -> None:
    """The log unsynced (`--durability os`) must show losses, or the test above proves nothing."""
    require_fuse()
    run = run_power_loss_loop(tmp_path, "os", SUITE_CUTS_OS, crash_seed(), COMMIT_LOG_ARGS)
    assert run.result.acknowledged > 0, run.report
    assert run.result.lost, f"nothing acknowledged was lost without fsync: the test cannot see a cut\n{run.report}"


@pytest.mark.timeout(60)
def test_a_data_directory_the_broker_creates_survives_a_power_cut(tmp_path: Path) -> None:
    """The broker makes its data directory itself; the new name must be synced in its parent, or a cut
    takes the whole directory with every acknowledged task in it."""
    require_fuse()
    tasks = 20
    with LazyMount(tmp_path / "disk", tmp_path / "mnt") as mount:
        broker = BrokerProcess(mount.path / "queues")  # its logs go beside it, in the mount's root
        try:
            with Client(broker.url, timeout=10.0) as client:
                client.enqueue_many([{"queue": "q", "pid": f"p{n:02d}", "data": b"x"} for n in range(tasks)])
            broker.kill()
            report = mount.cut()
            mount.mount()
            broker.restart()
            with Client(broker.url, timeout=10.0) as client:
                present = [view.pid for view in client.peek("q", tasks + 1)]
        finally:
            broker.kill()
    assert present == [f"p{n:02d}" for n in range(tasks)], f"after the cut: {present}; the cut: {report}"


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_power_cut_soak_with_fsync(tmp_path: Path) -> None:
    require_fuse()
    run = run_power_loss_loop(tmp_path, "fsync", SOAK_CUTS_FSYNC, crash_seed())
    assert_nothing_acknowledged_lost(run, SOAK_CUTS_FSYNC)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_power_cut_soak_behind_the_commit_log(tmp_path: Path) -> None:
    require_fuse()
    run = run_power_loss_loop(tmp_path, "fsync", SOAK_CUTS_FSYNC, crash_seed(), COMMIT_LOG_ARGS)
    assert_nothing_acknowledged_lost(run, SOAK_CUTS_FSYNC)
