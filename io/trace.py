# One trace per team and per session: every ledger, desk, board and orchestrator event as one NDJSON line
# {"source": ..., "seq": N, "event": {...}}, so a person can replay what happened with `jq` or
# `harness trace`. seq is monotonic across the whole trace (every file, every restart of the writer); lines
# are redacted before they are encoded, written and fsynced. Writing and fsyncing are apart: a line written
# (write(2), on the caller's thread) survives the death of the process, an fsync adds a machine crash, and the
# daemon's team traces write a step's lines before the step's effects leave but fsync them later, in groups,
# off the ask's path (TeamTraces). The trace is bounded by rotation (TraceBounds). A crash can leave one torn
# line at the end of a file: readers skip it and the next writer starts a new file, so no byte of it changes.
#
# On-disk layout of one trace directory (0700, files 0600):
#   lock                          flock(2) target: one writer process per trace
#   trace-<number:12>.ndjson      the lines, oldest file first; the highest number is the one appended to
# The rules are spec/trace-v1.md's. Reading a trace, its files and lines are io/trace_files.py's (no trio: the
# read-only commands use them).
from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final

import attrs
import trio

from harness.core.redaction import Redactor
from harness.io.fileops import FileOps, close_both, write_all
from harness.io.journal_files import locked_private_dir  # the store's private, locked directory, shared
from harness.io.trace_files import (
    MAX_LINE_BYTES,
    TraceDamaged,
    decode_line,
    encode_line,
    file_name,
    numbered_names,
    team_trace_dir,
    trace_files,
)

# A source is one of the harness's own (io/trace_files.py's LEDGER, DESK, BOARD, ORCHESTRATOR) or a
# participant's member id or name.
SOURCE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

# An event over MAX_LINE_BYTES is traced as an `oversized` stub (type and size), since a trace must never stop
# the daemon and the full event is in the ledger.
OVERSIZED: Final = "oversized"


@attrs.frozen
class TraceBounds:
    """A trace holds at most `rotated_files + 1` files of at most `file_bytes` each (a single line bigger
    than the rest of a file starts a new one, so only a file holding one line can pass the bound)."""

    file_bytes: int = 8 << 20
    rotated_files: int = 4

    @property
    def total_bytes(self) -> int:
        return self.file_bytes * (self.rotated_files + 1)


DEFAULT_BOUNDS: Final = TraceBounds()


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _last_seq(ops: FileOps, files: list[Path]) -> int:
    """The seq of the newest complete line in `files` (0 when there is none). Only each file's end is read,
    as much as a torn line and a whole one may hold: a trace file grown past any size its writer makes
    (damage, a sparse file) costs no more to open than a full one."""
    for file in reversed(files):
        size, tail = ops.read_tail(file, 2 * MAX_LINE_BYTES + 1)  # torn line, whole line, newline before
        offset = size - len(tail)  # of tail[0] in the file
        end = tail.rfind(b"\n")
        start = tail.rfind(b"\n", 0, max(end, 0)) + 1
        if offset and start == 0:
            raise TraceDamaged(file, offset, f"no complete line of at most {MAX_LINE_BYTES} bytes at its end")
        if end >= 0:
            return decode_line(file, offset + start, tail[start:end]).seq
    return 0


# --- writing ------------------------------------------------------------------------------------------------


class TraceFailed(Exception):
    """A write or fsync of the trace failed; this writer refuses everything until it is reopened (a failed
    fsync may have dropped the pages, so a retry could claim lines that are gone)."""


class TraceLocked(Exception):
    """Another process writes this trace."""


