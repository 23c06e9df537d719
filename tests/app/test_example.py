"""The docs' examples of the task layer run as written: examples/shop.py ("Tasks and workers") and
examples/hello.py (the README's App + worker) against real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.broker_process import BrokerProcess
from worker.harness import TESTS_DIR, workers

EXAMPLES = TESTS_DIR.parent / "examples"
EXPECTED = """\
49
328350
order 1: 1 items True
failed: ValueError order 2 is empty
['order 3: 1 items', 'order 4: 2 items', 3, 'sent: shelves are full']
pending sent: good morning
['sent: ada', 'sent: grace']
"""
HELLO_EXPECTED = """\
144
[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
"""


def run_example(broker: BrokerProcess, tmp_path: Path, app: str, script: str, *worker_args: str) -> str:
    path = os.pathsep.join([str(EXAMPLES), str(TESTS_DIR)])
    with workers(broker.url, tmp_path, *worker_args, app=app, env={"PYTHONPATH": path},
                 processes=int(worker_args[1]) if worker_args else 1):
        done = subprocess.run(
            [sys.executable, script], cwd=EXAMPLES, capture_output=True, text=True, timeout=120,
            env={**os.environ, "KITTIWAKE_URL": broker.url},
        )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_shop_example_prints_what_the_docs_say(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run_example(broker, tmp_path, "shop:app", "shop.py", "--processes", "2", "--concurrency", "4") == EXPECTED


def test_the_hello_example_prints_what_the_readme_says(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run_example(broker, tmp_path, "hello:app", "hello.py") == HELLO_EXPECTED
