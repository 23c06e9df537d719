"""Kittiwake for your tests: a real broker in a subprocess.

    from kittiwake.testing import BrokerProcess

    @pytest.fixture
    def broker(tmp_path):
        with BrokerProcess(tmp_path / "data", args=["--durability", "os"]) as broker:
            yield broker          # broker.url is kw://127.0.0.1:PORT

`BrokerProcess` (`broker_process`) starts `python -m kittiwake.broker` on a fresh data directory
or a store URL, waits until it listens, reads its ports from its listening line
(`parse_listening_line`, beside the broker's own formatter in `kittiwake.broker.listening`), and
kills, terminates or restarts it on the same data. `spawn` holds the hook that starts the process.
Kittiwake's own test suite and benchmarks start their brokers with it too.
"""

from kittiwake.broker.listening import Listening, format_listening_line, parse_listening_line
from kittiwake.testing.broker_process import BrokerDidNotStart, BrokerProcess, broker_command
from kittiwake.testing.spawn import Spawn, Spawned, spawn_subprocess

__all__ = [
    "BrokerDidNotStart",
    "BrokerProcess",
    "Listening",
    "Spawn",
    "Spawned",
    "broker_command",
    "format_listening_line",
    "parse_listening_line",
    "spawn_subprocess",
]
