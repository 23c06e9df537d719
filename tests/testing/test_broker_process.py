"""`kittiwake.testing.BrokerProcess`, the broker launcher Kittiwake ships for integration tests.

Real brokers: started on a data directory and on a store URL, ports read by face from the listening
line (and each port serves), killed and restarted on the same data with its tasks and on its ports,
terminated with the clean stop's exit status, a bad option or a silent process failing with the
exit status and the log's end. Most start through the suite's fork launcher (`spawn=`, as the rest
of the suite does); the first and the bad option through the default, a plain subprocess.
"""

from __future__ import annotations

import http.client
import socket
import sys
from pathlib import Path
from collections.abc import Sequence

import pytest

from kittiwake import Client
from kittiwake.broker.listening import format_listening_line
from kittiwake.testing import BrokerDidNotStart, BrokerProcess, Spawned, spawn_subprocess
from support import broker_launcher

FACES = ["--udp-port", "0", "--sqs-port", "0", "--http-port", "0"]


def fast(data: Path, args: Sequence[str] = (), *, host: str = "127.0.0.1", store_url: str | None = None) -> BrokerProcess:
    """A broker forked from the suite's launcher (`spawn=`): the same command, listening sooner."""
    return BrokerProcess(data, args=args, host=host, store_url=store_url, spawn=broker_launcher.spawn)


def serves(url: str) -> bool:
    with Client(url, connect_timeout=10) as client:
        return bool(client.ping())


