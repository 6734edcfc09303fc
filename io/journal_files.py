# The ledger store's files, without the store: their names and format, the store's errors, and a read-only,
# validating scan. Everything that only reads a store (doctor, export, a desk finding which teams are known)
# needs this and not the async writer of io/journal.py, so it imports no trio: a read command starts fast.
#
# On-disk layout of one store directory (0700, files 0600):
#   lock                                  flock(2) target: one writer process per store
#   journal-<segment:12>.jsonl            records {"v":1,"seq":N,"entry":{...},"crc":"xxxxxxxx"} one a line
#   checkpoint-<seq:20>.json              one record {"v":1,"seq":N,"payload":{...},"crc":"..."} + newline
#   part-<digest:32>.json                 one record {"v":1,"seq":N,"part":{...},"crc":"..."} + newline:
#                                         members of one field of a checkpoint's payload, which names its
#                                         parts under "$parts" ({field: [part names]}); a part is written
#                                         once and referenced by every later checkpoint while its members
#                                         stay the same: a big state's checkpoint rewrites only what changed
#   *.tmp                                 a checkpoint or part being written; removed when the store is opened
# The crc is zlib.crc32 of the record's bytes up to `,"crc"`, so every line stays plain JSON for `jq`.
# The directory and each of these files is what its name says, never a symlink (so never followed out of the
# data directory) nor a FIFO, device or directory where a file belongs: any other is damage, as are a
# checkpoint or part larger than any the store writes and a segment line longer than any (read a part at a
# time, so a huge segment costs no more memory than its longest line).
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

import attrs

from harness.core.bounded_json import parse_own
from harness.core.errors import ErrorCode
from harness.io.fileops import PRIVATE_DIR_MODE, ChunkLines, FileOps, UnfitFile

FORMAT_VERSION: Final = 1
# A full ledger (500 exchanges at their largest) serializes well below this; refusing to read more keeps a
# damaged or foreign file from exhausting memory during recovery.
MAX_CHECKPOINT_BYTES: Final = 256 << 20
# The longest journal line (newline included) a store writes: a board's checkpoint is a journal record
# (io/board_runner.py). `append` refuses a longer one; in a segment, a longer one is damage.
MAX_LINE_BYTES: Final = MAX_CHECKPOINT_BYTES
# Readers that run beside a live daemon (doctor, export) retry when compaction deletes a file they listed.
_SCAN_ATTEMPTS: Final = 5

LOCK_NAME: Final = "lock"
TEMP_SUFFIX: Final = ".tmp"
_SEGMENT_RE: Final = re.compile(r"journal-(\d{12})\.jsonl")
_CHECKPOINT_RE: Final = re.compile(r"checkpoint-(\d{20})\.json")
_PART_RE: Final = re.compile(r"part-[0-9a-f]{32}\.json")
PARTS_KEY: Final = "$parts"  # in a checkpoint's payload: {field: [part names]}; no state's JSON has a `$` key
_CRC_SUFFIX_RE: Final = re.compile(rb',"crc":"([0-9a-f]{8})"\}')
_CRC_SUFFIX_LEN: Final = len(b',"crc":"00000000"}')
# The head `encode_record` writes: a checksummed record that starts so names its seq without a JSON parse.
_ENTRY_HEAD_RE: Final = re.compile(rb'\{"v":%d,"seq":([1-9][0-9]{0,18}),"entry":\{' % FORMAT_VERSION)
_SLICE: Final = 128  # members of a big object or list encoded in one call: ~1 ms of a desk's notices

TEAMS_DIR: Final = "teams"


def ledgers_dir(data_dir: Path) -> Path:
    """The parent of every team ledger store under the daemon data directory."""
    return data_dir / TEAMS_DIR / "ledgers"


def ledger_store_dir(data_dir: Path, team_id: str) -> Path:
    """Where the owner's ledger of team `team_id` lives under the daemon data directory."""
    return ledgers_dir(data_dir) / team_id


