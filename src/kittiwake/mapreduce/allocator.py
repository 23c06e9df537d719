"""How the MapReduce app's processes ask the C allocator to keep freed memory for reuse.

A map kernel allocates a few arrays of about a megabyte per block (the block
with its line breaks replaced, the word offsets, the grouped words) and frees
them before the next block. glibc's malloc serves every request past its
mmap threshold (128 KB until it adapts) with fresh pages from the kernel and
gives memory back to the kernel when the top of the heap is free past its trim
threshold, so each block paid for faulting in and zeroing its pages again.
Measured on a 2-core VM, 300 blocks of 1 MB in one process: a word-count map
spent 6.5 ms of CPU per MB with glibc's defaults, 5.1 ms with
`keep_freed_memory`, and 4.2 ms with `wordcount.map_block`'s numpy grouping
too (docs/performance.md, MapReduce).

`keep_freed_memory` raises both thresholds (`mallopt`): requests under
`MMAP_THRESHOLD_BYTES` come from the heap and freed memory stays in the
process, up to `TRIM_THRESHOLD_BYTES` free at the top of the heap, for the
next block. A process keeps its high-water mark of such memory (as a Python
process mostly does anyway); larger buffers, such as a sort reducer's, are
still mapped and unmapped. Elsewhere than glibc (musl, macOS) it does
nothing. Only the MapReduce app calls it (`tasks.make_app`): it changes the
whole process, so Kittiwake's worker does not impose it on other apps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

MMAP_THRESHOLD_BYTES = 64 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process; whether it took them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
