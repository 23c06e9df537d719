"""Canonical forms of outputs in both layouts, sort order checks, and the plain-Python reference."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kittiwake.errors import BadRequest
from kittiwake.mapreduce import reference
from kittiwake.mapreduce.outputs import (
    Canonical,
    canonical_of_lines,
    canonical_of_native,
    canonical_of_spark,
    is_globally_sorted,
    sort_output_check,
)


def _write(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def _expected(lines: list[bytes]) -> Canonical:
    return Canonical(len(lines), hashlib.sha256(b"".join(line + b"\n" for line in lines)).hexdigest())


def _record(key: bytes) -> bytes:
    """A 98-byte record (without line ending) with a 10-byte key."""
    return key.ljust(10) + b"  " + b"0" * 32 + b"  " + b"A" * 52


def test_canonical_of_lines_is_the_sha256_of_each_line_and_a_newline():
    assert canonical_of_lines([]) == _expected([])
    assert canonical_of_lines([b"b", b"a"]) == _expected([b"b", b"a"])
    assert canonical_of_lines(iter([b"a b", b""])) == _expected([b"a b", b""])


def test_wordcount_and_grep_are_multisets_equal_across_layouts(tmp_path: Path):
    native = _write(tmp_path / "native", {"part-r-00000.txt": b"apple\t3\nzebra\t1\n",
                                          "part-r-00001.txt": b"mango\t2\n"})
    spark = _write(tmp_path / "spark", {
        "part-00000-1f-c000.csv": b"zebra\t1\nmango\t2\n",
        "part-00001-1f-c000.csv": b"apple\t3\n",
        "_SUCCESS": b"",
        "._SUCCESS.crc": b"junk",
        ".part-00000-1f-c000.csv.crc": b"junk\n",
    })
    expected = _expected([b"apple\t3", b"mango\t2", b"zebra\t1"])
    assert canonical_of_native("wordcount", native) == expected
    assert canonical_of_spark("wordcount", spark) == expected

    grep_native = _write(tmp_path / "grep-native", {"part-r-00000.txt": b"b x\na x\n", "part-r-00001.txt": b"a x\n"})
    grep_spark = _write(tmp_path / "grep-spark", {"part-00000-9-c000.txt": b"a x\na x\nb x\n", "_SUCCESS": b""})
    assert canonical_of_native("grep", grep_native) == canonical_of_spark("grep", grep_spark) == _expected(
        [b"a x", b"a x", b"b x"])


def test_sort_keeps_file_order_and_strips_each_layouts_line_ending(tmp_path: Path):
    records = [_record(key) for key in (b" !abc", b"AAAA", b"AAAA", b"zz~")]
    native = _write(tmp_path / "native", {
        "part-r-00000.bin": b"".join(record + b"\r\n" for record in records[:3]),
        "part-r-00001.bin": records[3] + b"\r\n",
    })
    spark = _write(tmp_path / "spark", {
        "part-00000-u-c000.txt": records[0] + b"\n",
        "part-00001-u-c000.txt": b"".join(record + b"\n" for record in records[1:]),
        "_SUCCESS": b"",
        ".part-00001-u-c000.txt.crc": b"x",
    })
    assert canonical_of_native("sort", native) == canonical_of_spark("sort", spark) == _expected(records)
    assert is_globally_sorted(native, "native") and is_globally_sorted(spark, "spark")
    assert sort_output_check(native, "native") == (_expected(records), True)

    shuffled = _write(tmp_path / "shuffled", {"part-00000-u-c000.txt": records[1] + b"\n" + records[0] + b"\n"})
    assert canonical_of_spark("sort", shuffled) != _expected(records[:2])  # order counts for sort
    assert not is_globally_sorted(shuffled, "spark")
    assert sort_output_check(shuffled, "spark") == (_expected([records[1], records[0]]), False)
    # each file sorted, but the files out of order
    across = _write(tmp_path / "across", {"part-r-00000.bin": records[3] + b"\r\n",
                                          "part-r-00001.bin": records[0] + b"\r\n"})
    assert not is_globally_sorted(across, "native")


def test_empty_output_and_bad_layouts(tmp_path: Path):
    empty = _write(tmp_path / "empty", {"part-00000-u-c000.txt": b"", "_SUCCESS": b""})
    assert canonical_of_spark("grep", empty) == Canonical(0, hashlib.sha256(b"").hexdigest())
    assert is_globally_sorted(empty, "spark")

    with pytest.raises(BadRequest, match="app must be one of"):
        canonical_of_spark("join", empty)
    with pytest.raises(BadRequest, match="does not exist"):
        canonical_of_native("grep", tmp_path / "missing")
    with pytest.raises(BadRequest, match="style must be one of"):
        is_globally_sorted(empty, "hadoop")
    with pytest.raises(BadRequest, match="not a native sort part file"):
        canonical_of_native("sort", empty)  # .txt where .bin is expected
    stray = _write(tmp_path / "stray", {"part-r-00000.txt": b"a\t1\n", "notes.txt": b"x\n"})
    with pytest.raises(BadRequest, match="notes.txt"):
        canonical_of_native("wordcount", stray)
    crlf_missing = _write(tmp_path / "crlf", {"part-r-00000.bin": _record(b"k") + b"\n"})
    with pytest.raises(ValueError, match="line 1 does not end with"):
        canonical_of_native("sort", crlf_missing)
    unterminated = _write(tmp_path / "unterminated", {"part-r-00000.txt": b"a\t1\nb\t2"})
    with pytest.raises(ValueError, match="line 2"):
        canonical_of_native("wordcount", unterminated)


def test_reference_apps_on_hand_written_input(tmp_path: Path):
    first = tmp_path / "part-00000.txt"
    second = tmp_path / "part-00001.txt"
    first.write_bytes(b"the cat\nthe dog sat\n")
    second.write_bytes(b"a cat sat\n")
    assert reference.reference("wordcount", [first, second]) == _expected(
        [b"a\t1", b"cat\t2", b"dog\t1", b"sat\t2", b"the\t2"])
    assert reference.reference("grep", [first, second], pattern="cat") == _expected([b"a cat sat", b"the cat"])
    assert reference.grep([first, second], b"at") == _expected([b"a cat sat", b"the cat", b"the dog sat"])

    records = tmp_path / "part-00000.bin"
    records.write_bytes(b"".join(_record(key) + b"\r\n" for key in (b"m", b"b", b"~", b"b")))
    assert reference.reference("sort", [records]) == _expected([_record(key) for key in (b"b", b"b", b"m", b"~")])


def test_reference_rejects_bad_arguments(tmp_path: Path):
    path = tmp_path / "part-00000.txt"
    path.write_bytes(b"x\n")
    with pytest.raises(BadRequest, match="app must be one of"):
        reference.reference("count", [path])
    with pytest.raises(BadRequest, match="non-empty pattern"):
        reference.reference("grep", [path])
    with pytest.raises(BadRequest, match="only grep takes a pattern"):
        reference.reference("sort", [path], pattern="x")
    with pytest.raises(BadRequest, match="does not exist"):
        reference.reference("wordcount", [tmp_path / "missing.txt"])
    with pytest.raises(BadRequest, match="at least one"):
        reference.reference("wordcount", [])
    with pytest.raises(BadRequest, match="list of paths"):
        reference.reference("wordcount", str(path))