class TraceWriter:
    """The one writer of one trace directory. `emit` redacts, numbers and queues a line without waiting;
    `write` puts the queued lines in the file (no fsync); `sync` fsyncs what was written; `flush` (or
    `append`) is both. All calls run in one trio run."""

    def __init__(
        self,
        directory: Path,
        ops: FileOps,
        lock_fd: int,
        *,
        redactor: Redactor,
        bounds: TraceBounds,
        clock: Callable[[], int],
    ) -> None:
        self._dir = directory
        self._ops = ops
        self._lock_fd: int | None = lock_fd
        self._redactor = redactor
        self._bounds = bounds
        self._clock = clock
        files = trace_files(directory)
        self._numbers = [number for number, _ in numbered_names(f.name for f in files)]
        self._durable_seq = _last_seq(ops, files)
        self._written_seq = self._durable_seq
        self._next_seq = self._durable_seq + 1
        self._fd: int | None = None
        self._size = 0
        if files:
            size, last = ops.read_tail(files[-1], 1)
            # After a torn line (no final newline) or in a full file, the next line starts a new file.
            if last == b"\n" and size < bounds.file_bytes:
                self._fd, self._size = ops.open_append(files[-1]), size
        self._pending: list[bytes] = []
        self._sync_lock = trio.Lock()
        self._failure: TraceFailed | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        directory: Path,
        redactor: Redactor,
        *,
        bounds: TraceBounds = DEFAULT_BOUNDS,
        ops: FileOps | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> TraceWriter:
        """Open (creating if needed) the trace in `directory`; its seq continues after the newest complete
        line there. Raises TraceLocked, TraceDamaged (a damaged newest line) or OSError."""
        ops = ops or FileOps()
        return await trio.to_thread.run_sync(cls._open_blocking, directory, redactor, bounds, ops, clock)

    @classmethod
    def _open_blocking(
        cls, directory: Path, redactor: Redactor, bounds: TraceBounds, ops: FileOps, clock: Callable[[], int]
    ) -> TraceWriter:
        def busy() -> TraceLocked:
            return TraceLocked(f"{directory} is written by another process")

        with locked_private_dir(ops, directory, busy) as lock_fd:
            return cls(directory, ops, lock_fd, redactor=redactor, bounds=bounds, clock=clock)

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    @property
    def last_seq(self) -> int:
        """The seq of the last line emitted (durable or not)."""
        return self._next_seq - 1

    def emit(self, source: str, event: Mapping[str, object]) -> int:
        """Queue one event of `source` and return its seq. `event` needs a string "type"; an "at" (epoch ms)
        is added when it has none. Raises ValueError for a bad source or event, TraceFailed after a failure.
        """
        if self._closed:
            raise trio.ClosedResourceError("trace writer is closed")
        if self._failure is not None:
            raise TraceFailed(f"{self._dir}: stopped by an earlier failure; reopen it") from self._failure
        if not SOURCE_RE.fullmatch(source):
            raise ValueError(f"a trace source is 1-128 letters, digits or ._:@- (got {source!r})")
        kind = event.get("type")
        if not isinstance(kind, str):
            raise ValueError("a traced event needs a string 'type'")
        body = {**event} if "at" in event else {**event, "at": self._clock()}
        seq = self._next_seq
        redacted = self._redactor.value(body)
        assert isinstance(redacted, dict)
        line = encode_line(self._redactor.text(source), seq, redacted)
        if len(line) > MAX_LINE_BYTES:
            stub = {"type": OVERSIZED, "at": body["at"], "eventType": redacted["type"], "bytes": len(line)}
            line = encode_line(self._redactor.text(source), seq, stub)
        self._pending.append(line)
        self._next_seq = seq + 1
        return seq

    async def append(self, source: str, event: Mapping[str, object]) -> int:
        """`emit`, then wait until the line is durable."""
        seq = self.emit(source, event)
        await self.flush()
        return seq

    async def flush(self) -> None:
        """Make every line emitted so far durable: `write`, then `sync`."""
        self.write()
        await self.sync()

    def write(self) -> None:
        """Write every line emitted so far, together, on this thread and without an fsync: from here the death
        of this process cannot lose them (the kernel holds them), a machine crash still can until `sync`."""
        if not self._pending:
            return
        if self._failure is not None:
            raise TraceFailed(f"{self._dir}: lines up to seq {self.last_seq} were not written")
        lines, self._pending = self._pending, []
        try:
            self._write_lines(lines)
        except Exception as error:
            self._failure = TraceFailed(f"{self._dir}: {error!r}")
            raise self._failure from error
        self._written_seq = self.last_seq

    async def sync(self) -> None:
        """fsync every line written so far. Lines written while an fsync runs share the next one.
        Cancellation is delivered after the fsync, not instead of it."""
        failed = await sync_writers([self])
        if self in failed:
            raise failed[self]

    def _sync_due(self) -> tuple[int, int | None] | None:
        """(the seq a sync now makes durable, a duplicate of the file to fsync), None when nothing is due.
        Called holding `_sync_lock`. A duplicate, so that a rotation (or `abandon`) on the event loop may
        close the file while the fsync runs: the duplicate keeps it open until the fsync is done."""
        target = self._written_seq
        if self._durable_seq >= target:
            return None
        if self._failure is not None:
            raise TraceFailed(f"{self._dir}: lines up to seq {target} were not made durable")
        return target, None if self._fd is None else os.dup(self._fd)

    def _write_lines(self, lines: list[bytes]) -> None:
        chunk: list[bytes] = []
        for line in lines:
            if self._fd is None or (self._size and self._size + len(line) > self._bounds.file_bytes):
                if chunk and self._fd is not None:
                    write_all(self._ops, self._fd, b"".join(chunk))
                chunk = []
                self._rotate()
            chunk.append(line)
            self._size += len(line)
        if chunk and self._fd is not None:
            write_all(self._ops, self._fd, b"".join(chunk))

    def _rotate(self) -> None:
        """Start the next file and drop the oldest beyond the bound. The full file is fsynced first: `sync`
        only ever sees the newest file."""
        ops = self._ops
        if self._fd is not None:
            if self._durable_seq < self._written_seq:
                ops.fsync(self._fd)
            ops.close(self._fd)
            self._fd = None
        number = (self._numbers[-1] if self._numbers else 0) + 1
        self._fd = ops.create_exclusive(self._dir / file_name(number))
        self._numbers.append(number)
        self._size = 0
        while len(self._numbers) > self._bounds.rotated_files + 1:
            ops.unlink(self._dir / file_name(self._numbers.pop(0)))
        ops.fsync_dir(self._dir)  # the new file's name (and the deletions) as durable as its lines

    async def aclose(self) -> None:
        """Flush what was emitted, then release the files and the lock. Idempotent."""
        if self._closed:
            return
        try:
            if self._failure is None:
                await self.flush()
        finally:
            self._closed = True
            with trio.CancelScope(shield=True):
                async with self._sync_lock:
                    self.abandon()

    def abandon(self) -> None:
        """Release the files and the lock now, dropping lines not yet written (a trace that failed). An fsync
        in progress finishes on its own duplicate of the file."""
        self._closed = True
        self._pending = []
        fd, lock_fd = self._fd, self._lock_fd
        self._fd = self._lock_fd = None
        close_both(self._ops, fd, lock_fd)

    async def __aenter__(self) -> TraceWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


