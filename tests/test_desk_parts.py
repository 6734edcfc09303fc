# Issue 18: a desk checkpoint at its bound rewrote all 10,000 records (~7 MB) every 256 journal entries. It is
# now cut into parts by notice seq, and a checkpoint writes again only the parts whose notices changed. These
# tests pin what that must keep: a store recovers the same state from its parts, writes an unchanged part
# once, deletes a part only when no checkpoint here names it, and treats a missing or damaged part as damage
# (nothing is deleted or overwritten), and the daemon's desk replays to the desk it checkpointed.
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio

from harness.core import delivery as d
from harness.core.codec import desk_from_json, from_json, to_json
from harness.core.limits import DEFAULT_LIMITS
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from harness.io.desk_parts import GROUP, DeskParts
from harness.io.desk_runner import replay_desk
from harness.io.doctor import export_store, inspect_store
from harness.io.fileops import FileOps
from harness.io.journal import JournalStore
from harness.io.journal_files import PARTS_KEY, CorruptState, delivery_store_dir, scan_store
from tests.journal_support import lone_desk, snapshot

MACHINE = "m1"
DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine


def _stepped(desk: d.Desk, *commands: d.DeskCommand) -> d.Desk:
    for command in commands:
        outcome = d.step(desk, command, DEFAULT_LIMITS)
        assert isinstance(outcome, Accepted), (command, outcome)
        desk = outcome.state
    return desk


def _submit(n: int, agent: str = "a1") -> d.Submit:
    notice = f"t1/q{n}/question"
    return d.Submit(n, "t1", notice, NoticeKind.QUESTION, f"q{n}", "m1", MACHINE, agent, 10**15, f"q {n}?")


def _desk(notices: int) -> d.Desk:
    """A desk holding `notices` records, each read (finished) as most of a desk at its bound is, but the
    first, still queued."""
    desk = _stepped(d.empty_desk(MACHINE), _submit(1))
    for n in range(2, notices + 1):
        desk = _stepped(desk, _submit(n), d.InboxRead(n, (f"t1/q{n}/question",)))
    return desk


async def _checkpoint(store: JournalStore, parts: DeskParts, desk: d.Desk) -> None:
    seq = await store.append({"n": store.journaled_seq + 1})
    await store.checkpoint(seq, lambda: parts.payload(store, seq, desk))


def _part_files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("part-*.json")}


async def test_a_checkpoint_writes_again_only_the_parts_whose_notices_changed(tmp_path: Path) -> None:
    desk = _desk(2 * GROUP + 10)  # three groups of notices
    store, _ = await JournalStore.open(tmp_path)
    parts = DeskParts()
    await _checkpoint(store, parts, desk)
    first = _part_files(tmp_path)
    assert len(first) == 3 and store.parts == first
    assert desk_from_json(scan_store(tmp_path, FileOps()).recovery.checkpoint) == desk

    files = {name: (tmp_path / name).stat() for name in first}
    oldest = "t1/q1/question"  # a notice of the first group changes (it is withdrawn), one joins the last
    changed = _stepped(desk, d.Withdraw(10**6, oldest, d.Reason.CANCELLED), _submit(10**6))
    assert changed.notices[oldest] != desk.notices[oldest]
    await _checkpoint(store, parts, changed)
    second = _part_files(tmp_path)
    assert len(second - first) == 2 and len(first - second) == 2, "the two replaced parts are deleted"
    [kept] = first & second  # the unchanged middle part is named again, never written again
    now = (tmp_path / kept).stat()
    assert (now.st_ino, now.st_mtime_ns) == (files[kept].st_ino, files[kept].st_mtime_ns)
    assert store.parts == second
    await store.aclose()

    reopened, recovery = await JournalStore.open(tmp_path)
    assert desk_from_json(recovery.checkpoint) == changed
    assert reopened.parts == second and PARTS_KEY not in (recovery.checkpoint or {})
    await reopened.aclose()


async def test_a_checkpoint_without_parts_leaves_no_part_behind(tmp_path: Path) -> None:
    """The ledger and `daemon prune` checkpoint a whole payload: the parts of the checkpoint before it are
    then named by none, and are deleted with it."""
    store, _ = await JournalStore.open(tmp_path)
    desk = _desk(GROUP + 1)
    await _checkpoint(store, DeskParts(), desk)
    assert len(_part_files(tmp_path)) == 2
    seq = await store.append({"n": 0})
    await store.checkpoint(seq, to_json(desk))
    assert _part_files(tmp_path) == set() and store.parts == frozenset()
    await store.aclose()
    assert from_json(scan_store(tmp_path, FileOps()).recovery.checkpoint, d.Desk) == desk