def delivery_store_dir(data_dir: Path) -> Path:
    """Where this machine's delivery desk (as a destination) lives under the daemon data directory."""
    return data_dir / TEAMS_DIR / "delivery"


def part_bytes(seq: int, members: Mapping[str, object]) -> tuple[str, bytes]:
    """A part's file name and bytes: the name is the digest of the bytes, so the same members written at the
    same checkpoint seq are the same file, and a name never stands for two contents."""
    data = encode_record("part", seq, members, yielding=True) + b"\n"
    return f"part-{hashlib.sha256(data).hexdigest()[:32]}.json", data


def segment_name(number: int) -> str:
    return f"journal-{number:012d}.jsonl"


def checkpoint_name(seq: int) -> str:
    return f"checkpoint-{seq:020d}.json"


class StoreError(Exception):
    """Base of the store's errors; `code` is a stable string for the outside contract."""

    code: str = "store_error"


class CorruptState(StoreError):
    """The store's files hold damage other than a torn final record. Nothing was changed or deleted."""

    code = ErrorCode.CORRUPT_STATE

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path} at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StoreFailed(StoreError):
    """A write, fsync, rename or delete failed. This store refuses all writes until it is reopened."""

    code = "store_failed"


class StoreLocked(StoreError):
    """Another process has this store open."""

    code = "store_locked"


@attrs.frozen
class Entry:
    seq: int
    body: dict[str, object]


@attrs.frozen
class Recovery:
    """What a store held when opened: the newest checkpoint and the journal entries connected after it."""

    checkpoint_seq: int  # 0 when there is no checkpoint
    checkpoint: dict[str, object] | None
    entries: tuple[Entry, ...]
    # The checkpoint's parts, in the order it names them: (name, the members' keys it put back).
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else self.checkpoint_seq


@attrs.frozen
class SegmentInfo:
    name: str
    number: int
    size: int
    first_seq: int | None  # None when the segment holds no complete record
    last_seq: int | None
    records: int
    torn_offset: int | None  # where an ignored torn final record starts


@attrs.frozen
class StoreScan:
    """A read-only, fully validated picture of one store directory."""

    directory: Path
    recovery: Recovery
    checkpoints: tuple[str, ...]  # every checkpoint file, oldest first; the last one is in `recovery`
    segments: tuple[SegmentInfo, ...]  # in segment order
    temp_files: tuple[str, ...]
    parts: frozenset[str] = frozenset()  # the parts the newest checkpoint names (joined into its payload)
    stray_parts: tuple[str, ...] = ()  # parts no checkpoint here names: left by a crash, removed at open


# --- encoding ---------------------------------------------------------------------------------------------


def encode_record(field: str, seq: int, body: Mapping[str, object], *, yielding: bool = False) -> bytes:
    """One record's bytes (without its newline). `yielding`: for a big body encoded in a worker thread."""
    text = _json_in_slices(body) if yielding else _json(body)
    head = b'{"v":%d,"seq":%d,"%s":' % (FORMAT_VERSION, seq, field.encode()) + text.encode()
    return head + b',"crc":"%08x"}' % zlib.crc32(head)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_in_slices(body: Mapping[str, object]) -> str:
    """`_json(body)`, the same text, made a slice at a time. The C encoder holds the GIL for a whole call, so
    one call over a desk's 10,000 notices would stop the event loop's thread for as long as the worker thread
    encodes; between slices the loop gets its turn. Only a top-level field's big object or list is sliced."""
    if type(body) is not dict or any(type(key) is not str for key in body):
        return _json(body)
    parts = []
    for key, value in body.items():
        if type(value) is dict and len(value) > _SLICE:
            items = list(value.items())
            slices = (_json(dict(items[at : at + _SLICE]))[1:-1] for at in range(0, len(items), _SLICE))
            parts.append(f"{_json(key)}:{{{','.join(slices)}}}")
        elif type(value) is list and len(value) > _SLICE:
            slices = (_json(value[at : at + _SLICE])[1:-1] for at in range(0, len(value), _SLICE))
            parts.append(f"{_json(key)}:[{','.join(slices)}]")
        else:
            parts.append(f"{_json(key)}:{_json(value)}")
    return "{" + ",".join(parts) + "}"


