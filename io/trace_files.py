# Reading a trace (see io/trace.py, its writer): its file names and line format, the lines of a trace file or
# directory in order, filters over them and the per-exchange summary. `harness trace` reads a trace offline
# and needs none of the writer's trio, so this module imports none.
from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

import attrs

from harness.core.bounded_json import JsonRefused, parse_json
from harness.io.fileops import ChunkLines, FileOps, UnfitFile

TRACES_DIR: Final = "traces"
_FILE_RE: Final = re.compile(r"trace-(\d{12})\.ndjson")

# The sources the harness itself writes; any other source is a participant (a member id or name).
LEDGER: Final = "ledger"
DESK: Final = "desk"
BOARD: Final = "board"
ORCHESTRATOR: Final = "orchestrator"

# One event is bounded like one journal entry: the writer (io/trace.py) traces a bigger one as an `oversized`
# stub, so a line, its newline included, is at most this long; a reader refuses a longer one before it has
# read more than this of it, and never holds more than one line of a file at a time.
MAX_LINE_BYTES: Final = 1 << 20


def team_trace_dir(data_dir: Path, team_id: str) -> Path:
    return data_dir / TRACES_DIR / f"team-{team_id}"


def session_trace_dir(data_dir: Path, session_id: str) -> Path:
    return data_dir / TRACES_DIR / f"session-{session_id}"


def file_name(number: int) -> str:
    return f"trace-{number:012d}.ndjson"


def encode_line(source: str, seq: int, event: Mapping[str, object]) -> bytes:
    """One trace line with its newline. ASCII only (\\uXXXX), so the bytes are inert on a terminal."""
    body = {"source": source, "seq": seq, "event": event}
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"


# --- reading ------------------------------------------------------------------------------------------------


