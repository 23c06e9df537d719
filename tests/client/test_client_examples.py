"""The README's client example runs as written: examples/client.py against a real broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.broker_process import BrokerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, broker: BrokerProcess) -> str:
    """What examples/`name` prints, run as a user would, against `broker`."""
    done = subprocess.run(
        [sys.executable, name], cwd=EXAMPLES, capture_output=True, text=True, timeout=60,
        env={**os.environ, "KITTIWAKE_URL": broker.url},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_client_example_moves_its_task_to_the_next_stage(broker: BrokerProcess) -> None:
    assert run_example("client.py", broker) == "b'<html>https://example.com/</html>'\n"


def test_the_producer_example_sends_every_task(broker: BrokerProcess) -> None:
    assert run_example("producer.py", broker) == "emails 1000\n"
