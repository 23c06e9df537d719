"""Cutting one queue into pid ranges of about equal size, from a handful of `peek` probes.

A batch read splits a large queue so that Spark reads its parts in parallel.
The broker has no "pid at rank r" request, only `peek(from_pid=x, n=1)`: the
smallest pid at or after `x`. So the cut is made in pid space, not by rank:

1. the first pid is one probe; the last is found a character at a time — the
   largest next character `c` for which a pid at or after `prefix + c` exists
   is a binary search over printable ASCII (seven probes), and a probe at
   `prefix + " "` (space is the smallest printable character) tells whether
   the last pid goes on at all. The walk stops a few characters after the
   last pid parts from the first (enough to place the cuts; for pids of
   digits, hex or letters and digits, such as FIFO pids and app task ids, not
   before the first pid's length up to `WHOLE_DEPTH`, since a carry makes the
   characters after the parting all zeros or nines), at a character beyond
   ASCII (then the bound is rough), or at `MAX_DEPTH`;
2. the first and last pids are read as numbers whose digits are their
   characters, in the base of the alphabet they are drawn from (`alphabet`:
   ten for the digits of FIFO pids, so a carry in the clock leaves no gap;
   sixteen for hex such as app task ids; letters and digits; else printable
   ASCII), and `parts - 1` points are spread evenly between them;
3. each point is snapped to the real pid at or after it (one probe each), and
   repeats are dropped.

FIFO pids (the broker's clock in microseconds), app task ids (hex of a
clock, then random), uuids, and other pids spread evenly over their alphabet
give parts of about equal size; any pids at all give ranges that cover the
queue exactly once — only their sizes can be uneven (names of one shape
clustered in a corner of printable ASCII, say). The pure functions take
the probe as an argument (`Probe`); `kittiwake.spark.batch_reader` passes one
that peeks at the broker.
"""

from __future__ import annotations

from collections.abc import Callable

Probe = Callable[[str | None], "str | None"]
"""The smallest pid at or after the argument (None: the first pid), or None past the last."""

MAX_DEPTH = 64  # characters of the last pid worth finding
DEPTH_AFTER_DIVERGENCE = 6  # characters past the first one where the last pid leaves the first
SMALLEST = " "  # the smallest printable character
ASCII_LOW, ASCII_HIGH = 0x20, 0x7E  # printable ASCII
BEYOND_ASCII = "\u00a1"  # the smallest printable character past ASCII (U+0080..U+00A0 are not)
ROUGH_TOP = "\U0010fffd"  # stands for "some character beyond ASCII" in a rough upper bound


def boundaries(probe: Probe, parts: int) -> list[str]:
    """Up to `parts - 1` real pids, sorted, that cut the queue into ranges [None, b1), [b1, b2), …,
    [bk, None) of about equal size; [] for an empty queue or `parts` ≤ 1."""
    if parts <= 1:
        return []
    first = probe(None)
    if first is None:
        return []
    last = last_pid(probe, first)
    cuts = set()
    for point in spread(first, last, parts):
        found = probe(point)
        if found is not None and found > first:
            cuts.add(found)
    return sorted(cuts)


def ranges(cuts: list[str]) -> list[tuple[str | None, str | None]]:
    """The ranges (start inclusive, stop exclusive; None is open) that `cuts` make."""
    edges: list[str | None] = [None, *cuts, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def last_pid(probe: Probe, first: str) -> str:
    """The last pid, or a string close to it from below (see the module docstring)."""
    prefix = ""
    diverged_at: int | None = None
    # pids of digits, hex or letters and digits (FIFO pids, app task ids: counters) are walked to
    # the first pid's length (at most WHOLE_DEPTH): across a carry (…0999… to …1000…) the
    # characters after the divergence say nothing of the distance until the last of them
    whole = min(len(first), WHOLE_DEPTH) if _ranked_class(first) is not None else 0
    while len(prefix) < MAX_DEPTH:
        if probe(prefix + SMALLEST) is None:
            return prefix  # nothing sorts after the prefix: it is the last pid
        if probe(prefix + BEYOND_ASCII) is not None:
            return prefix + ROUGH_TOP
        low, high = ASCII_LOW, ASCII_HIGH  # probe(prefix + chr(low)) holds: the space found above
        while low < high:
            middle = (low + high + 1) // 2
            if probe(prefix + chr(middle)) is not None:
                low = middle
            else:
                high = middle - 1
        prefix += chr(low)
        if diverged_at is None and not first.startswith(prefix):
            diverged_at = len(prefix)
        if diverged_at is not None and len(prefix) - diverged_at >= DEPTH_AFTER_DIVERGENCE and len(prefix) >= whole:
            return prefix
    return prefix


def spread(first: str, last: str, parts: int) -> list[str]:
    """`parts - 1` strings evenly spaced between `first` and `last`, each cut short before any
    character a pid cannot hold (so each may be probed)."""
    length = min(max(len(first), len(last)), MAX_DEPTH)
    digits = alphabet(first[:length] + last[:length])
    base = digits.size

    def value(text: str) -> int:
        # a string shorter than `length` reads as if padded with the alphabet's smallest character
        number = 0
        for index in range(length):
            number = number * base + (digits.digit(text[index]) if index < len(text) else 0)
        return number

    low, high = value(first), value(last)
    if high <= low:
        return []
    points = []
    for step in range(1, parts):
        number = low + (high - low) * step // parts
        places = []
        for _ in range(length):
            number, digit = divmod(number, base)
            places.append(digit)
        text = ""
        for digit in reversed(places):
            character = digits.character(digit)
            if not character.isprintable():
                break
            text += character
        if text:
            points.append(text)
    return points


WHOLE_DEPTH = 32
RANKED_CLASSES = (  # each in code-point order, so that rank order is sort order
    "0123456789",
    "0123456789abcdef",
    "0123456789ABCDEF",
    "-0123456789abcdef",  # uuids
    "0123456789abcdefghijklmnopqrstuvwxyz",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
)


class Alphabet:
    """The characters pids like these are drawn from, as the digits of a number: a class of
    `RANKED_CLASSES` (each character its rank), else a span of code points."""

    def __init__(self, characters: str | None, low: int = 0, high: int = 0) -> None:
        self._characters = characters
        self._ranks = {character: rank for rank, character in enumerate(characters)} if characters else {}
        self._low = low
        self.size = len(characters) if characters else high - low + 1

    def digit(self, character: str) -> int:
        if self._characters is not None:
            return self._ranks[character]
        return ord(character) - self._low

    def character(self, digit: int) -> str:
        if self._characters is not None:
            return self._characters[digit]
        return chr(self._low + digit)


def _ranked_class(text: str) -> str | None:
    present = set(text)
    return next((characters for characters in RANKED_CLASSES if present <= set(characters)), None)


def alphabet(text: str) -> Alphabet:
    """The smallest class of `RANKED_CLASSES` holding every character of `text` (FIFO pids: the ten
    digits; app task ids: lowercase hex), so that evenly spread pids — counters above all, whose
    carries leave no gaps between the points so — read as evenly spread numbers; else printable
    ASCII when `text` is all of it; else every code point from its smallest to its largest."""
    ranked = _ranked_class(text)
    if ranked is not None:
        return Alphabet(ranked)
    code_points = [ord(c) for c in text]
    if all(ASCII_LOW <= code_point <= ASCII_HIGH for code_point in code_points):
        return Alphabet(None, ASCII_LOW, ASCII_HIGH)
    return Alphabet(None, min(code_points), max(code_points))
