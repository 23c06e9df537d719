"""The pure parts of the MapReduce apps: partitioners, blocks, intermediates with spills, kernels against models."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake.errors import BadRequest
from kittiwake.mapreduce import gen_data, grep, reference, sort, wordcount
from kittiwake.mapreduce.outputs import canonical_of_app_lines
from kittiwake.mapreduce.intermediate import Location, MapOutput, SegmentFile, gather_segments, read_segments
from kittiwake.mapreduce.partitioners import sample_splits, word_boundaries
from kittiwake.mapreduce.spec import JobSpec
from kittiwake.mapreduce.tasks import read_blocks


def spec(app: str = "wordcount", reducers: int = 3, maps: int = 5, **fields: object) -> JobSpec:
    values = dict(app=app, job="j", maps=maps, reducers=reducers, out_dir="/o", memory_dir="/m", spill_dir="/s",
                  locations_queue="mapreduce.locations.j")
    if app == "grep":
        values["pattern"] = b"ab"
    if app == "sort":
        values["splits"] = tuple(range(1, reducers))
    values.update(fields)
    return JobSpec(**values)  # type: ignore[arg-type]


# ------------------------------------------------------------------ partitioners and spec


def test_word_ranges_cut_the_alphabet_evenly() -> None:
    assert word_boundaries(1) == []
    assert word_boundaries(4) == [b"g", b"n", b"t"]
    assert len(word_boundaries(26)) == 25
    with pytest.raises(BadRequest):
        word_boundaries(0)


def test_sampled_splits_are_ascending_quantiles_of_the_keys(tmp_path: Path) -> None:
    gen_data.write(gen_data.plan(gen_data.RECORDS, 50_000, 5_000, 3), tmp_path)
    files = sorted(tmp_path.glob("part-*"))
    splits = sample_splits(files, 4)
    assert len(splits) == 3 and splits == sorted(splits)
    assert sample_splits(files, 1) == []
    with pytest.raises(BadRequest):
        sample_splits([], 4)


@given(st.integers(1, 300), st.integers(1, 40))
def test_grep_reducers_own_contiguous_ranges_of_maps_covering_each_once(maps: int, reducers: int) -> None:
    job = spec("grep", reducers=reducers, maps=maps)
    owned = [index for reducer in range(reducers) for index in job.maps_of_reducer(reducer)]
    assert owned == list(range(maps))
    assert all(index in job.maps_of_reducer(job.reducer_of_map(index)) for index in range(maps))


@pytest.mark.parametrize("fields, message", [
    ({"app": "join"}, "app must be"),
    ({"reducers": 0}, "reducers"),
    ({"maps": 0}, "at least one map"),
    ({"spill_bytes": 0}, "spill_bytes"),
    ({"block_bytes": True}, "block_bytes"),
    ({"app": "grep", "pattern": b""}, "pattern"),
    ({"app": "grep", "pattern": b"a\nb"}, "one line"),
    ({"app": "sort", "splits": (1,)}, "splits"),
])
def test_a_bad_spec_is_refused_with_what_is_wrong(fields: dict, message: str) -> None:
    app = fields.pop("app", "wordcount")
    with pytest.raises(BadRequest, match=message):
        spec(app, **fields)  # type: ignore[arg-type]


def test_a_spec_travels_as_a_plain_map() -> None:
    job = spec("sort", reducers=3)
    assert JobSpec.from_dict(msgspec.msgpack.decode(msgspec.msgpack.encode(job.as_dict()))) == job
    grep_job = spec("grep")
    assert JobSpec.from_dict(msgspec.msgpack.decode(msgspec.msgpack.encode(grep_job.as_dict()))) == grep_job
    with pytest.raises(BadRequest):
        JobSpec.from_dict({"app": "sort"})
    with pytest.raises(BadRequest):
        JobSpec.from_dict([1, 2])


# ------------------------------------------------------------------ blocks


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=40), st.booleans(),
       st.integers(1, 64))
def test_blocks_are_whole_lines_that_add_up_to_the_file(lines: list[bytes], last_break: bool, block: int) -> None:
    data = b"\n".join(lines) + (b"\n" if last_break and lines else b"")
    with tempfile.NamedTemporaryFile(prefix="kw-blocks-") as file:  # hypothesis reseeds random: not for names
        file.write(data)
        file.flush()
        blocks = list(read_blocks(file.name, block, b"\n"))
    assert b"".join(blocks) == data
    assert all(piece.endswith(b"\n") for piece in blocks[:-1])
    assert all(piece for piece in blocks)


def test_record_blocks_hold_whole_records(tmp_path: Path) -> None:
    path = tmp_path / "r.bin"
    path.write_bytes(bytes(range(100)) * 7)
    blocks = list(read_blocks(str(path), 250, 100))
    assert all(len(piece) % 100 == 0 for piece in blocks) and b"".join(blocks) == path.read_bytes()
    assert len(blocks) > 2


# ------------------------------------------------------------------ intermediates


def test_a_small_output_stays_in_memory_in_one_file(tmp_path: Path) -> None:
    output = MapOutput("map-1", 3, tmp_path / "memory", tmp_path / "disk", spill_bytes=1_000)
    output.add(0, b"aa")
    output.add(2, b"cc")
    output.add(0, b"a")
    location = output.finish()
    assert location.spilled == 0 and len(location.files) == 1 and location.bytes == 5
    assert Path(location.files[0].path).parent == tmp_path / "memory"
    assert [list(read_segments(location, reducer)) for reducer in range(3)] == [[b"aaa"], [], [b"cc"]]
    assert Location.decode(location.encode()) == location
    assert not (tmp_path / "disk").exists()


def test_past_the_threshold_the_output_spills_to_disk_and_reads_back_in_order(tmp_path: Path) -> None:
    output = MapOutput("map-2", 2, tmp_path / "memory", tmp_path / "disk", spill_bytes=10)
    pieces = [(index % 2, bytes([65 + index]) * 4) for index in range(9)]
    for reducer, data in pieces:
        output.add(reducer, data)
    location = output.finish()
    assert location.spilled == len(location.files) > 1
    assert all(Path(file.path).parent == tmp_path / "disk" for file in location.files)
    for reducer in range(2):
        assert b"".join(read_segments(location, reducer)) == b"".join(d for r, d in pieces if r == reducer)
    assert not list((tmp_path / "disk").glob("*.partial"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=9)), max_size=8), max_size=5),
       st.integers(1, 30))
def test_gathered_segments_are_the_read_ones_joined(maps: list[list[tuple[int, bytes]]], spill_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        locations = []
        for index, pieces in enumerate(maps):
            output = MapOutput(f"map-{index}", 3, Path(folder, "memory"), Path(folder, "disk"), spill_bytes)
            for reducer, data in pieces:
                output.add(reducer, data)
            locations.append(output.finish())
        for reducer in range(3):
            joined = b"".join(data for location in locations for data in read_segments(location, reducer))
            assert bytes(gather_segments(locations, reducer)) == joined


def test_bad_locations_and_reducers_are_refused(tmp_path: Path) -> None:
    output = MapOutput("map-3", 2, tmp_path, tmp_path, spill_bytes=10)
    with pytest.raises(BadRequest):
        output.add(2, b"x")
    with pytest.raises(BadRequest):
        Location.decode(b'[[["x"]]]')
    with pytest.raises(BadRequest):
        Location.decode(b"not json")
    location = output.finish()
    Path(location.files[0].path).write_bytes(b"")
    truncated = Location((SegmentFile(location.files[0].path, ((0, 5), (5, 0))),))
    with pytest.raises(BadRequest, match="shorter"):
        list(read_segments(truncated, 0))
    with pytest.raises(BadRequest, match="shorter"):
        gather_segments([truncated], 0)
    with pytest.raises(BadRequest, match="no segment"):
        gather_segments([truncated], 2)
    with pytest.raises(BadRequest):
        MapOutput("map-4", 0, tmp_path, tmp_path, spill_bytes=10)


# ------------------------------------------------------------------ kernels against models


def run_kernel(kernel, job: JobSpec, blocks: list[bytes]) -> bytes:  # type: ignore[no-untyped-def]
    segments_per_reducer: list[list[bytes]] = [[] for _ in range(job.reducers)]
    for block in blocks:
        for reducer, segment in enumerate(kernel.map_block(block, job)):
            if segment:
                segments_per_reducer[reducer if kernel is not grep else 0].append(segment)
    return b"".join(b"".join(kernel.reduce(segments, job)) for segments in segments_per_reducer)


words = st.lists(st.sampled_from(["a", "b", "zed", "m", "", "g", "hello", "t", "é"]), max_size=8).map(" ".join)


@settings(max_examples=80, deadline=None)
@given(st.lists(words, max_size=30), st.integers(1, 6), st.integers(1, 4))
def test_wordcount_counts_like_split_on_single_spaces(lines: list[str], reducers: int, blocks: int) -> None:
    text = "".join(line + "\n" for line in lines).encode()
    cuts = sorted({text.rfind(b"\n", 0, len(text) * k // blocks) + 1 for k in range(1, blocks)} - {0})
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]
    out = run_kernel(wordcount, spec("wordcount", reducers=reducers), pieces)
    model = Counter(word.encode() for line in lines for word in line.split(" "))
    got = [line.split(b"\t") for line in out.splitlines()]
    assert [word for word, _ in got] == sorted(model)
    assert {word: int(count) for word, count in got} == model


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text("abx \t", max_size=12), max_size=30), st.sampled_from([b"ab", b"x", b"a a"]), st.booleans())
def test_grep_keeps_each_matching_line_once_in_order(lines: list[str], pattern: bytes, last_break: bool) -> None:
    text = "\n".join(lines).encode() + (b"\n" if last_break else b"")
    out = run_kernel(grep, spec("grep", pattern=pattern, reducers=1), [text] if text else [])
    model = [line.encode() + b"\n" for line in text.decode().split("\n") if pattern in line.encode()]
    assert out == b"".join(model)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.integers(1, 5), st.integers(0, 2**32))
def test_sort_orders_records_bytewise_across_reducers_even_with_equal_keys(count: int, reducers: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(32, 36, size=(count, 10), dtype=np.uint8)  # few distinct keys: many ties
    rest = rng.integers(65, 91, size=(count, 88), dtype=np.uint8)
    records = np.concatenate([keys, rest, np.tile(np.frombuffer(b"\r\n", np.uint8), (count, 1))], axis=1)
    data = records.tobytes()
    splits = tuple(sorted(int(x) for x in rng.integers(0, 2**63, size=reducers - 1)))
    prefixes = sorted({int.from_bytes(data[i:i + 8], "big") for i in range(0, len(data), 100)})
    if prefixes and reducers > 1:  # splits among the real keys, so that every reducer gets some
        splits = tuple(sorted(prefixes[len(prefixes) * k // reducers] for k in range(1, reducers)))
    job = spec("sort", reducers=reducers, splits=splits)
    out = run_kernel(sort, job, [data[:len(data) // 200 * 100], data[len(data) // 200 * 100:]])
    model = sorted(data[i:i + 100] for i in range(0, len(data), 100))
    assert out == b"".join(model)


def test_sort_refuses_input_that_is_not_whole_records() -> None:
    with pytest.raises(BadRequest, match="whole"):
        sort.map_block(b"x" * 150, spec("sort", reducers=2))


def test_wordcount_reads_a_segment_holding_several_blocks_runs(tmp_path: Path) -> None:
    """A map of several blocks appends one run per block to each reducer's segment of the same file."""
    job = spec("wordcount", reducers=2)
    blocks = [b"a b a\nz\n", b"b b zed\n", b"a\n"]
    output = MapOutput("map-5", 2, tmp_path / "memory", tmp_path / "disk", spill_bytes=1_000_000)
    for block in blocks:
        for reducer, segment in enumerate(wordcount.map_block(block, job)):
            output.add(reducer, segment)
    location = output.finish()
    assert len(location.files) == 1
    out = b"".join(b"".join(wordcount.reduce(list(read_segments(location, r)), job)) for r in range(2))
    assert out == b"a\t3\nb\t3\nz\t1\nzed\t1\n"


