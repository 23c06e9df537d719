"""`kittiwake.mapreduce.gen_data` and `kittiwake gen-data`: deterministic partitions of text or records."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kittiwake.byte_sizes import parse_byte_size
from kittiwake.errors import BadRequest
from kittiwake.mapreduce import gen_data
from kittiwake.mapreduce.gen_data import RECORD_BYTES, RECORDS, TEXT, plan


def test_sizes_parse_in_decimal_units_any_case() -> None:
    assert parse_byte_size("100KB") == 100_000 and parse_byte_size("100kb") == 100_000
    assert parse_byte_size("1MB") == 10**6 and parse_byte_size("10mB") == 10**7
    assert parse_byte_size("1GB") == 10**9 and parse_byte_size("512B") == 512
    assert parse_byte_size("4096") == 4096 and parse_byte_size(4096) == 4096


@pytest.mark.parametrize("bad", ["", "lots", "5TB", "1.2.3MB", "-1MB", "MB", None, True, -5])
def test_a_bad_size_is_a_bad_request(bad: object) -> None:
    with pytest.raises(BadRequest):
        parse_byte_size(bad)  # type: ignore[arg-type]


def test_a_plan_refuses_what_it_cannot_generate() -> None:
    with pytest.raises(BadRequest, match="must not exceed"):
        plan(TEXT, 1000, 2000, 0)
    with pytest.raises(BadRequest, match="at least"):
        plan(RECORDS, 1000, 99, 0)
    with pytest.raises(BadRequest, match="kind"):
        plan("csv", 1000, 500, 0)
    with pytest.raises(BadRequest, match="seed"):
        plan(TEXT, 1000, 500, "1")  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="index"):
        plan(TEXT, 1000, 500, 0).target_bytes(2)


@pytest.mark.parametrize("kind", [TEXT, RECORDS])
def test_the_same_seed_gives_the_same_bytes_and_another_seed_others(kind: str) -> None:
    first = plan(kind, 60_000, 20_000, seed=5)
    again = plan(kind, 60_000, 20_000, seed=5)
    other = plan(kind, 60_000, 20_000, seed=6)
    for index in range(first.partitions):
        assert gen_data.partition_bytes(first, index) == gen_data.partition_bytes(again, index)
        assert gen_data.partition_bytes(first, index) != gen_data.partition_bytes(other, index)
    # partitions are not shifted copies of another seed's (seed + index would make them so)
    assert gen_data.partition_bytes(first, 1) != gen_data.partition_bytes(other, 0)
    assert gen_data.partition_bytes(first, 0) != gen_data.partition_bytes(first, 1)


def test_text_partitions_hold_whole_lines_of_vocabulary_words_near_their_size() -> None:
    the_plan = plan(TEXT, 230_000, 50_000, seed=1)
    assert the_plan.partitions == 5
    words = set(gen_data.vocabulary(1))
    longest_line = (gen_data.LINE_WORDS[1] * (gen_data.WORD_LETTERS[1] + 1))
    for index in range(the_plan.partitions):
        data = gen_data.partition_bytes(the_plan, index)
        target = the_plan.target_bytes(index)
        assert target <= len(data) < target + longest_line
        assert data.endswith(b"\n")
        for line in data.decode("ascii").split("\n")[:-1]:
            line_words = line.split(" ")
            assert gen_data.LINE_WORDS[0] <= len(line_words) <= gen_data.LINE_WORDS[1]
            assert set(line_words) <= words
    assert the_plan.target_bytes(4) == 30_000


def test_the_vocabulary_is_distinct_lowercase_words() -> None:
    vocabulary = gen_data.vocabulary(9)
    assert len(vocabulary) == len(set(vocabulary)) == gen_data.VOCABULARY_WORDS
    assert all(word.isalpha() and word.islower() and 2 <= len(word) <= 12 for word in vocabulary)
    assert vocabulary != gen_data.vocabulary(10)


def test_word_frequencies_are_skewed_like_zipf() -> None:
    data = gen_data.partition_bytes(plan(TEXT, 2_000_000, 2_000_000, seed=2), 0)
    counts = collections.Counter(data.split())
    ranked = [count for _, count in counts.most_common()]
    vocabulary = gen_data.vocabulary(2)
    assert counts.most_common(1)[0][0] == vocabulary[0].encode()
    assert ranked[0] > 100 * ranked[len(ranked) // 2]
    # rank 1 against rank 10: 10**1.1 ≈ 12.6 times as frequent
    ratio = counts[vocabulary[0].encode()] / counts[vocabulary[9].encode()]
    assert 10 < ratio < 16


def test_record_partitions_are_whole_gensort_records() -> None:
    the_plan = plan(RECORDS, 25_050, 10_000, seed=4)
    assert (the_plan.total_records, the_plan.partitions) == (250, 3)
    numbers = []
    for index in range(the_plan.partitions):
        data = gen_data.partition_bytes(the_plan, index)
        assert len(data) % RECORD_BYTES == 0 and len(data) == the_plan.target_bytes(index)
        for start in range(0, len(data), RECORD_BYTES):
            record = data[start:start + RECORD_BYTES]
            assert all(32 <= byte <= 126 for byte in record[:10])
            assert record[10:12] == b"  " and record[44:46] == b"  " and record.endswith(b"\r\n")
            numbers.append(int(record[12:44], 16))
            assert record[46:98] == b"".join(bytes([ord("A") + int(digit, 16)]) * 4
                                             for digit in f"{numbers[-1]:013X}")
    assert [len(gen_data.partition_bytes(the_plan, index)) for index in range(3)] == [10_000, 10_000, 5_000]
    assert numbers == list(range(250))


def test_write_puts_the_files_and_a_manifest_in_an_empty_directory(tmp_path: Path) -> None:
    the_plan = plan(RECORDS, 3_000, 1_000, seed=8)
    seen: list[int] = []
    manifest = gen_data.write(the_plan, tmp_path / "out", seen.append)
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text()) == manifest
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "_manifest.json", "part-00000.bin", "part-00001.bin", "part-00002.bin"]
    assert seen[-1] == manifest["bytes_written"] == 3_000
    with pytest.raises(BadRequest, match="new or empty"):
        gen_data.write(the_plan, tmp_path / "out")


def kittiwake(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "KITTIWAKE_URL"}
    return subprocess.run([sys.executable, "-m", "kittiwake", *args], capture_output=True, text=True, timeout=120,
                          env=environment)


@pytest.mark.parametrize("kind, suffix", [("text", "txt"), ("records", "bin")])
def test_the_command_writes_partitions_and_their_manifest(tmp_path: Path, kind: str, suffix: str) -> None:
    done = kittiwake("gen-data", "--kind", kind, "--size", "200KB", "--partition-size", "50KB",
                     "--out", str(tmp_path / "a"), "--seed", "7")
    assert done.returncode == 0, done.stderr
    assert "wrote 4" in done.stdout
    manifest = json.loads((tmp_path / "a" / "_manifest.json").read_text())
    assert manifest["kind"] == kind and manifest["seed"] == 7 and manifest["partitions"] == 4
    assert manifest["size_bytes"] == 200_000 and manifest["partition_size_bytes"] == 50_000
    assert [entry["name"] for entry in manifest["files"]] == [f"part-0000{index}.{suffix}" for index in range(4)]
    for entry in manifest["files"]:
        assert (tmp_path / "a" / entry["name"]).stat().st_size == entry["bytes"]
        assert 50_000 <= entry["bytes"] < 50_300
    assert manifest["bytes_written"] == sum(entry["bytes"] for entry in manifest["files"])
    again = kittiwake("gen-data", "--kind", kind, "--size", "200kb", "--partition-size", "50000",
                      "--out", str(tmp_path / "b"), "--seed", "7")
    assert again.returncode == 0, again.stderr
    for entry in manifest["files"]:
        assert (tmp_path / "a" / entry["name"]).read_bytes() == (tmp_path / "b" / entry["name"]).read_bytes()


@pytest.mark.parametrize("args, message", [
    (["--size", "2XB", "--partition-size", "1KB"], "'2XB'"),
    (["--size", "1KB", "--partition-size", "2KB"], "must not exceed"),
])
def test_the_command_rejects_bad_sizes_as_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    done = kittiwake("gen-data", "--kind", "text", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "error BAD_REQUEST" in done.stderr and message in done.stderr
    assert not (tmp_path / "out").exists()