class TraceDamaged(Exception):
    """A complete line of a trace file is not a trace line (a torn final line is not damage)."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path} at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@attrs.frozen
class TraceLine:
    source: str
    seq: int
    event: dict[str, object]
    raw: bytes  # the line as written, without its newline


def trace_files(path: Path) -> list[Path]:
    """The files of a trace, oldest first: `path` itself when it is a file, else its trace-*.ndjson."""
    if not path.is_dir():
        return [path]
    return [path / name for _, name in sorted(numbered_names(entry.name for entry in path.iterdir()))]


def numbered_names(names: Iterable[str]) -> Iterator[tuple[int, str]]:
    """The (number, name) of each trace file among `names`, in the order given."""
    for name in names:
        if match := _FILE_RE.fullmatch(name):
            yield int(match[1]), name


def decode_line(path: Path, offset: int, raw: bytes) -> TraceLine:
    # A trace file is read offline, from anywhere: bounded before it is parsed, like every frame.
    obj = parse_json(raw, max_bytes=MAX_LINE_BYTES + 1)
    if isinstance(obj, JsonRefused):
        raise TraceDamaged(path, offset, f"not a trace line ({obj.reason}: {obj.detail})")
    if not isinstance(obj, dict) or set(obj) != {"source", "seq", "event"}:
        raise TraceDamaged(path, offset, "not a {source, seq, event} line")
    source, seq, event = obj["source"], obj["seq"], obj["event"]
    if not isinstance(source, str) or type(seq) is not int or not isinstance(event, dict):
        raise TraceDamaged(path, offset, "a malformed source, seq or event")
    return TraceLine(source, seq, event, raw)


_TOO_LONG: Final = f"a line longer than the {MAX_LINE_BYTES} bytes a trace line may hold"


def read_trace(
    path: Path, keep: Callable[[bytes], bool] | None = None, ops: FileOps | None = None
) -> Iterator[TraceLine]:
    """Every complete line of the trace at `path` (a file or a trace directory) in order. A final line
    without its newline (a torn write) is skipped. `keep`, when given, sees each raw line first; a line it
    rejects is not decoded (a cheap necessary condition, see `TraceFilter.prefilter`).

    A trace may come from anywhere, so each file is read a part at a time, holding at most one line: a line
    longer than MAX_LINE_BYTES is damage once that much of it is read (a sparse 4 GiB file cost its size in
    memory). Only a regular file is read (`FileOps.open_read`): a FIFO would block the reader forever and a
    device (a symlink to /dev/zero) never end, so a file of another type, or a symlink among a directory's
    files, is damage too. `path` itself, which the user named, may be a symlink, like a directory."""
    ops = FileOps() if ops is None else ops
    files = trace_files(path) if path.is_dir() else [Path(os.path.realpath(path))]
    for file in files:
        try:
            with contextlib.closing(ops.read_chunks(file)) as chunks:  # closed by a reader that stops early
                yield from _file_lines(file, chunks, keep)
        except FileNotFoundError:  # rotated away by a live writer since the listing
            continue
        except UnfitFile as error:
            raise TraceDamaged(file, error.offset, error.reason) from None


def _file_lines(
    file: Path, chunks: Iterable[bytes], keep: Callable[[bytes], bool] | None
) -> Iterator[TraceLine]:
    """The complete lines of one file read as `chunks`, one held at a time."""

    def too_long(offset: int) -> TraceDamaged:
        return TraceDamaged(file, offset, _TOO_LONG)

    for offset, raw in ChunkLines(chunks, MAX_LINE_BYTES, too_long):
        if keep is None or keep(raw):
            yield decode_line(file, offset, raw)


# --- querying -----------------------------------------------------------------------------------------------

# Values that every JSON encoder spells the same way inside a string, so their quoted form must appear in the
# raw bytes of a line that holds them: only then may a filter reject a line without decoding it.
_PLAIN_RE: Final = re.compile(r"[A-Za-z0-9_.:@-]+")


def _quoted(values: Iterable[str]) -> tuple[bytes, ...] | None:
    values = tuple(values)
    if not values or not all(_PLAIN_RE.fullmatch(v) for v in values):
        return None
    return tuple(b'"%s"' % v.encode() for v in values)


@attrs.frozen
class TraceFilter:
    """Which lines a query keeps. Empty tuples and None mean "any". A member matches the event's memberId
    or `to`, or the line's source; time is the event's "at" (epoch ms), inclusive on both ends."""

    sources: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    exchanges: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    since: int | None = None
    until: int | None = None

    def matches(self, line: TraceLine) -> bool:
        event = line.event
        if self.sources and line.source not in self.sources:
            return False
        if self.types and event.get("type") not in self.types:
            return False
        if self.exchanges and event.get("exchangeId") not in self.exchanges:
            return False
        if self.members and not {line.source, event.get("memberId"), event.get("to")} & set(self.members):
            return False
        at = event.get("at")
        if self.since is not None and not (isinstance(at, int) and at >= self.since):
            return False
        return self.until is None or (isinstance(at, int) and at <= self.until)

    def prefilter(self) -> Callable[[bytes], bool] | None:
        """A test on raw line bytes that every matching line passes (None when there is nothing cheap)."""
        needles = [
            quoted
            for values in (self.sources, self.types, self.exchanges, self.members)
            if (quoted := _quoted(values)) is not None
        ]
        if not needles:
            return None
        return lambda raw: all(any(n in raw for n in group) for group in needles)


def query(path: Path, where: TraceFilter) -> Iterator[TraceLine]:
    for line in read_trace(path, where.prefilter()):
        if where.matches(line):
            yield line


# --- summary ------------------------------------------------------------------------------------------------

# The steps of one exchange, in order, and the event that marks each (source, type, fields it must have); the
# first such event of an exchange (its "exchangeId") sets the step's time. The daemon emits these events.
MILESTONES: Final[Mapping[str, tuple[str, str, Mapping[str, str]]]] = {
    "asked": (LEDGER, "ask", {}),
    "delivered": (DESK, "notice", {"kind": "question", "state": "delivered"}),
    "accepted": (DESK, "notice", {"kind": "question", "state": "accepted"}),
    "answered": (LEDGER, "reply", {}),
    "continuation": (DESK, "notice", {"kind": "answer", "state": "accepted"}),
}
QUESTION_ENDED: Final = "question_ended"  # ledger: {"exchangeId", "state", "reason"?}
PROTOCOL_VIOLATION: Final = "protocol_violation"  # orchestrator: {"exchangeId"?, "memberId", "rule"}


def _milestone(line: TraceLine) -> str | None:
    event = line.event
    for name, (source, kind, fields) in MILESTONES.items():
        if line.source == source and event.get("type") == kind and all(
            event.get(key) == value for key, value in fields.items()
        ):
            return name
    return None


@attrs.define
class _Exchange:
    exchange_id: str
    team_id: object
    asker: object = None
    to: object = None
    at: dict[str, int] = attrs.Factory(dict)
    state: object = None
    reason: object = None
    violations: int = 0

    def view(self) -> dict[str, object]:
        asked = self.at.get("asked")
        since = {} if asked is None else {s: self.at[s] - asked for s in MILESTONES if s in self.at}
        return {
            "exchangeId": self.exchange_id, "teamId": self.team_id, "asker": self.asker, "to": self.to,
            "at": {s: self.at[s] for s in MILESTONES if s in self.at}, "sinceAsk": since,
            "state": self.state, "reason": self.reason, "violations": self.violations,
        }


def summarize(lines: Iterable[TraceLine]) -> dict[str, object]:
    """Per exchange, when each step happened (epoch ms) and how long after the ask; how each question ended;
    and every protocol violation. A JSON-ready document."""
    exchanges: dict[str, _Exchange] = {}
    violations: list[dict[str, object]] = []
    sources: dict[str, int] = {}
    count, first_seq, last_seq = 0, None, None
    for line in lines:
        count += 1
        first_seq = line.seq if first_seq is None else first_seq
        last_seq = line.seq
        sources[line.source] = sources.get(line.source, 0) + 1
        event = line.event
        kind, exchange_id, at = event.get("type"), event.get("exchangeId"), event.get("at")
        if kind == PROTOCOL_VIOLATION:
            violations.append({"seq": line.seq, "source": line.source, **event})
        if not isinstance(exchange_id, str):
            continue
        entry = exchanges.setdefault(exchange_id, _Exchange(exchange_id, event.get("teamId")))
        step = _milestone(line)
        if step is not None and step not in entry.at and isinstance(at, int):
            entry.at[step] = at
        if step == "asked":
            entry.asker, entry.to = event.get("memberId"), event.get("to")
        if line.source == LEDGER and kind == QUESTION_ENDED:
            entry.state, entry.reason = event.get("state"), event.get("reason")
        entry.violations += kind == PROTOCOL_VIOLATION
    ordered = sorted(exchanges.values(), key=lambda e: (e.at.get("asked", 0), e.exchange_id))
    return {
        "lines": count,
        "firstSeq": first_seq,
        "lastSeq": last_seq,
        "sources": sources,
        "exchanges": [entry.view() for entry in ordered],
        "violations": violations,
    }
