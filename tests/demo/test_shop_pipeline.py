"""The main job's pieces: the generated dataset says what it holds, the cleaning rules of Spark and
plain Python agree on every row, and the plain PySpark script's figures are the plain-Python ones."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import pytest

from kittiwake.demo import check, rules, transforms
from kittiwake.demo.dataset import Manifest, generate, parse_size
from kittiwake.errors import BadRequest


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    return generate(tmp_path_factory.mktemp("dataset"), 300_000, shards=3, seed=11)


def test_sizes_parse_in_decimal_units() -> None:
    assert parse_size("300MB") == 300_000_000 and parse_size("1.5 gb") == 1_500_000_000
    assert parse_size("800kB") == 800_000 and parse_size(20_000) == 20_000
    for bad in ("lots", "5TB", "1kB"):
        with pytest.raises(BadRequest):
            parse_size(bad)


def test_the_manifest_counts_what_the_files_hold(manifest: Manifest, tmp_path: Path) -> None:
    again = generate(tmp_path, 300_000, shards=3, seed=11)
    for shard, twin in zip(manifest.shards, again.shards):
        assert Path(shard.path).read_bytes() == Path(twin.path).read_bytes()  # seeded: the same bytes
        with open(shard.path, newline="") as lines:
            rows = list(csv.reader(lines))[1:]
        assert len(rows) == shard.lines == shard.rows + shard.replays + shard.garbage
        clean = {event[0] for event in map(rules.clean_row, rows) if event is not None}
        assert len(clean) == shard.clean_rows
        assert 0 < shard.malformed and 0 < shard.replays
    assert Manifest.load(manifest.root) == manifest


def test_clean_row_keeps_normalises_and_refuses() -> None:
    row = ["7", "42", "2025-01-05 10:00:00", " Purchase ", "12.50", "HTTPS://Shop.Example.com/products/3/?utm=x"]
    assert rules.clean_row(row) == (7, 42, "purchase", 1250, "https://shop.example.com/products/3")
    assert rules.clean_row(["8", "42", "2025-01-05 10:00:00", "refund", "0.99", "u"]) == (8, 42, "refund", -99, "u")
    assert rules.clean_row(["9", "42", "2025-01-05 10:00:00", "VIEW", "", "u"]) == (9, 42, "view", 0, "u")
    for bad in (["1", "N/A", "2025-01-05 10:00:00", "view", "", "u"],
                ["1", "2", "2025-13-45 99:99:99", "view", "", "u"],
                ["1", "2", "2025-01-05 10:00:00", "???", "", "u"],
                ["1", "2", "2025-01-05 10:00:00", "purchase", "12.5O", "u"],
                ["1", "2", "2025-01-05 10:00:00", "view", "", ""],
                ["<<<truncated record>>>"]):
        assert rules.clean_row(bad) is None, bad


def test_spark_and_plain_python_agree_on_every_figure(manifest: Manifest, spark_session: object,
                                                      tmp_path: Path) -> None:
    from kittiwake.demo import plain_spark

    previous = transforms.apply_settings(spark_session)
    try:
        shard = manifest.shards[1]
        figures_path = str(tmp_path / "shard-figures")
        events = transforms.clean(transforms.read_events(spark_session, shard.path))
        users = transforms.read_users(spark_session, manifest.users_path)
        transforms.figures(transforms.enrich(events, users)).write.parquet(figures_path)
        expected, rows = check.shard_figures(shard, manifest.users_path)
        assert rows == shard.lines
        result = check.CheckResult()
        check.compare(expected, check.read_figures(figures_path), "shard 1", result)
        assert result.ok, result.differences

        outcome = plain_spark.run(spark_session, manifest, tmp_path / "plain")
    finally:
        transforms.apply_settings(spark_session, previous)
    whole: rules.Figures = {}
    for each in manifest.shards:
        rules.add_figures(whole, rules.figure_rows(check.shard_figures(each, manifest.users_path)[0]))
    result = check.CheckResult()
    check.compare(whole, check.read_figures(tmp_path / "plain" / "figures"), "plain script", result)
    assert result.ok, result.differences
    report = outcome["report"]
    assert report == rules.report_from_rows(rules.figure_rows(whole))
    assert report["totals"]["events"] == manifest.clean_rows
    assert Decimal(report["totals"]["revenue"]) == sum(
        (Decimal(row["revenue"]) for row in report["revenue_by_country_plan"]), Decimal("0"))
