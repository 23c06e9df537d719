"""The unsynced contents of one file of the lazy filesystem (`support.lazyfs`), as plain data.

A file on the lazy filesystem is two layers: the synced file in the backing
directory (what a disk would hold after a power cut) and, over it, what was
written or truncated since the last fsync (what a page cache holds). This
module owns the upper layer. It does no I/O of its own: reads of the synced
layer go through a `read_synced(offset, size)` callable, and a sync hands the
blocks to write and the sizes to set back to the caller as a `SyncPlan`.

Theory of operation. The file is cut into blocks of `BLOCK_BYTES`. A write
copies each block it touches into memory (filled from the synced layer the
first time) and changes the copy. A truncation below the current size drops
the blocks past the new end and remembers the lowest end since the last sync
(`cut_at`): synced bytes at or past it are no longer part of the file, so they
read as zeros if the file grows again, as POSIX says a truncated-then-extended
file does. Reads take each block from memory when it is there, else from the
synced layer below `cut_at`, else zeros. A sync applies, in this order, the
truncation to `cut_at`, every block, and the final size; the result is exactly
what reads returned. A power cut drops the layer (or, with `torn_plan`, lets a
random share of its blocks reach the disk first, as the kernel's writeback
would have done before the lights went out).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

BLOCK_BYTES = 4096  # the page size: the unit in which a kernel writes dirty data back

ReadSynced = Callable[[int, int], bytes]


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What to do to the synced file so that it holds what a subset of the unsynced layer holds:
    truncate it to `truncate_to` (None: leave), write `blocks` (offset -> bytes), then set its
    size to `final_size` (None: leave)."""

    truncate_to: int | None
    blocks: dict[int, bytes]
    final_size: int | None

    @property
    def written_bytes(self) -> int:
        return sum(len(data) for data in self.blocks.values())


class UnsyncedFile:
    """Writes and truncations of one file since its last sync, over a synced file of `synced_size` bytes."""

    __slots__ = ("synced_size", "size", "cut_at", "blocks")

    def __init__(self, synced_size: int) -> None:
        if synced_size < 0:
            raise ValueError(f"synced_size must be >= 0, got {synced_size}")
        self.synced_size = synced_size  # bytes in the synced file
        self.size = synced_size  # the file's size as readers see it
        self.cut_at = synced_size  # synced bytes at or past this offset are truncated away
        self.blocks: dict[int, bytearray] = {}  # block index -> the block as readers see it

    @property
    def dirty(self) -> bool:
        """True if a sync would change the synced file."""
        return bool(self.blocks) or self.size != self.synced_size or self.cut_at != self.synced_size

    @property
    def unsynced_bytes(self) -> int:
        return len(self.blocks) * BLOCK_BYTES

    def read(self, offset: int, size: int, read_synced: ReadSynced) -> bytes:
        _check_range(offset, size)
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        parts = []
        position = offset
        while position < end:
            index, start = divmod(position, BLOCK_BYTES)
            stop = min(end - index * BLOCK_BYTES, BLOCK_BYTES)
            block = self.blocks.get(index)
            if block is None:
                block = self._synced_block(index, read_synced)
            parts.append(bytes(block[start:stop]))
            position = index * BLOCK_BYTES + stop
        return b"".join(parts)

    def write(self, offset: int, data: bytes, read_synced: ReadSynced) -> None:
        _check_range(offset, len(data))
        position = offset
        view = memoryview(data)
        while view:
            index, start = divmod(position, BLOCK_BYTES)
            block = self.blocks.get(index)
            if block is None:
                block = self.blocks[index] = self._synced_block(index, read_synced)
            count = min(BLOCK_BYTES - start, len(view))
            block[start:start + count] = view[:count]
            view = view[count:]
            position += count
        self.size = max(self.size, offset + len(data))

    def truncate(self, length: int) -> None:
        _check_range(length, 0)
        if length < self.size:
            self.cut_at = min(self.cut_at, length)
            last = length // BLOCK_BYTES  # the block holding the new end, if any byte of it remains
            for index in [i for i in self.blocks if i > last or (i == last and length % BLOCK_BYTES == 0)]:
                del self.blocks[index]
            block = self.blocks.get(last)
            if block is not None:
                # bytes past the end read as zeros if the file grows again
                block[length % BLOCK_BYTES:] = bytes(BLOCK_BYTES - length % BLOCK_BYTES)
        self.size = length

    def sync_plan(self) -> SyncPlan:
        """Everything: what an fsync writes."""
        return SyncPlan(
            truncate_to=self.cut_at if self.cut_at < self.synced_size else None,
            blocks={index * BLOCK_BYTES: self._clipped(index) for index in sorted(self.blocks)},
            final_size=self.size,
        )

    def torn_plan(self, rng: random.Random, keep_share: float) -> SyncPlan:
        """A random part, as if the kernel had written some dirty pages back before a power cut:
        each block reaches the disk with probability `keep_share`, and so does the truncation.
        A kept block past the synced end grows the file to hold it; the rest stays as it was."""
        if not 0.0 <= keep_share <= 1.0:
            raise ValueError(f"keep_share must be in [0, 1], got {keep_share}")
        blocks = {
            index * BLOCK_BYTES: self._clipped(index)
            for index in sorted(self.blocks)
            if rng.random() < keep_share
        }
        truncate = self.cut_at < self.synced_size and rng.random() < keep_share
        return SyncPlan(truncate_to=self.cut_at if truncate else None, blocks=blocks, final_size=None)

    def mark_synced(self) -> None:
        """The sync plan was applied: the synced file now holds what readers see."""
        self.blocks.clear()
        self.synced_size = self.size
        self.cut_at = self.size

    def _synced_block(self, index: int, read_synced: ReadSynced) -> bytearray:
        start = index * BLOCK_BYTES
        visible = max(0, min(BLOCK_BYTES, self.cut_at - start))
        data = read_synced(start, visible) if visible else b""
        block = bytearray(BLOCK_BYTES)
        block[:len(data)] = data
        return block

    def _clipped(self, index: int) -> bytes:
        start = index * BLOCK_BYTES
        return bytes(self.blocks[index][:max(0, min(BLOCK_BYTES, self.size - start))])


def _check_range(offset: int, size: int) -> None:
    if offset < 0 or size < 0:
        raise ValueError(f"offset and size must be >= 0, got {offset} and {size}")