def _decode(record: bytes, field: str) -> tuple[int, dict[str, object]] | str:
    """The (seq, body) of one record without its newline, or why it is not a valid record."""
    why = _unchecked(record)
    if why is not None:
        return why
    return _decode_checked(record, field)


def _unchecked(record: bytes) -> str | None:
    """Why the record's checksum does not vouch for its bytes; None when it does."""
    match = _CRC_SUFFIX_RE.fullmatch(record, max(0, len(record) - _CRC_SUFFIX_LEN))
    if match is None:
        return "record does not end with a checksum"
    if zlib.crc32(record[: match.start()]) != int(match.group(1), 16):
        return "checksum mismatch"
    return None


def _covered_seq(record: bytes, after_seq: int) -> int | None:
    """The seq of a checksummed entry record that a checkpoint covers (at most `after_seq`), read from the
    head `encode_record` wrote, without parsing its body: at a store's checkpoint most of its segments'
    entries are covered, and a replay never reads them. None: parse the whole record."""
    head = _ENTRY_HEAD_RE.match(record)
    if head is None:
        return None
    seq = int(head.group(1))
    return seq if seq <= after_seq else None


def _decode_checked(record: bytes, field: str) -> tuple[int, dict[str, object]] | str:
    try:
        obj = parse_own(record)
    except ValueError as error:  # a record nested past the parser's recursion too: the store wrote no such
        return f"checksummed record is not JSON ({error})"
    if not isinstance(obj, dict) or set(obj) != {"v", "seq", field, "crc"}:
        return f"record is not a {field} record"
    if obj["v"] != FORMAT_VERSION:
        return f"unsupported format version {obj['v']!r} (this build reads {FORMAT_VERSION})"
    seq, body = obj["seq"], obj[field]
    if type(seq) is not int or seq < 1 or not isinstance(body, dict):
        return "record has a malformed seq or body"
    return seq, body


def _hidden_record_end(tail: bytes) -> int | None:
    """If an unterminated tail holds a whole valid record followed by more bytes, where that record ends.

    A torn write leaves a prefix of one record. A complete record followed by stray bytes instead is not a
    prefix of anything the store writes: the newline that ended an acknowledged record was damaged.
    """
    for match in _CRC_SUFFIX_RE.finditer(tail):
        if match.end() < len(tail) and zlib.crc32(tail[: match.start()]) == int(match.group(1), 16):
            return match.end()
    return None


# --- scanning (read-only) -----------------------------------------------------------------------------------


def _parse_segment(
    path: Path, chunks: Iterable[bytes], number: int, after_seq: int, sink: list[Entry]
) -> SegmentInfo:
    """Validate one segment, read as `chunks`; append its entries with seq > `after_seq` to `sink`. Memory
    holds at most one line (`ChunkLines`)."""

    def too_long(offset: int) -> CorruptState:
        return CorruptState(path, offset, "a record longer than any this store writes")

    first: int | None = None
    last: int | None = None
    records = 0
    lines = ChunkLines(chunks, MAX_LINE_BYTES, too_long)
    for offset, record in lines:
        why = _unchecked(record)
        if why is not None:
            raise CorruptState(path, offset, why)
        seq_only = _covered_seq(record, after_seq)
        if seq_only is None:
            decoded = _decode_checked(record, "entry")
            if isinstance(decoded, str):
                raise CorruptState(path, offset, decoded)
            seq, body = decoded
        else:
            seq, body = seq_only, {}
        if last is not None and seq != last + 1:
            why = f"entry seq {seq} does not follow seq {last} in the same segment"
            raise CorruptState(path, offset, why)
        if first is None:
            first = seq
        last = seq
        records += 1
        if seq > after_seq:
            sink.append(Entry(seq, body))
    start, rest = lines.end, lines.rest
    torn: int | None = None
    if rest:
        hidden = _hidden_record_end(rest)
        if hidden is not None:
            raise CorruptState(
                path, start + hidden, "bytes after a complete final record where its newline belongs"
            )
        torn = start
    return SegmentInfo(path.name, number, start + len(rest), first, last, records, torn)


