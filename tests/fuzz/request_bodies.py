"""Request bodies a fuzz input decodes into: well-typed most of the time, anything some of the time.

A body is built from the op's own `msgspec` Struct (`REQUEST_TYPES`), read
with `msgspec.inspect`, so every op and every field the protocol has is
fuzzed without a list to keep in step. Each field gets, by its type and
name, a value a client could mean (queue names, pids, lease ids the broker
handed out, lease seconds near the limits) and, one time in sixteen, any
msgpack value at all; fields are dropped, repeated, reordered and invented.
Well-typed bodies get past the decoder, so the engine sees requests that
mean something; the others hold the decoder to its error replies.

`Vocabulary` holds what the values are drawn from, and learns the leases
the broker grants so later dequeues, renewals and releases can name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import inspect as types

from kittiwake.model import fifo_pid
from kittiwake.protocol import REQUEST_TYPES

from .fuzz_input import FuzzInput
from .wire_values import any_value, encode_array, encode_map

_encode = msgspec.msgpack.Encoder().encode

OPS = tuple(REQUEST_TYPES)
OTHER_OPS = ("", "PING", "enqueue ", "nope", "\x00", "x" * 100)


@dataclass
class Vocabulary:
    """The values requests are made of, good and bad; `leases` grows with every lease granted."""

    queues: tuple[str, ...] = ("q", "g#a", "g#b", "q.dead", "g#a.dead", "r")
    bad_queues: tuple[str, ...] = ("", "a#b#c", "bad queue", "q" * 251, "q\x00")
    pids: tuple[str, ...] = ("a", "b", "c", fifo_pid(1), fifo_pid(2_000_000_000_000_000))
    bad_pids: tuple[str, ...] = ("", "\x00", "\n", "p" * 600)
    names: tuple[str, ...] = ("w1", "w2", "r1")
    bad_names: tuple[str, ...] = ("", "\n", "n" * 300)
    patterns: tuple[str, ...] = ("", "q", "g#.*", "q*", ".*dead", "(a|b)*c")
    bad_patterns: tuple[str, ...] = ("(", "[a-", "a{99999}")
    texts: tuple[str, ...] = ("", "boom", "é" * 100)
    bad_texts: tuple[str, ...] = ("\x00", "t" * 5000)
    header_keys: tuple[str, ...] = ("k", "kittiwake-dead-reason", "k2")
    bad_header_keys: tuple[str, ...] = ("", "bad key", "x" * 65)
    leases: list[tuple[str, str, int]] = field(default_factory=list)
    request_ids: list[int] = field(default_factory=list)

    def pick(self, source: FuzzInput, good: tuple[str, ...], bad: tuple[str, ...]) -> str:
        """A good value seven times in eight."""
        return source.choice(bad) if source.integer(0, 7) == 0 else source.choice(good)

    def learn_leases(self, tasks: Any) -> None:
        """Remember the (queue, pid, lease_id) of every task in a lease reply."""
        if not isinstance(tasks, list):
            return
        for task in tasks:
            if isinstance(task, dict) and isinstance(task.get("lease_id"), int):
                self.leases.append((task.get("queue"), task.get("pid"), task["lease_id"]))
        del self.leases[:-32]


def request_body(source: FuzzInput, vocabulary: Vocabulary, request_id: int) -> bytes:
    """One request body: an op (mostly a real one) and its fields."""
    op = source.choice(OPS) if source.integer(0, 15) else source.choice(OTHER_OPS)
    kind = REQUEST_TYPES.get(op)
    pairs: list[tuple[bytes, bytes]] = [(_encode("id"), _encode(request_id)), (_encode("op"), _encode(op))]
    if kind is not None:
        info = types.type_info(kind)
        assert isinstance(info, types.StructType)
        pairs += _fields(source, vocabulary, info, depth=0, skip=("id", "op"))  # both set above
    return _shuffle(source, vocabulary, pairs, depth=0)


def _fields(
    source: FuzzInput, vocabulary: Vocabulary, info: types.StructType, depth: int, skip: tuple[str, ...] = ()
) -> list[tuple[bytes, bytes]]:
    pairs = []
    for each in info.fields:
        if each.name in skip:
            continue
        # optional fields are sent half the time; a required one is left out one time in 32
        if not each.required and source.boolean():
            continue
        if each.required and source.integer(0, 31) == 0:
            continue
        pairs.append((_encode(each.encode_name), _value(source, vocabulary, each.type, each.name, depth)))
    return pairs


def _shuffle(source: FuzzInput, vocabulary: Vocabulary, pairs: list[tuple[bytes, bytes]], depth: int) -> bytes:
    """Now and then: swap two fields, repeat one, or add one nobody knows."""
    twist = source.integer(0, 15)
    if twist == 0 and len(pairs) > 1:
        first, second = source.integer(0, len(pairs) - 1), source.integer(0, len(pairs) - 1)
        pairs[first], pairs[second] = pairs[second], pairs[first]
    elif twist == 1 and pairs:
        key, _ = source.choice(pairs)
        pairs.append((key, any_value(source, depth + 1)))
    elif twist == 2:
        pairs.insert(source.integer(0, len(pairs)), (any_value(source, depth + 1), any_value(source, depth + 1)))
    return encode_map(pairs)


def _value(source: FuzzInput, vocabulary: Vocabulary, kind: types.Type, name: str, depth: int) -> bytes:
    """An encoded value for a field of type `kind` named `name`."""
    if source.integer(0, 15) == 0:
        return any_value(source, depth + 1)
    if isinstance(kind, types.UnionType):
        return _value(source, vocabulary, source.choice(kind.types), name, depth)
    if isinstance(kind, types.NoneType):
        return _encode(None)
    if isinstance(kind, types.BoolType):
        return _encode(source.boolean())
    if isinstance(kind, types.IntType):
        return _encode(_integer(source, vocabulary, name))
    if isinstance(kind, types.FloatType):
        return _encode(source.choice((0.0, 0.001, 0.5, 1.0, 30.0, 300.0, 43200.0, 43201.0, -1.0, float("nan"), float("inf"))))
    if isinstance(kind, types.StrType):
        return _encode(_text(source, vocabulary, name))
    if isinstance(kind, types.BytesType):
        return _encode(source.take(source.integer(0, 64)))
    if isinstance(kind, types.ListType):
        items = source.integer(0, 4 if depth == 0 else 2)
        return encode_array([_value(source, vocabulary, kind.item_type, name, depth + 1) for _ in range(items)])
    if isinstance(kind, types.TupleType):
        # the (queue, pid) pairs of after, unless and cancel
        names = ("queue", "pid") if len(kind.item_types) == 2 else (name,) * len(kind.item_types)
        return encode_array([_value(source, vocabulary, item, each, depth + 1) for item, each in zip(kind.item_types, names)])
    if isinstance(kind, types.DictType):
        count = source.integer(0, 3)
        return encode_map(
            [
                (
                    _encode(vocabulary.pick(source, vocabulary.header_keys, vocabulary.bad_header_keys)),
                    _encode(vocabulary.pick(source, vocabulary.texts, vocabulary.bad_texts)),
                )
                for _ in range(count)
            ]
        )
    if isinstance(kind, types.StructType):
        if name == "leases" or name in ("dequeue", "renew", "release"):
            return _lease_ref(source, vocabulary, kind, depth)
        return _shuffle(source, vocabulary, _fields(source, vocabulary, kind, depth + 1), depth + 1)
    return any_value(source, depth + 1)


def _lease_ref(source: FuzzInput, vocabulary: Vocabulary, kind: types.StructType, depth: int) -> bytes:
    """A lease the broker granted, most of the time when there is one."""
    if vocabulary.leases and source.integer(0, 3):
        queue, pid, lease_id = vocabulary.leases[-1 - source.integer(0, len(vocabulary.leases) - 1)]
        return encode_map([(_encode("queue"), _encode(queue)), (_encode("pid"), _encode(pid)), (_encode("lease_id"), _encode(lease_id))])
    return _shuffle(source, vocabulary, _fields(source, vocabulary, kind, depth + 1), depth + 1)


def _integer(source: FuzzInput, vocabulary: Vocabulary, name: str) -> int:
    if name == "lease_id" and vocabulary.leases and source.boolean():
        return source.choice(vocabulary.leases)[2] + source.integer(-1, 1)
    if name == "request_id" and vocabulary.request_ids and source.boolean():
        return source.choice(vocabulary.request_ids)
    return source.choice((0, 1, 2, 3, 10, 100, -1, 10_000, 10_001, 1_000_000, 2**31, 2**63 - 1, -(2**63)))


def _text(source: FuzzInput, vocabulary: Vocabulary, name: str) -> str:
    v = vocabulary
    if name in ("queue", "queues"):
        return v.pick(source, v.queues, v.bad_queues)
    if name in ("pid", "max_pid", "from_pid"):
        return v.pick(source, v.pids, v.bad_pids)
    if name in ("sender", "receiver", "worker"):
        return v.pick(source, v.names, v.bad_names)
    if name == "pattern":
        return v.pick(source, v.patterns, v.bad_patterns)
    return v.pick(source, v.texts, v.bad_texts)
