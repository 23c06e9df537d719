"""The unsynced layer of a lazy file against a plain bytearray: reads see every write, a sync writes
exactly what reads saw, a torn plan writes only whole blocks of it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.lazy_files import BLOCK_BYTES, SyncPlan, UnsyncedFile


class Disk:
    """A synced file in memory."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.data[offset:offset + size])

    def apply(self, plan: SyncPlan) -> None:
        if plan.truncate_to is not None:
            del self.data[plan.truncate_to:]
        for offset, block in plan.blocks.items():
            end = offset + len(block)
            if end > len(self.data):
                self.data.extend(bytes(end - len(self.data)))
            self.data[offset:end] = block
        if plan.final_size is not None:
            self.resize(plan.final_size)

    def resize(self, size: int) -> None:
        del self.data[size:]
        self.data.extend(bytes(size - len(self.data)))


def test_reads_see_unsynced_writes_over_synced_data() -> None:
    disk = Disk(b"a" * 10_000)
    file = UnsyncedFile(len(disk.data))
    file.write(5000, b"b" * 4000, disk.read)
    expected = b"a" * 5000 + b"b" * 4000 + b"a" * 1000
    assert file.read(0, 20_000, disk.read) == expected
    assert disk.data == b"a" * 10_000  # nothing reached the disk
    disk.apply(file.sync_plan())
    file.mark_synced()
    assert bytes(disk.data) == expected and not file.dirty


def test_synced_bytes_truncated_away_read_as_zeros_when_the_file_grows_again() -> None:
    disk = Disk(b"x" * 9000)
    file = UnsyncedFile(9000)
    file.truncate(100)
    file.truncate(9000)
    assert file.read(0, 9000, disk.read) == b"x" * 100 + bytes(8900)
    disk.apply(file.sync_plan())
    assert bytes(disk.data) == b"x" * 100 + bytes(8900)


def test_a_torn_plan_writes_whole_blocks_and_all_or_none_by_share() -> None:
    file = UnsyncedFile(0)
    disk = Disk()
    file.write(0, bytes(range(256)) * 64, disk.read)  # four blocks
    assert file.torn_plan(random.Random(1), 0.0).blocks == {}
    everything = file.torn_plan(random.Random(1), 1.0)
    assert sorted(everything.blocks) == [0, BLOCK_BYTES, 2 * BLOCK_BYTES, 3 * BLOCK_BYTES]
    some = file.torn_plan(random.Random(7), 0.5)
    assert all(data == everything.blocks[offset] for offset, data in some.blocks.items())


@pytest.mark.parametrize("call", [
    lambda f: f.write(-1, b"x", Disk().read),
    lambda f: f.read(0, -1, Disk().read),
    lambda f: f.truncate(-5),
    lambda f: f.torn_plan(random.Random(), 1.5),
    lambda f: UnsyncedFile(-1),
])
def test_bad_arguments_are_refused(call) -> None:
    with pytest.raises(ValueError):
        call(UnsyncedFile(0))


operation = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 3 * BLOCK_BYTES), st.binary(min_size=1, max_size=2 * BLOCK_BYTES)),
    st.tuples(st.just("truncate"), st.integers(0, 4 * BLOCK_BYTES)),
    st.tuples(st.just("sync")),
)


@settings(max_examples=150, deadline=None)
@given(initial=st.binary(max_size=2 * BLOCK_BYTES), operations=st.lists(operation, max_size=12))
def test_matches_a_bytearray_and_a_sync_writes_what_reads_saw(initial: bytes, operations: list[tuple]) -> None:
    disk = Disk(initial)
    file = UnsyncedFile(len(initial))
    model = bytearray(initial)  # what readers must see
    for op in operations:
        if op[0] == "write":
            _, offset, data = op
            file.write(offset, data, disk.read)
            if offset > len(model):
                model.extend(bytes(offset - len(model)))
            model[offset:offset + len(data)] = data
        elif op[0] == "truncate":
            file.truncate(op[1])
            del model[op[1]:]
            model.extend(bytes(op[1] - len(model)))
        else:
            disk.apply(file.sync_plan())
            file.mark_synced()
            assert bytes(disk.data) == bytes(model)
        assert file.size == len(model)
        assert file.read(0, len(model) + 10, disk.read) == bytes(model)
    disk.apply(file.sync_plan())
    assert bytes(disk.data) == bytes(model)
