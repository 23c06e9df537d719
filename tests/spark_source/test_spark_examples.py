"""The Spark data source's parts on docs/spark-source.md run as written: examples/spark_crawl.py (write,
read, stream) runs in this run's shared Spark session (its `getOrCreate()` finds it) against a real
broker and a Parquet sink in a temporary directory."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from support.broker_process import BrokerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_crawl_example_writes_reads_and_streams_into_the_lake(
    broker: BrokerProcess, spark_session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["spark_crawl.py", broker.url, str(tmp_path / "lake")])
    runpy.run_path(str(EXAMPLES / "spark_crawl.py"), run_name="__main__")
    assert capsys.readouterr().out == "to fetch: 6\nin the lake: 6\n"
    with Client(broker.url) as client:
        fetch = client.peek("crawl#fetch", 10)
        assert [view.pid for view in fetch] == sorted(f"https://example.com/{n}" for n in range(6))
        assert {view.pid: view.receiver for view in fetch}["https://example.com/1"] == "eu"
        assert all(view.state == "leased" for view in client.peek("crawl#parsed", 10))  # the last batch's
    rows = spark_session.read.parquet(str(tmp_path / "lake" / "parsed")).orderBy("pid").collect()
    assert [bytes(row.data).decode() for row in rows][:1] == ["parsed https://example.com/0"]
