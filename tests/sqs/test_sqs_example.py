"""The SQS example of docs/existing-clients.md runs as written: examples/sqs_client.py (boto3) against
a broker's SQS port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("boto3")

from support.broker_process import BrokerProcess  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_boto3_example_sends_and_receives_through_the_sqs_api(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra_args=["--sqs-port", "0"])
    try:
        done = subprocess.run(
            [sys.executable, "sqs_client.py"], cwd=EXAMPLES, capture_output=True, text=True, timeout=60,
            env={**os.environ, "KITTIWAKE_SQS_URL": broker.sqs_endpoint},
        )
    finally:
        broker.terminate()
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"to": "ada@example.com"} welcome\n'