def _joined(
    directory: Path, ops: FileOps, checkpoint: str, payload: dict[str, object]
) -> tuple[dict[str, object], tuple[tuple[str, tuple[str, ...]], ...]]:
    """The checkpoint's payload with the members of its parts put back into their fields, and each part's
    name and members' keys. A part that is gone while its checkpoint is still here is damage; gone with its
    checkpoint, it was compacted while this scan read them (FileNotFoundError: `scan_store_consistent` scans
    again)."""
    path = directory / checkpoint
    refs = payload.pop(PARTS_KEY)
    if not isinstance(refs, dict) or not all(
        isinstance(names, list) and all(isinstance(n, str) and _PART_RE.fullmatch(n) for n in names)
        for names in refs.values()
    ):
        raise CorruptState(path, 0, f"the checkpoint's {PARTS_KEY} is not a map of fields to part names")
    joined: dict[str, tuple[str, ...]] = {}
    for field, names in refs.items():
        members = payload.get(field)
        if not isinstance(members, dict):
            raise CorruptState(path, 0, f"the checkpoint's field {field!r} has parts and is not an object")
        for name in names:
            part = directory / name
            try:
                data = ops.read_bytes(part, MAX_CHECKPOINT_BYTES)
            except FileNotFoundError:
                if checkpoint not in ops.listdir(directory):
                    raise
                raise CorruptState(part, 0, f"a part {checkpoint} names is missing") from None
            items = _parse_part(part, data)
            if name in joined or members.keys() & items.keys():
                raise CorruptState(part, 0, f"a part repeats a member of {checkpoint}'s {field!r}")
            members.update(items)
            joined[name] = tuple(items)
    return payload, tuple(joined.items())


def _parse_part(path: Path, data: bytes) -> dict[str, object]:
    if not data.endswith(b"\n") or data.find(b"\n") != len(data) - 1:
        raise CorruptState(path, 0, "part is not one record and a newline")
    decoded = _decode(data[:-1], "part")
    if isinstance(decoded, str):
        raise CorruptState(path, 0, decoded)
    return decoded[1]


def _parse_checkpoint(path: Path, data: bytes, seq_in_name: int) -> dict[str, object]:
    if not data.endswith(b"\n"):
        raise CorruptState(path, len(data), "checkpoint does not end with a newline")
    newline = data.find(b"\n")
    if newline != len(data) - 1:
        raise CorruptState(path, newline, "checkpoint holds more than one record")
    decoded = _decode(data[:-1], "payload")
    if isinstance(decoded, str):
        raise CorruptState(path, 0, decoded)
    seq, payload = decoded
    if seq != seq_in_name:
        raise CorruptState(path, 0, f"checkpoint records seq {seq} but its name says {seq_in_name}")
    return payload


def _named_as_data(name: str) -> bool:
    return any(pattern.fullmatch(name) for pattern in (_SEGMENT_RE, _CHECKPOINT_RE, _PART_RE))


def scan_store(directory: Path, ops: FileOps) -> StoreScan:
    """Read and validate a store directory without changing anything. Raises CorruptState on damage.

    Entries at or before the newest checkpoint are validated but not returned. Records after it must
    continue it without a gap or overlap; a gap is allowed only where a checkpoint covers it (compaction may
    have deleted some but not all of the segments behind that checkpoint when a crash interrupted it).
    """
    with unfit_is_damage():
        return _scan(directory, ops)


def _scan(directory: Path, ops: FileOps) -> StoreScan:
    ops.require(directory, stat.S_IFDIR)
    names = sorted(ops.listdir(directory))
    for name in names:
        if name == LOCK_NAME or name.endswith(TEMP_SUFFIX) or _named_as_data(name):
            ops.require(directory / name)
    segments = sorted((int(m.group(1)), n) for n in names if (m := _SEGMENT_RE.fullmatch(n)))
    checkpoints = sorted((int(m.group(1)), n) for n in names if (m := _CHECKPOINT_RE.fullmatch(n)))
    temps = tuple(n for n in names if n.endswith(TEMP_SUFFIX))

    checkpoint_seq = 0
    payload: dict[str, object] | None = None
    for seq, name in checkpoints:
        path = directory / name
        payload = _parse_checkpoint(path, ops.read_bytes(path, MAX_CHECKPOINT_BYTES), seq)
        checkpoint_seq = seq
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if payload is not None and PARTS_KEY in payload:
        payload, parts = _joined(directory, ops, checkpoints[-1][1], payload)
    named = frozenset(name for name, _ in parts)

    entries: list[Entry] = []
    infos: list[SegmentInfo] = []
    prev_last: int | None = None  # last record seq of the previous segment that had records
    for number, name in segments:
        path = directory / name
        with contextlib.closing(ops.read_chunks(path)) as chunks:
            info = _parse_segment(path, chunks, number, checkpoint_seq, entries)
        if info.first_seq is not None:
            reached = prev_last or 0
            # A gap is allowed only where the checkpoint covers it; an overlap never is.
            if not reached + 1 <= info.first_seq <= max(reached, checkpoint_seq) + 1:
                raise CorruptState(
                    path, 0,
                    f"segment starts at seq {info.first_seq}, which does not connect to the history before "
                    f"it (journal seq {reached}, checkpoint seq {checkpoint_seq})",
                )
            prev_last = info.last_seq
        infos.append(info)
    return StoreScan(
        directory,
        Recovery(checkpoint_seq, payload, tuple(entries), parts),
        tuple(n for _, n in checkpoints),
        tuple(infos),
        temps,
        named,
        tuple(n for n in names if _PART_RE.fullmatch(n) and n not in named),
    )


@contextlib.contextmanager
def unfit_is_damage() -> Iterator[None]:
    """A store's file refused as unfit (of the wrong type, or too large: io/fileops.py) is that store's
    damage: CorruptState naming it, every byte left in place."""
    try:
        yield
    except UnfitFile as error:
        raise CorruptState(error.path, error.offset, error.reason) from None


def scan_store_consistent(directory: Path, ops: FileOps | None = None) -> StoreScan:
    """`scan_store` for readers beside a live writer: retries when compaction deletes a file it listed."""
    ops = ops or FileOps()
    for attempt in range(_SCAN_ATTEMPTS):
        try:
            return scan_store(directory, ops)
        except FileNotFoundError:
            if attempt == _SCAN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


# --- directories --------------------------------------------------------------------------------------------


def ensure_private_dir(ops: FileOps, directory: Path) -> None:
    """Create `directory` (0700) and its missing parents, each fsynced into its parent so that it survives a
    machine crash. The ledger store and the trace writer both keep their files in such a directory. Raises
    UnfitFile, changing nothing, when `directory` is a symlink (never followed) or not a directory."""
    missing: list[Path] = []
    probe = directory
    while not ops.is_dir(probe):
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a store opened beside us created it first
            ops.mkdir(path)
        ops.fsync_dir(path.parent)
    ops.fix_mode(directory, PRIVATE_DIR_MODE, stat.S_IFDIR)


@contextlib.contextmanager
def locked_private_dir(ops: FileOps, directory: Path, busy: Callable[[], Exception]) -> Iterator[int]:
    """`directory` made private (ensure_private_dir) and held by this process alone: yields the descriptor of
    its lock file, to be kept by what is opened there; raises `busy()` when another process holds it. If
    opening fails after the lock was taken, the lock is released, so a failed open leaves the store free."""
    ensure_private_dir(ops, directory)
    try:
        lock_fd = ops.lock(directory / LOCK_NAME)
    except BlockingIOError as error:
        raise busy() from error
    try:
        yield lock_fd
    except BaseException:
        ops.close(lock_fd)
        raise
