# A log line per refusal lets anyone who can reach a listener fill the disk and slow the loop that writes it
# (a stranger on the relay once produced 742 lines in 3 s of a daemon's log). Refusals are counted by their
# owners; this module decides which of them also reach the log: the first of each kind, then at most one
# per kind per interval, carrying how many like it were left out since.
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

LOG_INTERVAL: Final = 60.0  # seconds between two lines of one kind


class ThrottledLog:
    """`log(kind, line)` writes `line` unless a line of `kind` was written less than `interval` ago."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}  # kind -> when its last line was written
        self._left_out: dict[str, int] = {}  # kind -> lines not written since

    def __call__(self, kind: str, line: str) -> bool:
        """Write `line` (True) or count it as left out (False)."""
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return False
        left_out = self._left_out.pop(kind, 0)
        if last is not None and left_out:
            line += f" (and {left_out} more like it in the last {now - last:.0f} s, not logged)"
        self._last[kind] = now
        self._write(line)
        return True


__all__ = ["LOG_INTERVAL", "ThrottledLog"]
