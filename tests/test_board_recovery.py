# The board's journal contract (seed 002, "Journal contract"): which records recovery accepts, ignores and
# rejects, checked against a model that knows only revisions, and once through a real journal store and a
# real daemon whose newest checkpoint is damaged.
from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import board as b
from harness.core.board_recovery import Record, checkpoint_record, delta_record, recover
from harness.io.board_runner import board_store_dir
from harness.io.journal import CheckpointPolicy, JournalStore
from tests.test_daemon import Api, running, team_with_keys

SESSION = b.Session("t1", 5)


def history(length: int) -> list[tuple[b.BoardCommand, b.Board]]:
    """`length` commands that each change the board, with the board after each (revision 1..length)."""
    commands: list[b.BoardCommand] = [
        b.SetMembers("members", SESSION, None, 1, ("alice", "bob")),
        b.DefineRole("role", SESSION, None, 2, "qa", "tests"),
    ]
    holds = False
    for n in range(2, length):
        if n % 5 == 0 and n < 200:
            commands.append(b.AddTask(f"task-{n}", SESSION, "alice", n + 1, f"Task {n}"))
            continue
        role = b.LeaveRole if holds else b.TakeRole
        commands.append(role(f"role-{n}", SESSION, "alice", n + 1, "qa"))
        holds = not holds
    board, steps = b.empty_board(SESSION), []
    for command in commands[:length]:
        outcome = b.step(board, command, LIMITS)
        assert not isinstance(outcome, b.Rejected) and outcome.changed, (command, outcome)
        board = outcome.state
        steps.append((command, board))
    return steps


LIMITS = b.BoardLimits(operations=20_000, member_operations=20_000)  # one member makes them all


def records(
    steps: Sequence[tuple[b.BoardCommand, b.Board]], checkpoints_after: set[int], first: int
) -> list[Any]:
    """The store's records: the deltas from revision `first`, a checkpoint after each revision in
    `checkpoints_after` (a checkpoint at `first - 1` stands for the store's compaction checkpoint)."""
    out: list[tuple[str, int, dict[str, object]]] = []
    if first > 1:
        out.append(("checkpoint", first - 1, checkpoint_record(steps[first - 2][1])))
    for revision in range(first, len(steps) + 1):
        command, board = steps[revision - 1]
        out.append(("delta", revision, delta_record(command, revision)))
        if revision in checkpoints_after:
            out.append(("checkpoint", revision, checkpoint_record(board)))
    return out


def numbered(marked: Sequence[tuple[str, int, dict[str, object]]]) -> list[Record]:
    return [(seq, body) for seq, (_, _, body) in enumerate(marked, start=1)]


def damage(kind: str, body: dict[str, object]) -> dict[str, object]:
    body = copy.deepcopy(body)
    if kind == "unversioned":
        del body["journalVersion"]
    elif kind == "inconsistent" and "board" in body:
        board = body["board"]
        assert isinstance(board, dict)
        board["bytes"] += 1  # the measure no longer matches the records (an invariant of section 8)
    elif kind == "inconsistent":
        body["revision"] = int(str(body["revision"])) + 1  # does not connect
    elif "board" in body:
        body["board"] = {"operations": {}, "junk": 1}
    else:
        body["command"] = {"type": "steal"}
    return body


@settings(max_examples=300, deadline=None)
@given(
    length=st.integers(2, 24),
    data=st.data(),
    kind=st.sampled_from(["unversioned", "inconsistent", "garbage"]),
)
def test_recovery_takes_the_newest_valid_checkpoint_and_every_delta_that_connects(
    length: int, data: st.DataObject, kind: str
) -> None:
    """Seed 002: "Recovery accepts only valid journalVersion: 1 checkpoint and delta entries. Unversioned
    snapshots are ignored ... Inconsistent checkpoints and deltas are rejected as a whole, while earlier
    valid entries remain recoverable. Delta revisions must connect to the recovered checkpoint." One record
    of a valid history is damaged; the model (revisions only) says which board recovery must reach."""
    steps = history(length)
    cuts = data.draw(st.sets(st.integers(1, length)))
    first = data.draw(st.integers(1, min(cuts) + 1 if cuts else 1))
    marked = records(steps, cuts, first)
    hit = data.draw(st.integers(0, len(marked) - 1))
    what, revision, body = marked[hit]
    marked[hit] = (what, revision, damage(kind, body))
    found = recover("t1", numbered(marked), LIMITS)

    # The model: the newest undamaged checkpoint, then deltas while undamaged and in revision order.
    valid = [(at, rev) for at, (w, rev, _) in enumerate(marked) if w == "checkpoint" and at != hit]
    start_at, reached = valid[-1] if valid else (-1, 0)
    for at in range(start_at + 1, len(marked)):
        w, rev, _ = marked[at]
        if w == "delta":
            if at == hit or rev != reached + 1:
                break
            reached = rev
    expected = steps[reached - 1][1] if reached else None
    assert found.board == expected
    hit_seq = hit + 1
    if hit < start_at:  # covered by a newer valid checkpoint: never looked at
        assert found.refused == ()
    elif what == "checkpoint" and kind == "unversioned":
        assert [r.seq for r in found.refused if r.ignored] == [hit_seq]  # ignored, never rejected
        assert all(r.seq > hit_seq for r in found.rejected)
    else:
        assert found.rejected[0].seq == hit_seq  # the damaged record first, then only what follows it
        assert all(r.seq > hit_seq for r in found.rejected[1:])


