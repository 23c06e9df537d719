"""Fusion: a Spark step's output DataFrame handed to the next Spark step on the same worker, in memory.

Without fusion a Spark step's output goes to Parquet and its consumer reads
the Parquet back. With it, the worker that ran the producer keeps the
DataFrame cached in its session, keyed by the output's path, and a consumer
job that this worker leases next reads the cached DataFrame instead of the
files: no Parquet decode, no file listing, no footer reads.

Which outputs fuse: a DataFrame returned on an output port of a Spark step
that fuses this way (``Flow(..., fuse="cache")`` — or True — for every step,
``@flow.step(..., fuse="cache")`` for one; off by default, see the cost below;
``fuse="plan"`` is the other kind, `kittiwake.flow.plan_fusion`) that feeds at
least one Spark step that also fuses so (a python consumer gets the Parquet's
path anyway); a worker started with ``--no-fuse`` fuses nothing. Any key
shape fuses: a plain consumer at the same key, a merge consumer taking every
part of a sequence (the parts this worker made come from memory, the rest
from Parquet). A Dataset a step writes and returns itself does not: the
worker does not see the DataFrame behind it.

The two rules kept:

* durability: the producer's Parquet is written exactly as without fusion,
  before the job's update announces its tokens (the DataFrame is persisted,
  ``MEMORY_AND_DISK``, and written from the cache as it fills: one
  computation feeds both). A run killed at any point resumes from what its
  tokens name, which is always on disk; the cache dies with its worker and
  is only ever a faster way to read what the Parquet holds;
* locality: only this worker's session holds the cache; a consumer leased
  by another worker, another machine, or this worker after a restart reads
  the Parquet. A cached output is used only while the files at its path are
  the ones written with it (the listing with sizes and modification times is
  compared); no other attempt writes that path (each writes a folder of its
  own: `tokens.output_path`), but its files may still be changed or removed.

Bounded: an output is dropped (unpersisted) once each consumer step that
fuses has read it in a job that finished, when more than `max_entries` are
held (the oldest first) and after `max_age_secs` unread (its consumer ran
elsewhere). What it costs: the producer builds the in-memory columnar cache
while it writes, and the cache holds memory (spilling to disk) until read.

Why it is off by default (measured, `kittiwake bench flows`, the demo's
300 MB on two cores): building the columnar cache of a freshly cleaned shard
costs the Spark JVM more CPU than its consumer saves by not decoding the
Parquet, which the OS still holds in its page cache (Spark JVM CPU per pass
81 s fused against 71 s unfused). Fusion pays where reading back is dear: an
output on remote storage (HDFS, S3), or read by several consumer steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kittiwake.flow.dataset import Dataset
from kittiwake.flow.definition import FUSE_CACHE, FlowDefinition, Step
from kittiwake.flow.fingerprints import files_of, local_path_of

log = logging.getLogger("kittiwake.flow.fusion")

DEFAULT_MAX_ENTRIES = 32
DEFAULT_MAX_AGE_SECS = 600.0


def fused_readers(flow: FlowDefinition, step: Step, port: str) -> int:
    """How many consumer steps of `step`'s `port` read it fused (0: the output is not kept)."""
    if step.engine != "spark" or step.fuse != FUSE_CACHE:
        return 0
    return sum(1 for consumer in flow.consumers(step.output(port))
               if consumer.step.engine == "spark" and consumer.step.fuse == FUSE_CACHE)


@dataclass(slots=True)
class _Entry:
    frame: Any
    readers: int
    kept_at: float
    files: list[list[Any]] | None = None  # the Parquet's listing once written; None while writing
    taken: int = 0
    readers_done: set[str] = field(default_factory=set)


class FusedOutputs:
    """The outputs one worker's session keeps for its next steps (see the module docstring)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_age_secs: float = DEFAULT_MAX_AGE_SECS) -> None:
        self.max_entries = max_entries
        self.max_age_secs = max_age_secs
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def keep(self, path: str, frame: Any, readers: int) -> Any:
        """Persist `frame`, about to be written at `path`, for `readers` consumer steps; returns the
        persisted DataFrame, which the caller writes (then calls `written`, or `drop` on failure)."""
        from pyspark import StorageLevel

        persisted = frame.persist(StorageLevel.MEMORY_AND_DISK)
        with self._lock:
            old = self._entries.pop(path, None)
            self._entries[path] = _Entry(persisted, readers, time.monotonic())
            stale = self._expired_locked()
        for entry in ([old] if old is not None and old.frame is not persisted else []) + stale:
            _unpersist(entry.frame)
        return persisted

    def written(self, path: str) -> None:
        """The Parquet at `path` is written: the entry may be read from now on."""
        listing = files_of(local_path_of(Dataset("parquet", path)) or path)
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                entry.files = listing

    def take(self, dataset: Dataset, reader: str) -> Any:
        """The cached DataFrame of `dataset` for consumer step `reader`, or None: not kept here,
        not written yet, or the files at its path changed since."""
        if dataset.kind not in ("parquet", "path") or dataset.uri is None:
            return None
        with self._lock:
            entry = self._entries.get(dataset.uri)
            files = entry.files if entry is not None else None
        if entry is None or files is None:
            self.misses += 1
            return None
        local = local_path_of(dataset)
        if local is None or files_of(local) != files:
            self.drop(dataset.uri)
            self.misses += 1
            return None
        with self._lock:
            entry.taken += 1
            self._entries.move_to_end(dataset.uri)
        self.hits += 1
        return entry.frame

    def finished(self, uris: list[str], reader: str) -> None:
        """Consumer step `reader` finished a job that took `uris`: drop those every reader has read."""
        dropped: list[_Entry] = []
        with self._lock:
            for uri in uris:
                entry = self._entries.get(uri)
                if entry is None:
                    continue
                entry.readers_done.add(reader)
                if len(entry.readers_done) >= entry.readers:
                    dropped.append(self._entries.pop(uri))
        for entry in dropped:
            _unpersist(entry.frame)

    def drop(self, path: str) -> None:
        with self._lock:
            entry = self._entries.pop(path, None)
        if entry is not None:
            _unpersist(entry.frame)

    def clear(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            _unpersist(entry.frame)

    def _expired_locked(self) -> list[_Entry]:
        now = time.monotonic()
        expired = [path for path, entry in self._entries.items()
                   if entry.files is not None and now - entry.kept_at > self.max_age_secs]
        dropped = [self._entries.pop(path) for path in expired]
        while len(self._entries) > self.max_entries:
            dropped.append(self._entries.popitem(last=False)[1])
        return dropped


def _unpersist(frame: Any) -> None:
    try:
        frame.unpersist(blocking=False)
    except Exception as error:  # the session may be stopping
        log.debug("unpersisting a fused output: %s", error)
