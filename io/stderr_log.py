# A daemon's or a relay's log line can quote what another party sent (a paired machine's refusal and its
# detail, a relay's close reason, a stranger's frame): when `harness daemon run` or `harness relay serve`
# runs in the foreground, that line reaches a human's terminal, where an escape sequence would set its title,
# clear its screen or write its clipboard. So every line leaves through the one terminal rule peer text
# follows (core/terminal_text.py); line breaks stay (a traceback is several lines), each later line indented.
from __future__ import annotations

import sys
from collections.abc import Callable

from harness.core.terminal_text import terminal_safe

CONTINUED = "\n    "  # how a log line's own line breaks are written: every later line indented


def stderr_log(prefix: str) -> Callable[[str], None]:
    """A log that writes each line to stderr as `prefix: line`, terminal-safe, flushed at once."""

    def write(line: str) -> None:
        # A line break a peer put in a quoted detail must not start a line that passes for one of ours.
        print(f"{prefix}: {terminal_safe(line).replace(chr(10), CONTINUED)}", file=sys.stderr, flush=True)

    return write


__all__ = ["stderr_log"]