# --- the daemon's team traces -------------------------------------------------------------------------------

# What the daemon's runners call after a step is durable and before its effects leave: (team id, source,
# event). It never waits: the line is written at once when the team's trace is open, else queued.
TraceEmit = Callable[[str, str, Mapping[str, object]], None]
# Events queued for the background task; beyond this a burst is dropped (and counted) rather than pin memory.
QUEUE_LIMIT: Final = 8192
# How long written lines wait for their fsync: they share it with every line written meanwhile, so a steady
# flow of asks costs the trace about one fsync per team per this delay, and none on any ask's path.
SYNC_DELAY_MS: Final = 1000
_Event = tuple[str, Mapping[str, object]]  # (source, event) of one team's trace


def no_trace(team_id: str, source: str, event: Mapping[str, object]) -> None:
    """The TraceEmit of a runner that traces nothing (tests that build one alone)."""


async def sync_writers(writers: Sequence[TraceWriter]) -> dict[TraceWriter, Exception]:
    """`sync` of every writer in one worker thread call: one group fsync of many traces costs one hop to a
    thread, not one per trace (a start writes to every team's trace at once). Each writer that could not be
    made durable maps to its error; the others are durable. Cancellation is delivered after the fsyncs."""
    failed: dict[TraceWriter, Exception] = {}
    due: list[tuple[TraceWriter, int, int | None]] = []
    with trio.CancelScope(shield=True):
        async with AsyncExitStack() as held:
            # One order (no deadlock with another group), each writer once (its lock is not re-entrant).
            for writer in sorted(set(writers), key=lambda writer: str(writer.directory)):
                await held.enter_async_context(writer._sync_lock)
                try:
                    now = writer._sync_due()
                except (TraceFailed, OSError) as refused:
                    failed[writer] = refused
                    continue
                if now is not None:
                    due.append((writer, *now))
            files = [(writer._ops, fd) for writer, _, fd in due]
            try:
                errors = await trio.to_thread.run_sync(_fsync_each, files) if files else []
            except Exception as error:  # no worker thread ran it (none could start): nothing was fsynced
                for _, fd in files:
                    if fd is not None:
                        os.close(fd)
                errors = [error] * len(due)
            for (writer, target, _), fsync_error in zip(due, errors, strict=True):
                if fsync_error is None:
                    writer._durable_seq = max(writer._durable_seq, target)
                else:
                    writer._failure = TraceFailed(f"{writer.directory}: {fsync_error!r}")
                    writer._failure.__cause__ = fsync_error
                    failed[writer] = writer._failure
    return failed


