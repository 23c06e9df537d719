"""The "Pipelines on Spark" example of the README and docs/pipelines.md runs as written: examples/sales.py submits a run and
prints its result, with the flow's python and Spark steps served by workers of this process."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from flow.spark_process import TESTS_DIR
from support.broker_process import BrokerProcess

EXAMPLES = TESTS_DIR.parent / "examples"
EXPECTED = """\
done {'files': 1, 'clean': 3, 'totals': 1}
[{'region': 'east', 'amount': 36}, {'region': 'north', 'amount': 30}, {'region': 'south', 'amount': 33}]
"""


def test_the_sales_example_prints_what_the_readme_says(broker: BrokerProcess, python_workers, spark_workers,
                                                       tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        sales = importlib.import_module("sales")
    finally:
        sys.path.remove(str(EXAMPLES))
    python_workers(sales.flow)
    spark_workers(sales.flow)
    done = subprocess.run([sys.executable, str(EXAMPLES / "sales.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "KITTIWAKE_URL": broker.url})
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXPECTED
    assert sorted(path.name for path in (tmp_path / "sales-in").iterdir()) == ["day-0.csv", "day-1.csv", "day-2.csv"]
