"""How the CLI renders records: JSON field names, task data as UTF-8 or base64, times and rates."""

from __future__ import annotations

from kittiwake.cli.output import data_cell, format_rate, format_secs, relative_time, to_json_value
from kittiwake.client import EnqueueOutcome, LeasedTask


def test_data_is_utf8_text_when_it_decodes_else_base64() -> None:
    task = LeasedTask(queue="q", pid="p", data="naïve".encode(), lease_id=3, expires_at=9.0, worker="w")
    rendered = to_json_value([task])[0]
    assert (rendered["data"], rendered["data_encoding"]) == ("naïve", "utf-8")
    assert (rendered["expires_at"], rendered["worker"]) == (9.0, "w")  # the client's names, not the wire's
    binary = to_json_value({"queue": "q", "data": b"\xff\xfe"})
    assert (binary["data"], binary["data_encoding"]) == ("//4=", "base64")


def test_dataclass_records_become_maps() -> None:
    assert to_json_value(EnqueueOutcome("q", "p", True)) == {"queue": "q", "pid": "p", "collapsed": True}


def test_table_cells() -> None:
    assert data_cell(b"line one\nline two") == "line one\\nline two"
    assert data_cell(b"\x80") == "base64:gA=="
    assert data_cell(b"x" * 100, width=10) == "x" * 9 + "…"
    assert relative_time(None) == "-"
    assert relative_time(105.0, now=100.0) == "in 5.0s"
    assert relative_time(90.0, now=100.0) == "10.0s ago"
    assert format_secs(300) == "5.0m"
    assert format_rate(0.05, 0.01) == "0.05/s / 0.01/s"