def _fsync_each(files: list[tuple[FileOps, int | None]]) -> list[Exception | None]:
    """fsync and close each duplicate (None: no file is open, nothing to fsync); each one's error."""
    errors: list[Exception | None] = []
    for ops, fd in files:
        try:
            if fd is not None:
                try:
                    ops.fsync(fd)
                finally:
                    ops.close(fd)
        except Exception as error:  # a failed trace stops only that trace, as `sync` did
            errors.append(error)
        else:
            errors.append(None)
    return errors


class TeamTraces:
    """Every team's trace in one data directory (`team_trace_dir`).

    The trace observes the daemon and is never on its critical path. `emit` writes the line into the team's
    open trace file at once (write(2), no fsync), so it is in the file before the step's effects leave and
    before its command is answered: a daemon killed after that loses none of it. One background task opens a
    team's writer when its first event arrives (those events wait in a bounded queue meanwhile) and fsyncs
    every written trace `sync_delay_ms` after it was first written to, in one group. A team whose trace
    cannot be opened or written is logged once and traced no more until the daemon restarts; every event
    that was not written is counted in `view` (daemon_status)."""

    def __init__(
        self,
        data_dir: Path,
        redactor: Callable[[], Redactor],  # called once per batch of opens: it sees the secrets of now
        *,
        log: Callable[[str], None],
        bounds: TraceBounds = DEFAULT_BOUNDS,
        ops: FileOps | None = None,
    ) -> None:
        self._dir = data_dir
        self._redactor = redactor
        self._log = log
        self._bounds = bounds
        self._ops = ops
        self._queue: list[tuple[str, str, Mapping[str, object]]] = []
        self._backlog: dict[str, int] = {}  # team id -> its events queued and not yet handed to its writer
        self._wake = trio.Event()
        self._closing = False
        self._writers: dict[str, TraceWriter] = {}
        self._unsynced: set[str] = set()  # teams with lines written and not yet fsynced
        self._sync_at = math.inf  # trio time of the next group fsync
        self.sync_delay_ms = SYNC_DELAY_MS  # 0: every write is fsynced at once (the bench's baseline)
        self.failed: dict[str, str] = {}  # team id -> why its trace stopped
        self.written = 0
        self.lost = 0

    def emit(self, team_id: str, source: str, event: Mapping[str, object]) -> None:
        """Write one event to `team_id`'s trace, or queue it while that trace is being opened (its "at" is
        stamped now if it has none). Never raises for a trace problem and never waits."""
        if self._closing or team_id in self.failed:
            self.lost += 1
            return
        stamped = event if "at" in event else {**event, "at": wall_clock_ms()}
        writer = self._writers.get(team_id)
        if writer is not None and not self._backlog.get(team_id):
            self._write(team_id, writer, [(source, stamped)])
            return
        if len(self._queue) >= QUEUE_LIMIT:
            self.lost += 1
            return
        self._queue.append((team_id, source, stamped))
        self._backlog[team_id] = self._backlog.get(team_id, 0) + 1
        self._wake.set()

    def close(self) -> None:
        """Take no more events; `run` returns once every queued one is written (or counted lost) and every
        trace is fsynced."""
        self._closing = True
        self._wake.set()

    def view(self) -> dict[str, object]:
        return {
            "open": len(self._writers),
            "written": self.written,
            "lost": self.lost,
            "queued": len(self._queue),
            "failed": dict(self.failed),
        }

    async def run(self) -> None:
        try:
            while self._queue or self._unsynced or not self._closing:
                if self._queue:
                    batch, self._queue = self._queue, []
                    await self._write_queued(batch)
                elif self._closing or trio.current_time() >= self._sync_at:
                    await self._sync()
                else:
                    self._wake = trio.Event()
                    with trio.move_on_at(self._sync_at):
                        await self._wake.wait()
        finally:
            with trio.CancelScope(shield=True):
                self._closing = True
                self.lost += len(self._queue)
                self._queue = []
                for team_id, writer in list(self._writers.items()):
                    try:
                        await writer.aclose()
                    except (TraceFailed, OSError) as error:
                        self._fail(team_id, error)
                self._writers.clear()

    async def _write_queued(self, batch: list[tuple[str, str, Mapping[str, object]]]) -> None:
        by_team: dict[str, list[_Event]] = {}
        for team_id, source, event in batch:
            by_team.setdefault(team_id, []).append((source, event))
        # The writers this batch opens share one redactor: the secrets of now, read once (a start opens every
        # team's trace at once, and each read goes through every member key of the data directory).
        redactor: list[Redactor] = []
        for team_id, events in by_team.items():
            writer = await self._writer(team_id, redactor)
            # Handed over in the same step as the backlog drops: a later emit may then write directly.
            self._backlog[team_id] -= len(events)
            if not self._backlog[team_id]:
                del self._backlog[team_id]
            if writer is None:
                self.lost += len(events)
            else:
                self._write(team_id, writer, events)

    def _write(self, team_id: str, writer: TraceWriter, events: list[_Event]) -> None:
        try:
            for source, event in events:
                writer.emit(source, event)
            writer.write()
        except (TraceFailed, OSError, ValueError, TypeError) as error:  # a bad event is a bug: never a crash
            self.lost += len(events)
            self._fail(team_id, error)
            return
        self.written += len(events)
        if not self._unsynced:
            self._sync_at = trio.current_time() + self.sync_delay_ms / 1000
            self._wake.set()
        self._unsynced.add(team_id)

    async def _sync(self) -> None:
        """One group fsync of every trace written since the last."""
        teams, self._unsynced, self._sync_at = self._unsynced, set(), math.inf
        writers = {writer: team_id for team_id in teams if (writer := self._writers.get(team_id)) is not None}
        for writer, error in (await sync_writers(list(writers))).items():
            self._fail(writers[writer], error)

    async def _writer(self, team_id: str, redactor: list[Redactor]) -> TraceWriter | None:
        """The team's open writer, opened now if need be with the batch's `redactor` (made at its first)."""
        if team_id in self.failed:
            return None
        writer = self._writers.get(team_id)
        if writer is None:
            try:
                if not redactor:
                    # It reads the data directory's keys.
                    redactor.append(await trio.to_thread.run_sync(self._redactor))
                writer = await TraceWriter.open(
                    team_trace_dir(self._dir, team_id), redactor[0], bounds=self._bounds, ops=self._ops
                )
            except (TraceLocked, TraceDamaged, OSError) as error:
                self._fail(team_id, error)
                return None
            self._writers[team_id] = writer
        return writer

    def _fail(self, team_id: str, error: BaseException) -> None:
        if team_id in self.failed:
            return
        self.failed[team_id] = repr(error)
        self._log(f"trace of team {team_id}: {error!r}; it is not written again until the daemon restarts")
        self._unsynced.discard(team_id)
        writer = self._writers.pop(team_id, None)
        if writer is not None:
            try:
                writer.abandon()  # what it still holds is lost with the rest
            except OSError as close_error:
                self._log(f"trace of team {team_id}: closing it failed: {close_error!r}")
