"""A fuzz input read front to back as a stream of choices.

Every target turns the fuzzer's bytes into what it feeds the code under test
through `FuzzInput`, so one byte string always means the same run: a crasher
saved by the fuzzer replays exactly under pytest, with or without atheris.
Past the end of the bytes every choice is its smallest value, so a generator
that loops `while not source.exhausted` always ends.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


class FuzzInput:
    """Choices read from the fuzzer's bytes."""

    __slots__ = ("_data", "_at")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    @property
    def exhausted(self) -> bool:
        return self._at >= len(self._data)

    @property
    def remaining(self) -> int:
        return max(0, len(self._data) - self._at)

    def byte(self) -> int:
        if self._at >= len(self._data):
            return 0
        value = self._data[self._at]
        self._at += 1
        return value

    def integer(self, low: int, high: int) -> int:
        """An integer in [low, high], from as many bytes as the range needs."""
        span = high - low
        if span <= 0:
            return low
        value = 0
        for _ in range((span.bit_length() + 7) // 8):
            value = (value << 8) | self.byte()
        return low + value % (span + 1)

    def boolean(self) -> bool:
        return self.byte() & 1 == 1

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def take(self, most: int) -> bytes:
        """Up to `most` bytes as they are (fewer near the end)."""
        chunk = self._data[self._at : self._at + max(0, most)]
        self._at += len(chunk)
        return chunk

    def rest(self) -> bytes:
        chunk = self._data[self._at :]
        self._at = len(self._data)
        return chunk