def test_recovery_scans_back_beyond_ten_thousand_entries() -> None:
    """Seed 002: "The active branch is scanned back to a recoverable checkpoint, including beyond the
    initial 10,000-entry window when necessary." A journal of 12,000 deltas whose newest checkpoint is
    damaged: the valid one before it lies 12,000 entries back, and every delta after it is replayed."""
    steps = history(12_100)
    marked = records(steps, {12_100}, first=101)
    marked[-1] = ("checkpoint", 12_100, damage("inconsistent", marked[-1][2]))
    assert marked[0][0] == "checkpoint" and len(marked) == 12_002
    found = recover("t1", numbered(marked), LIMITS)
    assert found.board == steps[-1][1] and found.applied == 12_000
    assert [r.seq for r in found.rejected] == [len(marked)]


def test_a_history_without_a_checkpoint_must_start_at_revision_one() -> None:
    """Deltas connect to the recovered checkpoint; with none, to the empty board at revision 0. A store
    whose early deltas were compacted away behind a checkpoint that is now unreadable recovers nothing
    rather than a board with holes."""
    steps = history(6)
    marked = records(steps, set(), first=3)
    marked[0] = ("checkpoint", 2, damage("unversioned", marked[0][2]))
    found = recover("t1", numbered(marked), LIMITS)
    assert found.board is None and found.refused[0].ignored
    assert "does not connect to revision 0" in found.rejected[0].reason
    assert len(found.rejected) == 4


async def test_a_daemon_scans_back_past_a_damaged_newest_checkpoint(tmp_path: Path) -> None:
    """The daemon keeps two checkpoints of each board (its store compacts only up to the older one), so a
    newest checkpoint that a bad disk or a foreign writer damaged is scanned back past, and the deltas
    after the older one bring the board back whole; a torn final record (never acknowledged) is left out."""
    lines: list[str] = []
    async with running(tmp_path, checkpoint_policy=CheckpointPolicy(every=3)) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice = await Api.open(daemon, keys["alice"])
        for n in range(8):
            await alice("board", "t1", id=f"task-{n}", command={"type": "add_task", "title": f"task {n}"})
        before = await owner("board_get", "t1")
    directory = board_store_dir(tmp_path, "t1")
    store, recovery = await JournalStore.open(directory)
    async with store:
        pass
    assert recovery.checkpoint is not None  # the store's compaction checkpoint ...
    bodies = [recovery.checkpoint, *(entry.body for entry in recovery.entries)]
    newest = max(at for at, body in enumerate(bodies) if "board" in body)
    assert newest > 0  # ... and a newer checkpoint record: two are kept
    bodies[newest] = damage("inconsistent", dict(bodies[newest]))
    directory.rename(tmp_path / "original")
    store, _ = await JournalStore.open(directory)  # the same records, the newest checkpoint damaged
    async with store:
        for body in bodies:
            await store.append(body)
    segment = max(directory.glob("journal-*.jsonl"))
    with segment.open("ab") as torn:  # and a torn tail: a record whose write never finished
        torn.write(b'{"v":1,"seq":99,"entry":{"journalVersion":1,"rev')
    async with running(tmp_path, log=lines.append) as daemon:
        owner = await Api.open(daemon)
        assert await owner("board_get", "t1") == before
    said = "\n".join(lines)
    assert "checkpoint is inconsistent" in said


async def test_a_board_bigger_than_a_journal_entry_is_checkpointed(tmp_path: Path) -> None:
    """A checkpoint record holds the whole board, up to the seed's eight-MiB state limit, so it may exceed
    the 1 MiB a command entry is allowed: a board of 1.5 MiB of notes checkpoints, keeps working and
    recovers whole (the runner once stopped such a board with corrupt_state at its first checkpoint)."""
    async with running(tmp_path, checkpoint_policy=CheckpointPolicy(every=4)) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        for sender, to in ((alice, "bob"), (bob, "alice")):  # each within its share (member_bytes)
            note = {"type": "send_note", "to": {"kind": "member", "name": to}, "text": "n" * 8_000}
            for n in range(100):
                await sender("board", "t1", id=f"note-{to}-{n}", command=note)
        await alice("board", "t1", id="last", command={"type": "add_task", "title": "after the checkpoints"})
        before = await owner("board_get", "t1")
        assert before["bytes"] > 1_500_000 and before["notes"] == 200
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        assert await owner("board_get", "t1") == before


def test_records_of_another_team_are_refused() -> None:
    """A board store holds one team's board: a checkpoint or a delta naming another team (a file copied
    between stores, a restored backup of the wrong directory) is refused as a whole, never applied."""
    steps = history(4)
    other = b.Session("t2", 5)
    marked = records(steps, {2}, first=1)
    foreign_board = attrs.evolve(steps[3][1], session=other)
    marked.append(("checkpoint", 4, checkpoint_record(foreign_board)))
    foreign_delta = attrs.evolve(steps[0][0], session=other)
    marked.insert(3, ("delta", 3, delta_record(foreign_delta, 3)))  # right after the checkpoint at 2
    found = recover("t1", numbered(marked), LIMITS)
    assert found.board == steps[1][1]  # the checkpoint at revision 2; the foreign delta breaks the chain
    reasons = [r.reason for r in found.rejected]
    assert reasons[0] == "delta belongs to team 't2'" and reasons[-1] == "checkpoint belongs to team 't2'"
