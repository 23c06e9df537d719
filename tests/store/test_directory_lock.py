"""One process per data directory: a second broker, copy or migrate on a directory in use is refused.

Two brokers on one SQLite directory would each take their memory for the truth and lease the same
tasks to different workers. Real broker subprocesses: the second is refused at start with a message
naming the first's pid and exits non-zero, while the first goes on serving; the lock goes with the
process however it ends (SIGKILL, a clean stop), so a new broker starts on the directory afterwards.
In one process, two `Broker`s on one directory are refused too (flock belongs to the open file, not
the process). Then the lock itself (`store.directory_lock`): left behind by a dead process it blocks
nobody, and a program its holder started does not keep it.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake import Client, errors, testing
from kittiwake.broker import BrokerConfig
from kittiwake.cli.main import cli
from kittiwake.store.directory_lock import LOCK_FILE_NAME, DirectoryInUse, lock_directory
from support.auth_users import ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from support.in_process_broker import InProcessBroker

REFUSAL_TIMEOUT_SECS = 30.0  # a refused broker exits long before this; one that serves never does
TASKS = 10


def second_broker(data: Path, log_dir: Path) -> tuple[int | None, str]:
    """Start `kittiwake broker --data DATA` and wait, within a bound, until it exits or listens.

    Returns (exit status, stderr) once it exited, or (None, stderr) when it started serving (it is
    killed then: the defect this file guards against)."""
    second = testing.BrokerProcess(data, log_path=log_dir / "second.log", start_timeout_secs=REFUSAL_TIMEOUT_SECS,
                                   command=[sys.executable, "-m", "kittiwake", "broker"])
    try:
        second.start()
    except testing.BrokerDidNotStart as refused:
        assert refused.returncode is not None, f"the second broker neither exited nor listened:\n{refused}"
        return refused.returncode, stderr_of(second)
    second.kill()
    return None, stderr_of(second)


def stderr_of(broker: testing.BrokerProcess) -> str:
    """What the broker wrote on stderr, without the launcher's line that marks each start."""
    lines = broker.log_path.read_text(errors="replace").splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("--- start "))


def root_url(broker: BrokerProcess) -> str:
    return broker.client_url(*ROOT)


def copy(source: str, target: str) -> object:
    return CliRunner().invoke(cli, ["copy", "--from", source, "--to", target])


def migrate(store: str) -> object:
    return CliRunner().invoke(cli, ["migrate", "--store", store])


# --------------------------------------------------------------- brokers


def test_a_second_broker_on_a_served_directory_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data, auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        with Client(root_url(first)) as client:
            client.enqueue_many([{"queue": "jobs", "data": b"x", "pid": f"t{n}"} for n in range(TASKS)])
        status, stderr = second_broker(data, tmp_path)
        assert status is not None, f"a second broker started serving {data}, which a broker serves already"
        assert status == 1, stderr
        assert f"pid {first.pid}" in stderr and "served by another broker" in stderr, stderr
        assert str(data) in stderr and "Traceback" not in stderr, stderr
        assert first.alive()
        with Client(root_url(first)) as client:
            leased = client.lease("jobs", max_tasks=TASKS, lease_secs=60)
            assert sorted(task.pid for task in leased) == sorted(f"t{n}" for n in range(TASKS))
            for task in leased:
                client.dequeue(task)
            assert client.peek("jobs") == []
    finally:
        first.kill()


def test_after_a_sigkill_a_new_broker_starts_on_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        with Client(broker.url) as client:
            client.enqueue("kept", b"kept", pid="kept")
        killed = broker.pid
        broker.kill()  # SIGKILL, waited for: the kernel has closed the lock's file with the process
        broker.restart()
        assert broker.alive() and broker.pid != killed
        assert (data / LOCK_FILE_NAME).read_text().split()[0] == str(broker.pid)
        with Client(broker.url) as client:
            assert [task.pid for task in client.peek("kept")] == ["kept"]
        status, stderr = second_broker(data, tmp_path)  # and the new one holds the directory in turn
        assert status == 1 and f"pid {broker.pid}" in stderr, stderr
    finally:
        broker.kill()


def test_after_a_clean_stop_a_new_broker_starts_on_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        assert broker.terminate() == 0
        broker.restart()
        assert broker.alive()
        with Client(broker.url) as client:
            client.enqueue("after", b"x")
    finally:
        broker.kill()


