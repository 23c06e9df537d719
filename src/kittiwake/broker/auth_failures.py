"""Failed authentications per source address: the limit on guessing, and logs that do not flood.

Sans-IO (the caller passes `now`, monotonic seconds, and writes the lines).
Each source address (the client's IP, any port) gets a window that opens at
its first failure and lasts `WINDOW_SECS`:

* the first failure of a window is logged at once, naming the user tried;
  later ones are only counted, and when the window closes one summary line
  says how many there were — a brute force of a thousand tries from one
  address is two log lines, not a thousand;
* after `MAX_CHECKS_PER_WINDOW` failures in a window, the source is
  *limited* until the window closes: its tries are refused without checking
  the token, so guessing costs the broker a dictionary lookup per try, never
  another key derivation. A correct token that the broker has already
  verified since it started is still accepted (that check is free).

At most `MAX_SOURCES` windows are kept; past that the oldest is closed early
(its summary is written), so memory stays bounded under a spoofed flood.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_SECS = 60.0
MAX_CHECKS_PER_WINDOW = 10
MAX_SOURCES = 10_000


@dataclass(slots=True)
class SourceWindow:
    """One source's failures since `started_at`."""

    started_at: float
    failures: int = 0
    refused: int = 0  # of the failures, those refused without a check (the source was limited)
    first_user: str = ""


class AuthFailures:
    """The failure windows of every source that failed lately."""

    def __init__(self, window_secs: float = WINDOW_SECS, max_checks: int = MAX_CHECKS_PER_WINDOW,
                 max_sources: int = MAX_SOURCES) -> None:
        self.window_secs = window_secs
        self.max_checks = max_checks
        self.max_sources = max_sources
        self._windows: dict[str, SourceWindow] = {}
        self.total = 0

    def __len__(self) -> int:
        return len(self._windows)

    def limited(self, source: str, now: float) -> bool:
        """Whether tries from `source` are refused unchecked for now."""
        window = self._windows.get(source)
        return window is not None and now - window.started_at < self.window_secs and window.failures >= self.max_checks

    def record(self, source: str, user: str, reason: str, now: float, *, refused: bool = False) -> list[str]:
        """Count one failure; returns the lines to log now (the first of a window, closed windows)."""
        self.total += 1
        lines: list[str] = []
        window = self._windows.get(source)
        if window is not None and now - window.started_at >= self.window_secs:
            lines += self._close(source)
            window = None
        if window is None:
            if len(self._windows) >= self.max_sources:
                lines += self._close(next(iter(self._windows)))
            window = self._windows[source] = SourceWindow(now, first_user=user)
            lines.append(
                f"authentication failed from {source} (user {user[:64]!r}: {reason}); further failures "
                f"from {source} are counted and summarised every {self.window_secs:.0f} s"
            )
        window.failures += 1
        if refused:
            window.refused += 1
        return lines

    def summaries(self, now: float) -> list[str]:
        """Close the windows that have run their time; their summary lines."""
        lines: list[str] = []
        for source in [s for s, w in self._windows.items() if now - w.started_at >= self.window_secs]:
            lines += self._close(source)
        return lines

    def _close(self, source: str) -> list[str]:
        window = self._windows.pop(source)
        more = window.failures - 1
        if more <= 0:
            return []
        refused = f", {window.refused} of them refused unchecked" if window.refused else ""
        return [f"{more} more failed authentications from {source} in {self.window_secs:.0f} s{refused}"]
