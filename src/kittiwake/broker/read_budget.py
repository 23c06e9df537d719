"""The read budget: how many bytes of unfinished frames the broker holds, across all connections.

A frame is cut out of the stream only once all of it has arrived; until then
its bytes sit in its connection's `FrameReader`. Unbounded, connections that
each announce a 16 MiB frame and send most of it would hold connections ×
16 MiB. The budget counts the bytes each reader actually holds — never what a
length prefix announces, so four bytes of prefix cost four bytes — and past a
line stops reading from connections in the middle of a frame
(`pause_reading`: their bytes wait in the kernel's buffers and then in the
client, which is backpressure) until frames complete or connections go.

Theory of operation. `limit` is the budget; `held` the bytes held now.

* Below the *line*, `limit - 2 × max_frame`, every connection reads in full
  reads (`FULL_READ_BYTES`).
* Above the line, a connection in the middle of a frame stops, and the
  others read `SMALL_READ_BYTES` at a time (the size of the buffer the
  connection offers its transport), so a client sending whole small requests
  is still served, while one starting a large frame adds one small read
  before it stops.
* So that frames still complete, one stopped connection at a time is the
  *finisher*: it reads on, whatever `held`, until its frame is whole. It is
  chosen only when `held` plus the bytes its frame still misses stays within
  `limit`, preferring the frame that misses the fewest bytes — whole small
  requests split across reads go first. Many large frames arriving together
  complete one after another instead of all stopping half done.
* A finisher that receives nothing between two `check_progress` calls (the
  server makes one a second) is stopped again and goes behind the others, so
  a client stalling mid-frame cannot keep the turn; frames that never
  complete are cut by the frame timeout (`timeouts`), which frees their bytes.
* As `held` falls back under the line, stopped connections resume in the
  order they stopped.

Bound: `held` stays within `limit`, plus one full read (the one that crossed
the line), plus one small read per connection — whatever clients send.

Sans-IO: the budget tells readers to stop and resume through `hold_for_budget`,
tells them how much to read through `read_bytes`, and reads no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

FULL_READ_BYTES = 256 * 1024
SMALL_READ_BYTES = 4 * 1024


class Reader(Protocol):
    """A connection as the budget sees it."""

    def hold_for_budget(self, held: bool) -> None:
        """Stop (True) or resume (False) reading from the socket for the budget."""


@dataclass(slots=True)
class Holding:
    """What one reader holds: `held_bytes` of a frame of `frame_bytes` (prefix included)."""

    held_bytes: int
    frame_bytes: int

    @property
    def missing_bytes(self) -> int:
        return max(0, self.frame_bytes - self.held_bytes)


class ReadBudget:
    """Bytes of unfinished frames held by all connections, against a limit."""

    def __init__(self, limit_bytes: int, max_frame: int) -> None:
        if limit_bytes < 1 or max_frame < 1:
            raise ValueError("the read budget and the max frame must be positive")
        self.limit_bytes = limit_bytes
        self.line_bytes = max(0, limit_bytes - 2 * max_frame)
        self.held_bytes = 0
        self.finisher: Reader | None = None
        self._holdings: dict[Reader, Holding] = {}
        self._stopped: dict[Reader, None] = {}  # in the order they stopped
        self._stalls: dict[Reader, int] = {}
        self._finisher_progress = -1

    @property
    def stopped(self) -> list[Reader]:
        return list(self._stopped)

    def read_bytes(self, reader: Reader) -> int:
        """How much `reader` may read from its socket at once now."""
        if self.held_bytes <= self.line_bytes or reader is self.finisher:
            return FULL_READ_BYTES
        return SMALL_READ_BYTES

    def charge(self, reader: Reader, held_bytes: int, frame_bytes: int, completed: bool) -> None:
        """`reader` now holds `held_bytes` of a frame of `frame_bytes` (both 0 between frames);
        `completed`: it finished at least one frame since its last charge."""
        holding = self._holdings.pop(reader, None)
        previous = holding.held_bytes if holding is not None else 0
        if held_bytes:
            self._holdings[reader] = Holding(held_bytes, frame_bytes)
        self.held_bytes += held_bytes - previous
        finished = False
        if completed or not held_bytes:
            self._stalls.pop(reader, None)
            if reader is self.finisher:
                self.finisher, finished = None, True
        if held_bytes and self.held_bytes > self.line_bytes and reader is not self.finisher:
            self._stop(reader)
            # nothing stopped before fitted the room left, which has only shrunk since: this one may
            if self.finisher is None and self._missing(reader) <= self.limit_bytes - self.held_bytes:
                self._make_finisher(reader)
        elif held_bytes < previous or finished:
            self._admit()

    def forget(self, reader: Reader) -> None:
        """The reader's connection is gone: its bytes are free."""
        holding = self._holdings.pop(reader, None)
        if holding is not None:
            self.held_bytes -= holding.held_bytes
        self._stopped.pop(reader, None)
        self._stalls.pop(reader, None)
        if reader is self.finisher:
            self.finisher = None
        self._admit()

    def check_progress(self) -> None:
        """A finisher that received nothing since the last check stops and goes behind the others."""
        finisher = self.finisher
        if finisher is None:
            return
        holding = self._holdings.get(finisher)
        held = holding.held_bytes if holding is not None else 0
        if held != self._finisher_progress:
            self._finisher_progress = held
            return
        self.finisher = None
        self._stalls[finisher] = self._stalls.get(finisher, 0) + 1
        self._stop(finisher)
        self._admit()

    # ------------------------------------------------------------------ rules

    def _stop(self, reader: Reader) -> None:
        if reader not in self._stopped:
            self._stopped[reader] = None
            reader.hold_for_budget(True)

    def _resume(self, reader: Reader) -> None:
        del self._stopped[reader]
        reader.hold_for_budget(False)

    def _missing(self, reader: Reader) -> int:
        holding = self._holdings.get(reader)
        return holding.missing_bytes if holding is not None else 0

    def _admit(self) -> None:
        """Resume what the bytes held now allow (see the module docstring)."""
        if not self._stopped:
            return
        room = self.line_bytes - self.held_bytes
        for reader in list(self._stopped):
            if room < 0:
                break
            self._resume(reader)
            room -= min(FULL_READ_BYTES, self._missing(reader))
        if self.finisher is not None or not self._stopped:
            return
        room = self.limit_bytes - self.held_bytes
        candidates = [reader for reader in self._stopped if self._missing(reader) <= room]
        if candidates:
            self._make_finisher(min(candidates, key=lambda reader: (self._stalls.get(reader, 0), self._missing(reader))))

    def _make_finisher(self, reader: Reader) -> None:
        self._resume(reader)
        self.finisher = reader
        self._finisher_progress = -1