def test_a_broker_that_fails_to_start_lets_the_directory_go(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the store opens first, then the port is found taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = BrokerConfig(data_dir=str(tmp_path / "data"), port=taken.getsockname()[1])
        with pytest.raises(OSError):
            InProcessBroker(config, None)
    # in this process, where a descriptor left open would still hold it
    lock_directory(tmp_path / "data", "test").release()


def test_two_in_process_brokers_on_one_directory_are_refused(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=str(tmp_path / "data"), port=0)
    first = InProcessBroker(config, None)
    try:
        with pytest.raises(DirectoryInUse) as refused:
            InProcessBroker(config, None)
        assert refused.value.code == errors.StoreInUse.code == "STORE_IN_USE"
        assert isinstance(refused.value, errors.StoreInUse) and refused.value.holder_pid == os.getpid()
        with first.connect() as conn:
            conn.call("ping")
    finally:
        first.close()
    again = InProcessBroker(config, None)  # a clean stop let it go
    again.close()


# --------------------------------------------------------- copy, migrate


def test_copy_and_migrate_refuse_a_served_directory_as_source_or_target(tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    BrokerProcess(stopped).terminate()  # a store of its own, nobody serving it
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        with Client(broker.url) as client:
            client.enqueue("jobs", b"x", pid="served")
        for source, target in ((data, tmp_path / "copy"), (stopped, data)):
            refused = copy(f"sqlite://{source}", f"sqlite://{target}")
            assert refused.exit_code == 1, refused.output
            assert f"pid {broker.pid}" in refused.output and "stop it first" in refused.output, refused.output
        refused = migrate(f"sqlite://{data}")
        assert refused.exit_code == 1, refused.output
        assert f"pid {broker.pid}" in refused.output and "served by another broker" in refused.output, refused.output
        with Client(broker.url) as client:  # nothing was written into the served store
            assert [task.pid for task in client.peek("jobs")] == ["served"]
    finally:
        broker.kill()
    assert migrate(f"sqlite://{data}").exit_code == 0
    assert copy(f"sqlite://{data}", f"sqlite://{tmp_path / 'copy'}").exit_code == 0


def test_a_broker_is_refused_while_a_copy_holds_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with lock_directory(data, "kittiwake copy"):  # as `kittiwake copy` holds it while it runs
        status, stderr = second_broker(data, tmp_path)
    assert status == 1, stderr
    assert f"in use by kittiwake copy (pid {os.getpid()})" in stderr, stderr


# ---------------------------------------------------------------- the lock


def test_the_lock_is_refused_to_a_second_opener_in_the_same_process(tmp_path: Path) -> None:
    held = lock_directory(tmp_path, "broker")
    try:
        assert (tmp_path / LOCK_FILE_NAME).read_text() == f"{os.getpid()}\nbroker\n"
        with pytest.raises(DirectoryInUse, match=f"served by another broker \\(pid {os.getpid()}\\)"):
            lock_directory(tmp_path, "broker")
    finally:
        held.release()
    held.release()  # once is enough: again is nothing
    lock_directory(tmp_path, "broker").release()


def test_a_lock_file_left_by_a_dead_process_blocks_nobody(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / LOCK_FILE_NAME).write_text(f"{dead.stdout.strip()}\nbroker\n")
    broker = BrokerProcess(tmp_path / "data")
    try:
        assert broker.alive()
        assert (tmp_path / "data" / LOCK_FILE_NAME).read_text() == f"{broker.pid}\nbroker\n"
    finally:
        broker.kill()


HOLDER_WITH_A_CHILD = """
import subprocess, sys, time
from kittiwake.store.directory_lock import lock_directory
lock = lock_directory(sys.argv[1], "broker")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_program_the_holder_started_does_not_keep_the_lock_after_the_holder_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_WITH_A_CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True)
    child_pid = None
    try:
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], REFUSAL_TIMEOUT_SECS)
        assert ready, "the holder did not start its child"
        child_pid = int(holder.stdout.readline())
        with pytest.raises(DirectoryInUse):
            lock_directory(tmp_path, "test")
        holder.kill()  # SIGKILL: nothing of the holder lets the lock go but the kernel
        holder.wait(timeout=30)
        os.kill(child_pid, 0)  # the child lives on, and with it any descriptor it inherited
        lock_directory(tmp_path, "test").release()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=30)
        if child_pid is not None:
            os.kill(child_pid, signal.SIGKILL)


def test_an_unreadable_holder_is_named_as_unknown(tmp_path: Path) -> None:
    held = lock_directory(tmp_path, "broker")
    try:
        (tmp_path / LOCK_FILE_NAME).write_text("garbage")  # someone wrote over it
        with pytest.raises(DirectoryInUse, match=r"in use by another process \(pid unknown\)") as refused:
            lock_directory(tmp_path, "broker")
        assert refused.value.holder_pid is None
    finally:
        held.release()
