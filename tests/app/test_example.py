"""The README's "Running tasks" example runs as written: examples/shop.py against a real worker."""

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
"""


def test_the_shop_example_prints_what_the_readme_says(broker: BrokerProcess, tmp_path: Path) -> None:
    path = os.pathsep.join([str(EXAMPLES), str(TESTS_DIR)])
    with workers(broker.url, tmp_path, "--processes", "2", "--concurrency", "4", app="shop:app",
                 env={"PYTHONPATH": path}, processes=2):
        done = subprocess.run(
            [sys.executable, "shop.py"], cwd=EXAMPLES, capture_output=True, text=True, timeout=120,
            env={**os.environ, "KITTIWAKE_URL": broker.url},
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXPECTED
