"""The commit log's format, sans-IO: a versioned header, checksummed records, mutations as bytes.

TaskMaster §5.3 keeps an ordered list of ApplyAtoms, each with a sequential
ticket, in front of its data store; the store is brought up to date behind it
and records the last ticket it applied, so a replay applies each atom once.
This module is only the bytes of that log; the file is `log_file`'s, the
store that applies it `sqlite`'s.

File = header, then records:

* header (24 bytes): magic ``KWCLOG\\r\\n`` (8), format version (u32), the
  ticket of the first record (u64), crc32 of the 20 bytes before it (u32).
  A log is only ever made whole (written to a temporary name, synced, renamed),
  so a short or damaged header is an error, never a tail to drop.
* record: body length (u32), blake2b-64 of the length and the body (8),
  body = ticket (u64) then the payload. Tickets follow one another from the
  header's first ticket.

Reading (`scan`) stops at the first record that is short, fails its checksum,
claims more than `MAX_RECORD_BYTES` or carries a ticket out of sequence: that
and everything after it is a torn tail — what a crash or a power cut left of
an append that was never acknowledged, since the reply waits for the sync of
the whole record. It is reported (`Scan.torn_bytes`) and dropped, never
applied. Unless a whole record of the next ticket follows the bad one where
its length says it ends: appends are sequential and a failed one is cut back
and rewritten under the same ticket, so that record was appended after the
bad one had been synced — the bad one was acknowledged and is damaged, not
torn. `Scan.damaged` then names it, and the store refuses to drop it (and
what follows) silently.

A pass whose record would pass `MAX_RECORD_BYTES` is never logged: the store
commits it straight into its database (`sqlite`).

Payload = the mutations of one group-commit pass (`engine.mutations`), as a
msgpack array of arrays, each led by a kind number (`encode_mutations`). The
file's version covers this encoding too: a change to either is a new version.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgspec

from kittiwake.engine.mutations import (
    DeleteEdges,
    DeleteTask,
    DropQueue,
    Mutation,
    PutEdge,
    PutTask,
    SetCounter,
    SetLease,
    SetWaiting,
)
from kittiwake.model import Task

MAGIC = b"KWCLOG\r\n"
VERSION = 1
HEADER = struct.Struct("<8sIQ")  # magic, version, first ticket
HEADER_CRC = struct.Struct("<I")
HEADER_BYTES = HEADER.size + HEADER_CRC.size
RECORD_HEAD = struct.Struct("<I8s")  # body length, blake2b-64 of length + body
TICKET = struct.Struct("<Q")
RECORD_HEAD_BYTES = RECORD_HEAD.size
MAX_RECORD_BYTES = 1 << 30  # a length above this is damage, not a record


class LogFormatError(ValueError):
    """The file is not a commit log this Kittiwake can read (magic, version or header damaged)."""


@dataclass(slots=True)
class Scan:
    """What a log holds: its whole records in order, where they end, and the bytes of a torn tail."""

    first_ticket: int
    records: list[tuple[int, bytes]] = field(default_factory=list)  # (ticket, payload)
    end: int = HEADER_BYTES  # offset just past the last whole record
    torn_bytes: int = 0  # bytes after `end`: dropped
    damaged: int | None = None  # the ticket of a bad record with a whole record of the next ticket after it

    def damage_message(self, path: object) -> str:
        """What to tell an operator about `damaged`."""
        return (
            f"the commit log {path} is damaged: the record of ticket {self.damaged} at byte {self.end} fails its "
            f"checks while the record of ticket {(self.damaged or 0) + 1} after it is whole, so acknowledged "
            "changes would be lost if it were dropped as a torn tail. Keep a copy of the file; moving it aside "
            f"starts the store without the records from ticket {self.damaged} on."
        )

    @property
    def next_ticket(self) -> int:
        return self.records[-1][0] + 1 if self.records else self.first_ticket


def encode_header(first_ticket: int) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, first_ticket)
    return head + HEADER_CRC.pack(zlib.crc32(head))


def decode_header(data: bytes) -> int:
    """The first ticket a header announces; LogFormatError unless it is a whole header of this version."""
    if len(data) < HEADER_BYTES:
        raise LogFormatError(f"the commit log's header is cut short ({len(data)} of {HEADER_BYTES} bytes)")
    magic, version, first_ticket = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise LogFormatError("not a Kittiwake commit log (bad magic)")
    (crc,) = HEADER_CRC.unpack_from(data, HEADER.size)
    if crc != zlib.crc32(data[: HEADER.size]):
        raise LogFormatError("the commit log's header is damaged (checksum)")
    if version != VERSION:
        raise LogFormatError(f"commit log format version {version}; this Kittiwake reads version {VERSION}")
    return int(first_ticket)


def _digest(length: bytes, body: bytes | memoryview) -> bytes:
    hasher = hashlib.blake2b(length, digest_size=8)
    hasher.update(body)
    return hasher.digest()


def fits(payload: bytes) -> bool:
    """Whether a record of `payload` can be read back (`scan` takes a longer one for damage)."""
    return TICKET.size + len(payload) <= MAX_RECORD_BYTES


def encode_record(ticket: int, payload: bytes) -> bytes:
    if not fits(payload):
        raise LogFormatError(f"a record of {len(payload)} bytes is over the log's {MAX_RECORD_BYTES}")
    body = TICKET.pack(ticket) + payload
    length = struct.pack("<I", len(body))
    return length + _digest(length, body) + body


def scan(data: bytes) -> Scan:
    """The header and every whole record of `data` (a log file's bytes), torn tail reported, not applied."""
    first = decode_header(data)
    result = Scan(first)
    view = memoryview(data)
    offset = HEADER_BYTES
    expected = first
    size = len(data)
    while True:
        record = _record_at(data, view, offset, expected)
        if record is None:
            break
        result.records.append((expected, record[0]))
        expected += 1
        offset = record[1]
    result.end = offset
    result.torn_bytes = size - offset
    if offset + RECORD_HEAD_BYTES <= size:
        length = RECORD_HEAD.unpack_from(data, offset)[0]
        after = offset + RECORD_HEAD_BYTES + length
        if TICKET.size <= length <= MAX_RECORD_BYTES and _record_at(data, view, after, expected + 1) is not None:
            result.damaged = expected
    return result


def _record_at(data: bytes, view: memoryview, offset: int, ticket: int) -> tuple[bytes, int] | None:
    """The payload of a whole record of `ticket` at `offset`, and where it ends; None if there is none."""
    size = len(data)
    if offset + RECORD_HEAD_BYTES > size:
        return None
    length, digest = RECORD_HEAD.unpack_from(data, offset)
    start = offset + RECORD_HEAD_BYTES
    if length < TICKET.size or length > MAX_RECORD_BYTES or start + length > size:
        return None
    body = view[start : start + length]
    if _digest(data[offset : offset + 4], body) != digest:
        return None
    if TICKET.unpack_from(body)[0] != ticket:
        return None
    return bytes(body[TICKET.size :]), start + length


# ------------------------------------------------------------- mutations

_PUT, _LEASE, _WAITING, _EDGE, _DELETE_EDGES, _DELETE, _DROP, _COUNTER = range(8)
_encoder = msgspec.msgpack.Encoder()


def encode_mutations(mutations: Sequence[Mutation]) -> bytes:
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    for m in mutations:
        if isinstance(m, PutTask):
            t = m.task
            append((
                _PUT, t.queue, t.pid, t.data, t.enqueued_at, t.sender, t.receiver, t.headers, t.max_attempts,
                t.attempts, t.deliveries, t.lease_id, t.lease_owner, t.lease_peer, t.leased_at,
                t.lease_expires_at, t.waiting_on, t.children, t.progress, t.note,
            ))
        elif isinstance(m, SetLease):
            append((
                _LEASE, m.queue, m.pid, m.attempts, m.deliveries, m.lease_id, m.lease_owner, m.lease_peer,
                m.leased_at, m.lease_expires_at, m.progress, m.note,
            ))
        elif isinstance(m, DeleteTask):
            append((_DELETE, m.queue, m.pid))
        elif isinstance(m, SetWaiting):
            append((_WAITING, m.queue, m.pid, m.waiting_on, m.children))
        elif isinstance(m, PutEdge):
            append((_EDGE, m.queue, m.pid, m.child_queue, m.child_pid))
        elif isinstance(m, DeleteEdges):
            append((_DELETE_EDGES, m.queue, m.pid))
        elif isinstance(m, DropQueue):
            append((_DROP, m.queue))
        elif isinstance(m, SetCounter):
            append((_COUNTER, m.name, m.value))
        else:
            raise TypeError(f"not a mutation: {m!r}")
    return _encoder.encode(rows)


def decode_mutations(payload: bytes) -> list[Mutation]:
    rows = msgspec.msgpack.decode(payload)
    mutations: list[Mutation] = []
    append = mutations.append
    for row in rows:
        kind = row[0]
        if kind == _PUT:
            append(PutTask(Task(*row[1:])))
        elif kind == _LEASE:
            append(SetLease(*row[1:]))
        elif kind == _DELETE:
            append(DeleteTask(row[1], row[2]))
        elif kind == _WAITING:
            append(SetWaiting(*row[1:]))
        elif kind == _EDGE:
            append(PutEdge(*row[1:]))
        elif kind == _DELETE_EDGES:
            append(DeleteEdges(row[1], row[2]))
        elif kind == _DROP:
            append(DropQueue(row[1]))
        elif kind == _COUNTER:
            append(SetCounter(row[1], row[2]))
        else:
            raise LogFormatError(f"unknown mutation kind {kind} in a commit log record")
    return mutations
