# The ledger store on real files: round trips, checkpoints that connect, compaction, private permissions
# whatever the umask, torn tails kept and ignored, every other damage refused with its file and offset and
# no byte changed, group commit, and the read-only doctor and export.
from __future__ import annotations

import errno
import json
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from harness.io.doctor import export_store, export_team, inspect_data_dir, inspect_store
from harness.io.fileops import FileOps
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import (
    CorruptState,
    StoreFailed,
    StoreLocked,
    _covered_seq,
    checkpoint_name,
    encode_record,
    ledger_store_dir,
    scan_store,
    segment_name,
)
from tests.journal_support import FaultyOps, bodies, fill, os_error, snapshot, state


async def test_round_trip_and_reopen(tmp_path: Path) -> None:
    store, recovery = await JournalStore.open(tmp_path / "s")
    assert recovery.checkpoint is None and recovery.entries == () and recovery.last_seq == 0
    seqs = [await store.append({"n": i, "text": "héllo\nworld"}) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    await store.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await store.append({"late": True})

    store, recovery = await JournalStore.open(tmp_path / "s")
    assert [e.seq for e in recovery.entries] == seqs
    assert bodies(recovery) == [{"n": i, "text": "héllo\nworld"} for i in range(5)]
    assert await store.append({"n": 5}) == 6
    await store.aclose()
    _, recovery = await JournalStore.open(tmp_path / "s")
    assert recovery.last_seq == 6


async def test_one_writer_per_store(tmp_path: Path) -> None:
    store, _ = await JournalStore.open(tmp_path / "s")
    with pytest.raises(StoreLocked):
        await JournalStore.open(tmp_path / "s")
    await store.aclose()
    again, _ = await JournalStore.open(tmp_path / "s")
    await again.aclose()


async def test_checkpoint_connects_and_compacts(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    store, _ = await JournalStore.open(directory)
    items: list[object] = []
    policy = CheckpointPolicy(every=10)
    checkpoints = 0
    for i in range(45):
        items.append({"n": i})
        await store.append({"n": i})
        if policy.due(store):
            await store.checkpoint(store.durable_seq, {"items": list(items)})
            checkpoints += 1
    assert checkpoints == 4 and store.checkpoint_seq == 40 and store.entries_since_checkpoint == 5
    with pytest.raises(ValueError, match="beyond the journaled seq"):
        await store.checkpoint(46, {"items": []})
    await store.checkpoint(30, {"items": []})  # older than the current one: skipped
    await store.aclose()

    names = sorted(os.listdir(directory))
    # Only the newest checkpoint remains; segments wholly behind it are gone.
    assert [n for n in names if n.startswith("checkpoint")] == [checkpoint_name(40)]
    assert len([n for n in names if n.startswith("journal")]) <= 2
    store, recovery = await JournalStore.open(directory)
    assert recovery.checkpoint_seq == 40 and [e.seq for e in recovery.entries] == [41, 42, 43, 44, 45]
    assert state(recovery) == items
    assert await store.append({"n": 45}) == 46
    await store.aclose()


async def test_an_entry_that_rides_right_after_a_checkpoint_is_on_disk_when_ride_returns(
    tmp_path: Path,
) -> None:
    """A checkpoint starts a new segment for later entries, so an entry that rides then cannot be written
    into a file at once: `ride` makes it durable instead. Killing the process right after loses none (read
    here as a restart reads a store nobody closed)."""
    directory = tmp_path / "s"
    store, _ = await JournalStore.open(directory)
    await store.append({"n": 0})
    await store.checkpoint(1, {"items": [{"n": 0}]})
    assert await store.ride([{"n": 1}]) == [2]
    assert [(e.seq, e.body) for e in scan_store(directory, FileOps()).recovery.entries] == [(2, {"n": 1})]
    assert store.durable_seq == 2
    assert await store.ride([{"n": 2}]) == [3]  # the segment exists now: written at once, no fsync
    assert store.durable_seq == 2
    assert [e.seq for e in scan_store(directory, FileOps()).recovery.entries] == [2, 3]
    await store.aclose()


async def test_a_sync_after_another_flush_failed_with_its_entries_is_a_failure(tmp_path: Path) -> None:
    """An enqueued entry is flushed by whichever append or sync takes its batch first. When that flush fails,
    a later `sync` finds no batch open; it must still say that the entry is not durable, or a riding report
    would be committed though it was never written (the review of this session found it returned)."""
    store, _ = await JournalStore.open(tmp_path / "s", ops=FaultyOps(_fsync_fails))
    assert store.enqueue([{"n": 1}]) == [1]
    queued = store.queue([{"n": 2}])  # the same batch: its flush fails
    with pytest.raises(StoreFailed):
        await store.durable(queued)
    with pytest.raises(StoreFailed):
        await store.sync()
    await store.aclose()


def _fsync_fails(name: str, args: tuple[object, ...]) -> None:
    if name == "fsync":
        raise os_error(errno.EIO)


async def test_checkpoint_of_everything_then_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    await fill(directory, 8, checkpoint_at=8)
    assert not [n for n in os.listdir(directory) if n.startswith("journal")]
    store, recovery = await JournalStore.open(directory)
    assert recovery.checkpoint_seq == 8 and recovery.entries == () and len(state(recovery)) == 8
    assert await store.append({"n": 8}) == 9
    await store.aclose()
    _, recovery = await JournalStore.open(directory)
    assert [e.seq for e in recovery.entries] == [9]


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_zero")
async def test_private_permissions_under_umask_zero(tmp_path: Path) -> None:
    directory = ledger_store_dir(tmp_path / "home", "t1")
    store, _ = await JournalStore.open(directory)
    await store.append({"n": 1})
    await store.checkpoint(1, {"items": [{"n": 1}]})
    await store.append({"n": 2})
    await store.aclose()
    for path in (tmp_path / "home", tmp_path / "home" / "teams", directory.parent, directory):
        assert _mode(path) == 0o700, path
    files = os.listdir(directory)
    assert len(files) >= 3
    for name in files:
        assert _mode(directory / name) == 0o600, name

    # Loosened by hand: opening tightens them again.
    directory.chmod(0o755)
    for name in files:
        (directory / name).chmod(0o644)
    store, _ = await JournalStore.open(directory)
    await store.aclose()
    assert _mode(directory) == 0o700
    assert all(_mode(directory / name) == 0o600 for name in files)


async def test_leftover_temp_files_are_removed_at_open(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    await fill(directory, 3)
    (directory / (checkpoint_name(3) + ".tmp")).write_bytes(b'{"v":1,"seq":3,"pay')
    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    assert recovery.last_seq == 3
    assert not [n for n in os.listdir(directory) if n.endswith(".tmp")]


async def test_torn_final_record_is_ignored_and_kept(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    entries = await fill(directory, 4)
    segment = directory / segment_name(1)
    whole = segment.read_bytes()
    torn = whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 1] + b'{"v":1,"seq":4,"entry":{"n":3,'
    segment.write_bytes(torn)  # record 4 was never acknowledged; it is only half there

    store, recovery = await JournalStore.open(directory)
    assert bodies(recovery) == entries[:3]
    assert await store.append({"n": "new"}) == 4
    await store.aclose()
    assert segment.read_bytes() == torn  # not a byte of the torn tail changed
    assert (directory / segment_name(2)).exists()

    store, recovery = await JournalStore.open(directory)
    assert bodies(recovery) == [*entries[:3], {"n": "new"}]
    await store.aclose()
    report = inspect_store(directory)
    assert report["tornTail"] is True and report["damage"] is None and report["lastSeq"] == 4


@pytest.mark.parametrize("cut", ["no_newline", "bad_checksum", "zeros"])
async def test_torn_tail_variants(tmp_path: Path, cut: str) -> None:
    directory = tmp_path / "s"
    entries = await fill(directory, 3)
    segment = directory / segment_name(1)
    whole = segment.read_bytes()
    if cut == "no_newline":  # the write stopped just before the newline: complete, but never acknowledged
        damaged = whole[:-1]
    elif cut == "bad_checksum":
        damaged = whole[:-3] + b'"}'
    else:  # a file extended with zeros, as a power cut can leave it
        damaged = whole + bytes(300)
    segment.write_bytes(damaged)
    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    assert bodies(recovery) == (entries[:2] if cut != "zeros" else entries)
    assert segment.read_bytes() == damaged


def _record(seq: int, body: dict[str, object], version: int = 1, field: str = "entry") -> bytes:
    head = b'{"v":%d,"seq":%d,"%s":' % (version, seq, field.encode())
    head += json.dumps(body, separators=(",", ":")).encode()
    return head + b',"crc":"%08x"}\n' % zlib.crc32(head)


def _damage_cases(whole: bytes) -> dict[str, tuple[bytes, int]]:
    lines = whole.split(b"\n")[:-1]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    flipped = bytearray(whole)
    flipped[offsets[1] + 20] ^= 0x01
    return {
        "bad_checksum_in_middle": (bytes(flipped), offsets[1]),
        "unparseable": (whole[: offsets[2]] + b"not json at all\n" + whole[offsets[2] :], offsets[2]),
        "wrong_version": (whole + _record(len(lines) + 1, {"n": 9}, version=2), offsets[-1]),
        "seq_gap": (whole + _record(len(lines) + 2, {"n": 9}), offsets[-1]),
        "newline_damaged": (whole[:-1] + b"x", offsets[-1] - 1),
        "blank_line": (whole[: offsets[1]] + b"\n" + whole[offsets[1] :], offsets[1]),
        "nested_too_deep": (whole + _deep_record(len(lines) + 1), offsets[-1]),
    }


def _deep_record(seq: int) -> bytes:
    """A record whose checksum vouches for a body nested past the parser's recursion limit: the store wrote
    no such record, and reading it must refuse the store, not end the process with RecursionError."""
    head = b'{"v":1,"seq":%d,"entry":{"n":' % seq + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return head + b',"crc":"%08x"}\n' % zlib.crc32(head)


@pytest.mark.parametrize(
    "case",
    [
        "bad_checksum_in_middle", "unparseable", "wrong_version", "seq_gap", "newline_damaged", "blank_line",
        "nested_too_deep",
    ],
)
async def test_damage_is_corrupt_state_and_nothing_changes(tmp_path: Path, case: str) -> None:
    directory = tmp_path / "s"
    await fill(directory, 5)
    segment = directory / segment_name(1)
    damaged, offset = _damage_cases(segment.read_bytes())[case]
    segment.write_bytes(damaged)
    (directory / "checkpoint-00000000000000000009.json.tmp").write_bytes(b"half")
    before = snapshot(directory)
    with pytest.raises(CorruptState) as info:
        await JournalStore.open(directory)
    assert info.value.code == "corrupt_state"
    assert info.value.path == segment and info.value.offset == offset
    assert f"{segment} at byte {offset}" in str(info.value)
    assert snapshot(directory) == before  # not even the temp file was removed
    report = inspect_store(directory)
    assert report["ok"] is False and report["damage"] == {
        "file": str(segment), "offset": offset, "reason": info.value.reason
    }


def test_a_covered_entry_is_read_by_the_head_the_store_writes() -> None:
    """The scan skips parsing an entry its checkpoint covers only if it knows `encode_record`'s head: were
    the two to drift apart, every covered entry would be parsed again and no other test would notice."""
    record = encode_record("entry", 41, {"type": "record_delivery", "noticeId": "t1/q1/question"})
    assert _covered_seq(record, 41) == 41 and _covered_seq(record, 50) == 41
    assert _covered_seq(record, 40) is None  # replayed: parsed whole
    assert _covered_seq(encode_record("payload", 41, {}), 41) is None  # a checkpoint is never an entry


@pytest.mark.parametrize(
    "case", ["bad_checksum", "unparseable", "seq_gap", "seq_repeated", "wrong_version", "foreign_head"]
)
async def test_damage_to_entries_a_checkpoint_covers_is_corrupt_state_too(tmp_path: Path, case: str) -> None:
    """A scan reads the seq of an entry its checkpoint covers from the head the store wrote, without parsing
    the entry's body (a replay never reads it): its checksum and its place in the sequence are checked all
    the same, and a record that does not start as the store writes one is parsed whole."""
    directory = tmp_path / "s"
    entries = await fill(directory, 5)
    store, _ = await JournalStore.open(directory)
    await store.checkpoint(3, {"items": entries[:3]})  # behind the journal's end: segment 1 stays
    await store.aclose()
    segment = directory / segment_name(1)
    lines = segment.read_bytes().split(b"\n")[:-1]
    assert len(lines) == 5, "the covered entries 1-3 share segment 1 with 4-5"
    at = len(lines[0]) + 1  # seq 2, covered
    flipped = bytearray(lines[1])
    flipped[20] ^= 0x01
    foreign = b'{"seq":2,"v":1,"entry":[]'  # a valid record's keys in another order, its body not an object
    second = {
        "bad_checksum": bytes(flipped) + b"\n",
        "unparseable": b"not json at all\n" + lines[1] + b"\n",
        "seq_gap": _record(7, {"n": 1}),
        "seq_repeated": _record(1, {"n": 1}),
        "wrong_version": _record(2, {"n": 1}, version=2),
        "foreign_head": foreign + b',"crc":"%08x"}\n' % zlib.crc32(foreign),
    }[case]
    segment.write_bytes(lines[0] + b"\n" + second + b"".join(line + b"\n" for line in lines[2:]))
    with pytest.raises(CorruptState) as info:
        await JournalStore.open(directory)
    assert info.value.path == segment and info.value.offset == at, info.value.reason


async def test_checkpoint_that_does_not_connect(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    await fill(directory, 6, checkpoint_at=3)  # checkpoint 3; the journal keeps 4..6
    # A checkpoint at seq 2 (well formed) in its place leaves seq 3 covered by nothing.
    os.unlink(directory / checkpoint_name(3))
    (directory / checkpoint_name(2)).write_bytes(_record(2, {"items": [0, 1]}, field="payload"))
    before = snapshot(directory)
    with pytest.raises(CorruptState, match="does not connect") as info:
        await JournalStore.open(directory)
    assert info.value.path == directory / segment_name(2) and info.value.offset == 0
    assert snapshot(directory) == before


async def test_damaged_checkpoint_is_corrupt_state(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    await fill(directory, 4, checkpoint_at=4)
    path = directory / checkpoint_name(4)
    path.write_bytes(path.read_bytes().replace(b'"seq":4', b'"seq":5'))
    before = snapshot(directory)
    with pytest.raises(CorruptState, match="checksum mismatch") as info:
        await JournalStore.open(directory)
    assert info.value.path == path
    assert snapshot(directory) == before


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    in_fsync, release = trio.Event(), trio.Event()
    token = trio.lowlevel.current_trio_token()
    ops = FaultyOps()

    def hold_first_fsync(name: str, args: tuple[object, ...]) -> None:
        if name == "fsync" and ops.calls.count("fsync") == 1:
            trio.from_thread.run_sync(in_fsync.set, trio_token=token)
            trio.from_thread.run(release.wait, trio_token=token)

    ops.hook = hold_first_fsync
    store, _ = await JournalStore.open(tmp_path / "s", ops=ops)
    seqs: list[int] = []

    async def one(i: int) -> None:
        seqs.append(await store.append({"i": i}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)
        await in_fsync.wait()
        for i in range(1, 32):
            nursery.start_soon(one, i)
        await trio.testing.wait_all_tasks_blocked()
        assert seqs == []  # nobody is acknowledged while the first fsync runs
        release.set()
    await store.aclose()
    assert sorted(seqs) == list(range(1, 33))
    assert ops.calls.count("fsync") == 2  # the first entry's, then one for the 31 that arrived meanwhile
    _, recovery = await JournalStore.open(tmp_path / "s")
    assert sorted(int(str(e.body["i"])) for e in recovery.entries) == list(range(32))


async def test_cancelled_append_is_still_written(tmp_path: Path) -> None:
    store, _ = await JournalStore.open(tmp_path / "s")
    with trio.CancelScope() as scope:
        scope.cancel()
        seq = await store.append({"n": 1})  # the write is shielded: it completes, then the scope unwinds
    assert seq == 1 and store.durable_seq == 1
    await store.aclose()


async def test_doctor_reports_each_store_read_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    await fill(ledger_store_dir(home, "good"), 5, checkpoint_at=3)
    await fill(ledger_store_dir(home, "bad"), 3)
    await fill(home / "teams" / "delivery", 2)
    bad = ledger_store_dir(home, "bad") / segment_name(1)
    data = bytearray(bad.read_bytes())
    data[5] ^= 0x20
    bad.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    stat_before = {p: p.stat().st_mtime_ns for p in home.rglob("*")}

    report = json.loads(json.dumps(inspect_data_dir(home)))  # JSON-able, and typed as what a client sees
    assert report["ok"] is False
    stores = {s.get("teamId", s["kind"]): s for s in report["stores"]}
    assert stores["good"]["ok"] is True and stores["good"]["lastSeq"] == 5
    assert stores["good"]["checkpointSeq"] == 3 and stores["good"]["entriesAfterCheckpoint"] == 2
    assert stores["good"]["tornTail"] is False
    assert stores["bad"]["damage"]["file"] == str(bad) and stores["bad"]["damage"]["offset"] == 0
    assert stores["delivery"]["ok"] is True and stores["delivery"]["lastSeq"] == 2

    one = json.loads(json.dumps(inspect_data_dir(home, team_id="good")))
    assert [s["teamId"] for s in one["stores"]] == ["good"]
    missing = inspect_data_dir(home, team_id="nope")
    assert missing["ok"] is False

    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
    assert {p: p.stat().st_mtime_ns for p in home.rglob("*")} == stat_before


async def test_export_is_the_recovered_state(tmp_path: Path) -> None:
    home = tmp_path / "home"
    entries = await fill(ledger_store_dir(home, "t"), 7, checkpoint_at=4)
    out = tmp_path / "backup.json"
    summary = export_team(home, "t", out)
    assert summary["lastSeq"] == 7 and summary["entries"] == 3
    document = json.loads(out.read_text())
    assert document["format"] == "harness.store-export" and document["lastSeq"] == 7
    assert document["checkpoint"] == {"seq": 4, "payload": {"items": entries[:4]}}
    assert document["entries"] == [{"seq": 5 + i, "entry": e} for i, e in enumerate(entries[4:])]
    assert _mode(out) == 0o600
    with pytest.raises(FileExistsError):
        export_store(ledger_store_dir(home, "t"), out)

    segment = ledger_store_dir(home, "t") / sorted(
        n for n in os.listdir(ledger_store_dir(home, "t")) if n.startswith("journal")
    )[-1]
    segment.write_bytes(b"garbage\n" + segment.read_bytes())
    with pytest.raises(CorruptState):
        export_store(ledger_store_dir(home, "t"), tmp_path / "other.json", ops=FileOps())
    assert not (tmp_path / "other.json").exists()