def http_status(port: int, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_broker_starts_listens_and_says_so_in_a_line_that_round_trips(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    assert not broker.alive() and broker.returncode is None  # nothing runs before start
    with broker:
        assert broker.alive() and broker.port > 0 and broker.host == "127.0.0.1"
        assert broker.url == f"kw://127.0.0.1:{broker.port}"
        assert broker.startup_secs is not None and broker.startup_secs > 0
        assert serves(broker.url)
        line = broker.stdout_path.read_text()
        assert broker.listening is not None and format_listening_line(broker.listening) + "\n" == line
        assert broker.listening.data_dir == str((tmp_path / "data").resolve())
        assert broker.ports == {} and broker.tls_port is None and broker.udp_port is None
        assert "--- start 0: " in broker.log_tail() and "broker started on" in broker.log_tail()
    assert broker.returncode == -9  # leaving the `with` kills it


def test_the_ports_of_every_face_are_read_by_name_and_each_serves(tmp_path: Path) -> None:
    with fast(tmp_path / "data", FACES) as broker:
        assert list(broker.ports) == ["udp", "sqs", "http"]
        assert (broker.udp_port, broker.sqs_port, broker.http_port) == (
            broker.ports["udp"], broker.ports["sqs"], broker.ports["http"])
        assert len({broker.port, *broker.ports.values()}) == 4
        with Client(f"kwu://127.0.0.1:{broker.udp_port}") as over_udp:
            over_udp.enqueue("by-udp", b"x", pid="u1")
        with Client(broker.url) as client:
            assert [task.pid for task in client.peek("by-udp")] == ["u1"]
        assert http_status(broker.ports["http"], "GET", "/healthz") == 200
        assert http_status(broker.ports["sqs"], "POST", "/", body=b"{}", headers={
            "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"}) == 200


def test_kill_then_restart_keeps_the_tasks_and_the_ports(tmp_path: Path) -> None:
    with fast(tmp_path / "data", FACES) as broker:
        with Client(broker.url) as client:
            client.enqueue_many([{"queue": "jobs", "data": b"x", "pid": f"t{n}"} for n in range(5)])
        ports = (broker.port, dict(broker.ports))
        first_pid = broker.pid
        broker.kill()
        assert not broker.alive() and broker.returncode == -9
        assert broker.port == ports[0]  # what it said stays while it is down
        broker.restart()
        assert broker.pid != first_pid and broker.starts == 2
        assert (broker.port, dict(broker.ports)) == ports  # every port was free again
        with Client(broker.url) as client:
            assert sorted(task.pid for task in client.peek("jobs", 10)) == [f"t{n}" for n in range(5)]
        assert broker.log_tail().count("--- start ") == 2


def test_a_restart_whose_port_was_taken_meanwhile_takes_another(tmp_path: Path) -> None:
    with fast(tmp_path / "data") as broker:
        with Client(broker.url) as client:
            client.enqueue("jobs", b"x", pid="kept")
        broker.kill()
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", broker.port))
            squatter.listen()
            taken = broker.port
            broker.restart()
            assert broker.alive() and broker.port != taken
            with Client(broker.url) as client:
                assert [task.pid for task in client.peek("jobs")] == ["kept"]
        assert broker.starts == 3  # the refused start on the taken port, then one on a free one


def test_restart_of_a_running_broker_kills_it_first(tmp_path: Path) -> None:
    with fast(tmp_path / "data") as broker:
        first_pid = broker.pid
        broker.restart()
        assert broker.pid != first_pid and serves(broker.url)


def test_terminate_is_the_clean_stop_and_returns_its_exit_status(tmp_path: Path) -> None:
    with fast(tmp_path / "data") as broker:
        with Client(broker.url) as client:
            client.enqueue("jobs", b"x", pid="kept")
        assert broker.terminate() == 0
        assert not broker.alive() and broker.returncode == 0
        assert "signalled, stopping" in broker.log_tail()
        assert broker.terminate() == 0  # again: it has exited already
        broker.restart()
        with Client(broker.url) as client:
            assert [task.pid for task in client.peek("jobs")] == ["kept"]


def test_a_broker_on_a_store_url_keeps_its_logs_beside_the_directory_given(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    with fast(tmp_path / "logs-only", store_url=f"sqlite://{store}") as broker:
        assert broker.listening is not None and broker.listening.data_dir == str(store.resolve())
        assert serves(broker.url)
        assert broker.log_path == tmp_path / "logs-only.log" and broker.stdout_path == tmp_path / "logs-only.stdout"
    assert not (tmp_path / "logs-only").exists()


def test_a_broker_on_every_interface_is_reached_on_the_loopback(tmp_path: Path) -> None:
    with fast(tmp_path / "data", host="0.0.0.0") as broker:
        assert broker.listening is not None and broker.listening.host == "0.0.0.0"
        assert broker.host == "127.0.0.1" and serves(broker.url)


def test_a_bad_option_fails_the_start_with_the_exit_status_and_the_log(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", args=["--durability", "eventually"])
    with pytest.raises(BrokerDidNotStart) as refused:
        broker.start()
    assert refused.value.returncode == 2 and broker.returncode == 2
    assert "exited with status 2 before listening" in str(refused.value)
    assert "Invalid value for '--durability'" in refused.value.log_tail
    assert refused.value.log_tail in str(refused.value)  # the message carries the log's end


def test_a_process_that_never_listens_is_killed_after_the_timeout(tmp_path: Path) -> None:
    silent = [sys.executable, "-c", "import sys, time; print('starting', file=sys.stderr, flush=True); time.sleep(60)"]
    broker = BrokerProcess(tmp_path / "data", command=silent, start_timeout_secs=0.5)
    with pytest.raises(BrokerDidNotStart) as refused:
        broker.start()
    assert refused.value.returncode is None and "did not listen within 0.5 s" in str(refused.value)
    assert "starting" in refused.value.log_tail
    assert not broker.alive() and broker.returncode == -9


def test_the_spawn_hook_gets_the_command_and_the_two_files(tmp_path: Path) -> None:
    calls: list[tuple[list[str], Path, Path]] = []

    def recorded(command: Sequence[str], stdout_path: Path, stderr_path: Path) -> Spawned:
        calls.append((list(command), stdout_path, stderr_path))
        return spawn_subprocess(command, stdout_path, stderr_path)

    with BrokerProcess(tmp_path / "data", args=["--durability", "os"], spawn=recorded) as broker:
        assert broker.listening is not None and broker.listening.durability == "os"
    [(command, stdout_path, stderr_path)] = calls
    assert command == [sys.executable, "-m", "kittiwake.broker", "--data", str(tmp_path / "data"),
                       "--host", "127.0.0.1", "--port", "0", "--durability", "os"]
    assert (stdout_path, stderr_path) == (broker.stdout_path, broker.log_path)


def test_a_running_broker_cannot_be_started_twice(tmp_path: Path) -> None:
    with fast(tmp_path / "data") as broker:
        with pytest.raises(RuntimeError, match="running already"):
            broker.start()
    never = BrokerProcess(tmp_path / "never")
    never.kill()  # nothing to kill: fine
    with pytest.raises(RuntimeError, match="not been started"):
        never.terminate()

