# The durable ledger store. The reducers are deterministic, so a journal of accepted commands plus periodic
# checkpoints of the serialized state rebuilds a ledger exactly; this module keeps both on disk and knows
# nothing of what they mean (entries and payloads are opaque JSON objects). Its promises:
#
# - `append` answers only after the entry's bytes are fsynced, and appends that arrive during an fsync share
#   the next one (group commit), so an acknowledgement always means "durable" without one fsync per entry.
#   `append_all` queues several entries as one batch (`queue` takes their place in the journal without
#   yielding, `durable` waits for their fsync). `enqueue` queues entries nobody waits on: they ride the next
#   batch's fsync (or `sync`), and a crash before it loses them only as a suffix of the journal.
# - Recovery returns exactly the acknowledged history. A torn final record (a write that never finished, so
#   was never acknowledged) is ignored and left on disk; new records go to a new segment so no byte of it
#   changes. Any other damage is `CorruptState`, naming the file and byte offset, with every byte in place.
# - A write, fsync or rename error is fatal for the open store: nothing in that batch is acknowledged and all
#   later writes are refused. A failed fsync may have dropped dirty pages, so retrying could report success
#   for data that is gone; only a restart, which re-reads what is really on disk, is safe.
#
# The files' layout and format, the errors and the read-only scan are io/journal_files.py's, which imports no
# trio, so the commands that only read a store start without it.
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from harness.io.fileops import PRIVATE_FILE_MODE, FileOps, close_both, write_all
from harness.io.journal_files import (
    MAX_CHECKPOINT_BYTES,
    MAX_LINE_BYTES,
    PARTS_KEY,
    TEMP_SUFFIX,
    Recovery,
    StoreFailed,
    StoreLocked,
    StoreScan,
    checkpoint_name,
    encode_record,
    locked_private_dir,
    part_bytes,
    scan_store,
    segment_name,
    unfit_is_damage,
)

# A command of team.v1 is at most ~50,000 characters of fields (8k question, 8k context, 16k answer, 16 x 1k
# evidence); even fully \u-escaped that is far below this, so a bigger entry is a caller bug.
MAX_ENTRY_BYTES: Final = 1 << 20
# Below this running estimate of one write+fsync, the journal flushes on the event loop's thread: blocking
# the loop that briefly is cheaper than the worker-thread hand-off (~0.1 ms here); slower disks (and the first
# flushes, until the estimate learns) keep the loop free by flushing in a worker thread.
INLINE_FLUSH_S: Final = 0.0005


# --- the writable store -------------------------------------------------------------------------------------


@attrs.define
class _Batch:
    lines: list[bytes] = attrs.Factory(list)
    written: int = 0  # how many of `lines` `enqueue` already wrote (not fsynced) into the current segment
    last_seq: int = 0
    done: bool = False
    error: BaseException | None = None


@attrs.frozen
class Queued:
    """Entries `queue` placed in the journal (seqs `first`..`last`), on their way to `durable`."""

    batch: _Batch
    first: int
    last: int


@attrs.define
class _Segment:
    number: int
    last_seq: int | None


@attrs.frozen
class CheckpointPolicy:
    """When the daemon should checkpoint: once this many entries were journaled since the last one (those
    enqueued to ride the next fsync included)."""

    every: int = 256

    def due(self, store: JournalStore) -> bool:
        return store.entries_since_checkpoint >= self.every