async def test_a_part_no_checkpoint_names_is_removed_at_open(tmp_path: Path) -> None:
    """A crash after a part was written and before the checkpoint naming it leaves a stray part: the scan
    reports it, the store's next open removes it, and the older checkpoint recovers with its own parts."""
    store, _ = await JournalStore.open(tmp_path)
    desk = _desk(3)
    await _checkpoint(store, DeskParts(), desk)
    [stray] = store.write_parts(99, [{"t1/q9/question": {"stray": True}}])
    await store.aclose()

    scan = scan_store(tmp_path, FileOps())
    assert scan.stray_parts == (stray,) and stray not in scan.parts
    report = inspect_store(tmp_path)
    assert report["ok"] is True and report["strayParts"] == [stray] and report["parts"] == 1
    reopened, recovery = await JournalStore.open(tmp_path)
    assert not (tmp_path / stray).exists()
    assert desk_from_json(recovery.checkpoint) == desk
    await reopened.aclose()


@pytest.mark.parametrize("damage", ["missing", "flipped byte"])
async def test_a_missing_or_damaged_part_is_damage_and_nothing_is_changed(
    tmp_path: Path, damage: str
) -> None:
    store, _ = await JournalStore.open(tmp_path)
    await _checkpoint(store, DeskParts(), _desk(GROUP + 1))
    await store.aclose()
    part = tmp_path / sorted(_part_files(tmp_path))[0]
    if damage == "missing":
        part.unlink()
    else:
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0x01
        part.write_bytes(bytes(data))
    before = snapshot(tmp_path)

    with pytest.raises(CorruptState) as refused:
        await JournalStore.open(tmp_path)
    assert refused.value.path == part
    assert snapshot(tmp_path) == before
    report = inspect_store(tmp_path)
    assert report["ok"] is False
    assert isinstance(report["damage"], Mapping) and report["damage"]["file"] == str(part)


async def test_an_export_holds_the_whole_desk(tmp_path: Path) -> None:
    """A backup (`export_store`, which `daemon prune` writes first) is one file: the parts are joined."""
    store_dir = tmp_path / "store"
    store, _ = await JournalStore.open(store_dir)
    desk = _desk(GROUP + 5)
    await _checkpoint(store, DeskParts(), desk)
    await store.aclose()
    out = tmp_path / "export.json"
    export_store(store_dir, out)
    exported = json.loads(out.read_text())
    assert desk_from_json(exported["checkpoint"]["payload"]) == desk


async def test_the_daemons_desk_replays_to_the_desk_it_checkpointed_in_parts(tmp_path: Path) -> None:
    runner = lone_desk(tmp_path, MACHINE, every=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        with trio.fail_after(DEADLINE):
            for n in range(1, 40):
                await runner.apply(_submit(n, agent=f"a{n % 3}"))
                await runner.apply(d.InboxRead(0, (f"t1/q{n}/question",)))
        runner.stop()
    directory = delivery_store_dir(tmp_path / "home")
    recovery = scan_store(directory, FileOps()).recovery
    assert recovery.checkpoint_seq > 0 and _part_files(directory)
    assert replay_desk(MACHINE, recovery, DEFAULT_LIMITS) == runner.desk


async def test_after_a_start_the_first_checkpoint_writes_only_what_changed(tmp_path: Path) -> None:
    """The desk learns, as it replays, which part holds which notices: a restart does not rewrite the
    whole desk at its first checkpoint."""
    store, _ = await JournalStore.open(tmp_path)
    desk = _desk(2 * GROUP + 10)
    await _checkpoint(store, DeskParts(), desk)
    await store.aclose()
    first = _part_files(tmp_path)
    files = {name: (tmp_path / name).stat().st_ino for name in first}

    reopened, recovery = await JournalStore.open(tmp_path)
    parts = DeskParts()
    replayed = replay_desk(MACHINE, recovery, DEFAULT_LIMITS, parts)
    assert replayed == desk
    await _checkpoint(reopened, parts, _stepped(replayed, _submit(10**6)))  # joins the last group
    await reopened.aclose()
    second = _part_files(tmp_path)
    assert len(first - second) == 1 and len(second - first) == 1
    assert all((tmp_path / name).stat().st_ino == files[name] for name in first & second)


@pytest.mark.parametrize("name", ["../escape.json", "part-0.json", "checkpoint-00000000000000000001.json"])
async def test_a_checkpoint_naming_a_part_outside_the_parts_pattern_is_damage(
    tmp_path: Path, name: str
) -> None:
    """A part name is a file name of the store's own pattern: a checkpoint naming a path out of the store, or
    another of its files, refuses the store and nothing is read there or deleted."""
    store, _ = await JournalStore.open(tmp_path)
    seq = await store.append({"n": 1})
    await store.checkpoint(seq, {"notices": {}, PARTS_KEY: {"notices": [name]}})
    await store.aclose()
    before = snapshot(tmp_path)
    with pytest.raises(CorruptState, match="not a map of fields to part names"):
        await JournalStore.open(tmp_path)
    assert snapshot(tmp_path) == before