# ------------------------------------------------------------------ kernels against the project's reference

raw_text = st.lists(st.sampled_from([b"a", b"b", b"ab", b" ", b" ", b"\n", b"\r\n", b"\r", b"ba"]), max_size=40).map(
    b"".join)


def kernel_canonical(app: str, files: list[Path], reducers: int, block: int, pattern: bytes = b"ab"):  # type: ignore[no-untyped-def]
    """The Canonical of `app`'s map and reduce kernels over `files`, read in blocks as a map reads them."""
    kernel = wordcount if app == "wordcount" else grep
    job = spec(app, reducers=reducers, pattern=pattern) if app == "grep" else spec(app, reducers=reducers)
    blocks = [piece for path in files for piece in read_blocks(str(path), block, kernel.UNIT)]
    out = run_kernel(kernel, job, blocks)
    assert out.endswith(b"\n") or not out
    return canonical_of_app_lines(app, out.split(b"\n")[:-1])  # lines end at \n only, as outputs reads them


@settings(max_examples=150, deadline=None)
@given(st.lists(raw_text, min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 16))
def test_wordcount_and_grep_equal_the_reference_on_any_line_endings(texts: list[bytes], reducers: int,
                                                                     block: int) -> None:
    """CRLF lines lose their `\\r` (Spark's line reader), a last line without `\\n` keeps its empty
    last word, a lone `\\r` stays: whatever `reference` says."""
    with tempfile.TemporaryDirectory(prefix="kw-ref-") as folder:
        files = []
        for number, text in enumerate(texts):
            files.append(Path(folder) / f"part-{number:05d}.txt")
            files[-1].write_bytes(text)
        assert kernel_canonical("wordcount", files, reducers, block) == reference.reference("wordcount", files)
        assert kernel_canonical("grep", files, 1, block) == reference.reference("grep", files, b"ab")


def test_crlf_lines_and_a_last_line_ending_in_a_space_count_like_the_reference(tmp_path: Path) -> None:
    (tmp_path / "part-00000.txt").write_bytes(b"foo bar\r\nbar\r\n")
    (tmp_path / "part-00001.txt").write_bytes(b"x y ")
    files = sorted(tmp_path.iterdir())
    out = run_kernel(wordcount, spec("wordcount", reducers=2),
                     [piece for path in files for piece in read_blocks(str(path), 1_000, b"\n")])
    assert out == b"\t1\nbar\t2\nfoo\t1\nx\t1\ny\t1\n"
    assert grep.matching_lines(b"foo bar\r\nbar\r\nbaz\rbar", b"bar") == b"foo bar\nbar\nbaz\rbar\n"