class JournalStore:
    """One durable journal-plus-checkpoint store in one directory, owned by one trio task's process.

    Open with `await JournalStore.open(directory)`. Not thread-safe; all methods run in one trio run.
    """

    def __init__(
        self,
        directory: Path,
        ops: FileOps,
        lock_fd: int,
        scan: StoreScan,
        active_fd: int | None,
    ) -> None:
        self._dir = directory
        self._ops = ops
        self._lock_fd: int | None = lock_fd
        self._fd = active_fd
        self._segments = [_Segment(s.number, s.last_seq) for s in scan.segments]
        self._next_segment = scan.segments[-1].number + 1 if scan.segments else 1
        self._checkpoints = list(scan.checkpoints)
        self._parts = scan.parts  # the parts the current checkpoint names
        self._checkpoint_seq = scan.recovery.checkpoint_seq
        self._durable_seq = scan.recovery.last_seq
        self._next_seq = self._durable_seq + 1
        self._open_batch: _Batch | None = None
        self._write_lock = trio.Lock()  # FIFO: the first waiter of a batch writes it for all
        self._flush_seconds = INLINE_FLUSH_S  # running estimate of one write+fsync on this disk
        self._checkpoint_lock = trio.Lock()
        self._failure: StoreFailed | None = None
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, *, ops: FileOps | None = None) -> tuple[JournalStore, Recovery]:
        """Open (creating if needed) the store in `directory` and recover it.

        Returns the store and what it held: the newest checkpoint payload and its seq (0 and None when
        there is none) and the journal entries after it, in order. Raises CorruptState (nothing changed: a
        symlink, FIFO, device or directory in the place of the store's directory or of one of its files is
        damage too, never followed, read, chmodded or removed), StoreLocked, or OSError. Leftover temp files
        of an interrupted checkpoint are removed.
        """
        ops = ops or FileOps()
        return await trio.to_thread.run_sync(cls._open_blocking, directory, ops)

    @classmethod
    def _open_blocking(cls, directory: Path, ops: FileOps) -> tuple[JournalStore, Recovery]:
        def busy() -> StoreLocked:
            return StoreLocked(f"{directory} is open in another process")

        with unfit_is_damage(), locked_private_dir(ops, directory, busy) as lock_fd:
            scan = scan_store(directory, ops)
            for name in (*scan.temp_files, *scan.stray_parts):
                ops.unlink(directory / name)
            if scan.temp_files or scan.stray_parts:
                ops.fsync_dir(directory)
            for name in (*scan.checkpoints, *(s.name for s in scan.segments), *scan.parts):
                ops.fix_mode(directory / name, PRIVATE_FILE_MODE)
            active_fd = None
            if scan.segments:
                tail = scan.segments[-1]
                # Appending after a torn record would bury it mid-file; after a compaction leftover it would
                # leave a gap. Both cases start a fresh segment instead.
                if tail.torn_offset is None and tail.last_seq == scan.recovery.last_seq:
                    active_fd = ops.open_append(directory / tail.name)
        return cls(directory, ops, lock_fd, scan, active_fd), scan.recovery

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def durable_seq(self) -> int:
        """The highest acknowledged (fsynced) seq."""
        return self._durable_seq

    @property
    def checkpoint_seq(self) -> int:
        return self._checkpoint_seq

    @property
    def parts(self) -> frozenset[str]:
        """The parts the current checkpoint names (`write_parts`)."""
        return self._parts

    @property
    def journaled_seq(self) -> int:
        """The highest seq given to an entry: durable, or enqueued to become durable with the next fsync."""
        return self._next_seq - 1

    @property
    def entries_since_checkpoint(self) -> int:
        """Entries a replay would step after the checkpoint: the enqueued ones count, so a journal that
        grows by entries that ride (a desk's looks, the ledger's reports of its own desk) is checkpointed
        as often as one that grows by durable appends."""
        return self.journaled_seq - self._checkpoint_seq

    @property
    def failed(self) -> StoreFailed | None:
        """The fatal error that stopped this store, if any."""
        return self._failure

    def _check_writable(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("journal store is closed")
        if self._failure is not None:
            raise StoreFailed(f"{self._dir}: stopped by an earlier failure; reopen it") from self._failure

    def _fail(self, exc: BaseException) -> StoreFailed:
        if self._failure is None:
            self._failure = StoreFailed(f"{self._dir}: {exc!r}; nothing more is written until it is reopened")
            self._failure.__cause__ = exc
        return self._failure

    async def append(self, entry: Mapping[str, object], *, max_bytes: int = MAX_ENTRY_BYTES) -> int:
        """Durably append one JSON object; returns its seq once its bytes (and its batch's) are fsynced.
        `max_bytes` is raised only for a state written as a journal record (a board's checkpoint record), to
        at most MAX_LINE_BYTES.

        Raises StoreFailed if this or any entry of its batch could not be made durable (the entry is then
        not acknowledged: it may or may not survive a restart) and on every call after such a failure.
        Raises TypeError/ValueError for an entry that is not JSON-able or is too big (nothing is written).
        Once queued the entry is written even if the caller is cancelled, so cancellation is delivered
        after the write, not instead of it.
        """
        return (await self.append_all((entry,), max_bytes=max_bytes))[-1]

    async def append_all(
        self, entries: Sequence[Mapping[str, object]], *, max_bytes: int = MAX_ENTRY_BYTES
    ) -> list[int]:
        """`append` for several entries at once, in order: they share one write and one fsync (with any
        other appends queued meanwhile), so a caller that stepped a batch pays one durable append for it.
        All or none are queued: an entry that cannot be encoded refuses the whole call before any is."""
        return await self.durable(self.queue(entries, max_bytes=max_bytes))

    def queue(self, entries: Sequence[Mapping[str, object]], *, max_bytes: int = MAX_ENTRY_BYTES) -> Queued:
        """The first half of `append_all`, without yielding: the entries take their seqs and their place in
        the journal now (all or none; raises as `append_all` does), and `durable` waits for their fsync. A
        caller that must journal in the order it decides, and not wait in that order, needs no task for it."""
        if not entries:
            raise ValueError("nothing to append")
        batch, first = self._queue(entries, max_bytes)
        return Queued(batch, first, first + len(entries) - 1)

    async def durable(self, queued: Queued) -> list[int]:
        """The second half of `append_all`: the seqs of `queued` once they are fsynced (StoreFailed if they
        could not be). Once queued the entries are written even if the caller is cancelled."""
        batch = queued.batch
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                if not batch.done:
                    await self._flush(batch)
        if batch.error is not None:
            lost = f"{self._dir}: entries seq {queued.first}..{queued.last} were not made durable"
            raise StoreFailed(lost) from batch.error
        return list(range(queued.first, queued.last + 1))

    def enqueue(self, entries: Sequence[Mapping[str, object]]) -> list[int]:
        """Journal entries without waiting for an fsync: they become durable with the next `append` (whose
        fsync covers every byte before its own), `sync`, a checkpoint at or after them, or `aclose`. Unless a
        batch is being written or a checkpoint has just started a new segment (`ride` then syncs), they are
        written into the file at once (write(2), no fsync), as the trace is:
        from then on the death of this process cannot lose them (the kernel holds them), and a reader of the
        running store sees them; a machine crash before the next fsync can, and then loses only them, never
        anything after them. Only for entries nothing waits on and whose loss a replay tolerates (a desk's
        repeated observation of a terminal: a restart demands a fresh look anyway). Returns their seqs. A
        failed write stops the store (StoreFailed)."""
        if not entries:
            return []
        batch, first = self._queue(entries, MAX_ENTRY_BYTES)
        seqs = list(range(first, first + len(entries)))
        if self._fd is None or self._write_lock.locked():
            return seqs  # a new segment is made by the next flush; one being written takes these in the next
        try:
            write_all(self._ops, self._fd, b"".join(batch.lines[batch.written :]))
        except Exception as exc:
            raise self._fail(exc) from exc
        batch.written = len(batch.lines)
        return seqs

    async def ride(self, entries: Sequence[Mapping[str, object]]) -> list[int]:
        """`enqueue`, and `sync` when it could not write the entries at once (a checkpoint has just started a
        new segment, or a flush is under way): from its return, the death of this process cannot lose them
        (a riding step's loss must be a machine crash's only, spec/delivery-v1.md section 7)."""
        seqs = self.enqueue(entries)
        if seqs and self.unwritten:
            await self.sync()
        return seqs

    @property
    def unwritten(self) -> bool:
        """Entries `enqueue` could not write into the file at once wait for the next flush: until `sync`, the
        death of this process would lose them."""
        batch = self._open_batch
        return batch is not None and batch.written < len(batch.lines)

    async def sync(self) -> None:
        """Make every entry journaled so far durable (those `enqueue` left for the next fsync)."""
        target = self.journaled_seq
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                batch = self._open_batch
                if batch is not None and not batch.done:
                    await self._flush(batch)
                if self._durable_seq < target:
                    # Another flush took these entries and failed (the store is stopped): never a success.
                    raise StoreFailed(f"{self._dir}: enqueued entries not made durable") from self._failure

    def _queue(self, entries: Sequence[Mapping[str, object]], max_bytes: int) -> tuple[_Batch, int]:
        """Encode `entries` into the open batch (all or none); the batch and the first entry's seq."""
        self._check_writable()
        first = self._next_seq
        lines = [encode_record("entry", first + n, entry) + b"\n" for n, entry in enumerate(entries)]
        bound = min(max_bytes, MAX_LINE_BYTES)  # a longer line would be damage to the next scan
        for line in lines:
            if len(line) > bound:
                raise ValueError(f"journal entry of {len(line)} bytes exceeds {bound}")
        self._next_seq += len(lines)
        batch = self._open_batch
        if batch is None:
            batch = self._open_batch = _Batch()
        batch.lines.extend(lines)
        batch.last_seq = self._next_seq - 1
        return batch, first

    async def _flush(self, batch: _Batch) -> None:
        """Write and fsync `batch` (caller holds the write lock); every entry that arrives meanwhile
        joins the next batch."""
        self._open_batch = None
        if self._failure is not None:
            batch.error = self._failure
            batch.done = True
            return
        new_segment = self._fd is None
        assert not (new_segment and batch.written), "written lines belong to the current segment"
        data = b"".join(batch.lines[batch.written :])
        try:
            if new_segment or self._flush_seconds >= INLINE_FLUSH_S:
                self._fd, elapsed = await trio.to_thread.run_sync(self._timed_write, self._fd, data)
            else:
                # On a disk whose fsync takes tens of microseconds, handing it to a worker thread costs more
                # than the fsync itself; appends arriving meanwhile still queue up for the next batch.
                self._fd, elapsed = self._timed_write(self._fd, data)  # the write lock already yielded
            self._flush_seconds += (elapsed - self._flush_seconds) / 8
        except BaseException as exc:
            batch.error = self._fail(exc)
            batch.done = True
            if isinstance(exc, Exception):
                return
            raise
        if new_segment:
            self._segments.append(_Segment(self._next_segment, None))
            self._next_segment += 1
        self._segments[-1].last_seq = batch.last_seq
        self._durable_seq = batch.last_seq
        batch.done = True

    def _timed_write(self, fd: int | None, data: bytes) -> tuple[int, float]:
        started = time.perf_counter()
        fd = self._write_blocking(fd, data)
        return fd, time.perf_counter() - started

    def _write_blocking(self, fd: int | None, data: bytes) -> int:
        ops = self._ops
        if fd is None:
            fd = ops.create_exclusive(self._dir / segment_name(self._next_segment))
            try:
                write_all(ops, fd, data)
                ops.fsync(fd)
                ops.fsync_dir(self._dir)  # the new file's name must be as durable as its bytes
            except BaseException:
                ops.close(fd)
                raise
            return fd
        write_all(ops, fd, data)
        ops.fsync(fd)
        return fd

    async def checkpoint(
        self, seq: int, payload: Mapping[str, object] | Callable[[], Mapping[str, object]]
    ) -> None:
        """Durably record `payload` as the state after entry `seq`, then compact what it covers.

        `seq` must be journaled already (<= journaled_seq: an enqueued entry is made durable first, with
        every entry before it) and not older than the current checkpoint; an equal or older one is skipped.
        A mapping payload is serialized before the first await, so the caller may reuse it afterwards. A
        callable one is called, and its result serialized, in a worker
        thread, so a big state costs the event loop next to nothing: it must read only values nothing changes
        meanwhile (an immutable state), and appends may go on while it runs. Written by temp file, fsync,
        rename, directory fsync; only then are the journal segments wholly at or before `seq` and older
        checkpoints deleted. A crash at any step recovers the same state. A failure is fatal for the store
        (StoreFailed), as for appends; a payload that cannot be encoded or is too big raises ValueError or
        TypeError, and nothing is written.
        """
        self._check_writable()
        if seq > self.journaled_seq:
            raise ValueError(f"checkpoint seq {seq} is beyond the journaled seq {self.journaled_seq}")
        if seq <= self._checkpoint_seq:
            return
        made = None if callable(payload) else _checkpoint_bytes(seq, payload)
        if seq > self._durable_seq:
            await self.sync()  # a checkpoint is never ahead of the durable journal it compacts
        async with self._checkpoint_lock:
            if seq <= self._checkpoint_seq:
                return
            if made is None:
                assert callable(payload)
                made = await trio.to_thread.run_sync(_made_checkpoint_bytes, seq, payload)
            data, parts = made
            self._check_writable()  # it may have failed or closed while the thread encoded
            name = checkpoint_name(seq)
            try:
                await trio.to_thread.run_sync(self._write_checkpoint_blocking, name, data)
            except Exception as exc:
                raise self._fail(exc) from exc
            self._checkpoint_seq = seq
            stale_checkpoints = self._checkpoints
            self._checkpoints = [name]
            stale_parts = sorted(self._parts - parts)
            self._parts = parts
            with trio.CancelScope(shield=True):
                async with self._write_lock:
                    batch = self._open_batch
                    if batch is not None and batch.written:
                        # Lines `enqueue` wrote into this segment are made durable in it first: the
                        # compaction below may delete it, and the next segment must not repeat them.
                        await self._flush(batch)
                        if batch.error is not None:
                            raise StoreFailed(f"{self._dir}: written entries not durable") from batch.error
                    # Later appends start a new segment, so the current one can be deleted wholesale by the
                    # next checkpoint; no file is ever rewritten.
                    rotated, self._fd = self._fd, None
                    victims = [s.number for s in self._segments if s.last_seq is None or s.last_seq <= seq]
                try:
                    await trio.to_thread.run_sync(
                        self._compact_blocking, rotated, victims, [*stale_checkpoints, *stale_parts]
                    )
                except Exception as exc:
                    raise self._fail(exc) from exc
                self._segments = [s for s in self._segments if s.number not in victims]

    def _write_checkpoint_blocking(self, name: str, data: bytes) -> None:
        ops = self._ops
        temp = self._dir / (name + TEMP_SUFFIX)
        fd = ops.create_exclusive(temp)
        try:
            write_all(ops, fd, data)
            ops.fsync(fd)
        finally:
            ops.close(fd)
        ops.rename(temp, self._dir / name)
        ops.fsync_dir(self._dir)

    def write_parts(self, seq: int, parts: Sequence[Mapping[str, object]]) -> list[str]:
        """Durably write each mapping as a part of the checkpoint at `seq` and return their names, for its
        payload to name under `PARTS_KEY`. Blocking: called from a checkpoint's payload callable, in its
        worker thread. A part the current checkpoint names already is not written again. The parts are
        durable (file and directory fsynced) before the checkpoint that names them is written."""
        names: list[str] = []
        written = False
        for members in parts:
            name, data = part_bytes(seq, members)
            names.append(name)
            if name in self._parts:
                continue
            temp = self._dir / (name + TEMP_SUFFIX)
            fd = self._ops.create_exclusive(temp)
            try:
                write_all(self._ops, fd, data)
                self._ops.fsync(fd)
            finally:
                self._ops.close(fd)
            self._ops.rename(temp, self._dir / name)
            written = True
        if written:
            self._ops.fsync_dir(self._dir)
        return names

    def _compact_blocking(self, rotated: int | None, segments: list[int], files: list[str]) -> None:
        """Delete the segments and files (older checkpoints, then the parts no checkpoint names any more:
        a checkpoint that is still here always finds its parts) the new checkpoint covers."""
        ops = self._ops
        if rotated is not None:
            ops.close(rotated)
        for number in segments:
            ops.unlink(self._dir / segment_name(number))
        for name in files:
            ops.unlink(self._dir / name)
        if segments or files:
            ops.fsync_dir(self._dir)

    async def aclose(self) -> None:
        """Wait for an in-flight batch, write what `enqueue` queued, then release the files and the lock.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                batch = self._open_batch
                if batch is not None and not batch.done:  # queued by `enqueue`, never waited on
                    await self._flush(batch)
                data_fd, lock_fd = self._fd, self._lock_fd
                self._fd = self._lock_fd = None
                close_both(self._ops, data_fd, lock_fd)

    async def __aenter__(self) -> JournalStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _checkpoint_bytes(seq: int, payload: Mapping[str, object]) -> tuple[bytes, frozenset[str]]:
    """The checkpoint record's bytes, and the parts its payload names (`write_parts`)."""
    data = encode_record("payload", seq, payload, yielding=True) + b"\n"
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"checkpoint of {len(data)} bytes exceeds {MAX_CHECKPOINT_BYTES}")
    refs = payload.get(PARTS_KEY, {})
    assert isinstance(refs, Mapping)
    return data, frozenset(name for names in refs.values() for name in names)


def _made_checkpoint_bytes(
    seq: int, make: Callable[[], Mapping[str, object]]
) -> tuple[bytes, frozenset[str]]:
    return _checkpoint_bytes(seq, make())
