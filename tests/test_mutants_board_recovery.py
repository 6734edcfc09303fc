# Issue 19: recovery's two refusals of a delta that decodes and connects by its revision but not by `step`
# had no core test: a delta the board refuses on replay, and one that changes nothing. Each is rejected, and
# so is everything after it, while the deltas before it stay recovered.
from __future__ import annotations

from harness.core import board as b
from harness.core.board_recovery import Record, Refused, checkpoint_record, delta_record, recover
from harness.core.codec import board_to_json

SESSION = b.Session("t1", 5)
MEMBERS = b.SetMembers("members", SESSION, None, 1, ("alice", "bob"))
LATER = b.DefineRole("role", SESSION, None, 3, "qa", "tests")


def test_a_delta_refused_on_replay_is_rejected_with_what_follows() -> None:
    refused = b.TakeRole("take", SESSION, "alice", 2, "no-such-role")
    recovered = recover(
        "t1", [(1, delta_record(MEMBERS, 1)), (2, delta_record(refused, 2)), (3, delta_record(LATER, 3))]
    )
    assert recovered.applied == 1
    assert recovered.board is not None and recovered.board.revision == 1
    assert [(r.seq, r.reason.split(" (")[0]) for r in recovered.rejected] == [
        (2, "delta was refused on replay"),
        (3, "follows a rejected delta, so it cannot connect"),
    ]


def test_a_delta_that_changes_nothing_cannot_reach_its_revision() -> None:
    recovered = recover("t1", [(1, delta_record(MEMBERS, 1)), (2, delta_record(MEMBERS, 2))])
    assert recovered.applied == 1
    assert [(r.seq, r.reason) for r in recovered.rejected] == [
        (2, "delta changed nothing, so it cannot reach revision 2")
    ]


# --- the rest of recovery at the core: checkpoints, the scan back, refusals, what a Recovered reports -----

ROLE = b.TakeRole("take", SESSION, "alice", 4, "qa")
BOARD1 = b.step(b.empty_board(SESSION), MEMBERS).state  # type: ignore[union-attr]
BOARD2 = b.step(BOARD1, LATER).state  # type: ignore[union-attr]
BOARD3 = b.step(BOARD2, ROLE).state  # type: ignore[union-attr]


def test_the_steps_the_records_below_are_made_of_are_accepted() -> None:
    assert [board.revision for board in (BOARD1, BOARD2, BOARD3)] == [1, 2, 3]
    assert checkpoint_record(BOARD2) == {"journalVersion": 1, "board": board_to_json(BOARD2)}


def test_recovery_starts_from_the_newest_valid_checkpoint_and_applies_the_deltas_after_it() -> None:
    """Seed 002: "Delta revisions must connect to the recovered checkpoint." The deltas before the checkpoint
    are not replayed again, and `last_at` is the newest applied command's time."""
    records: list[Record] = [
        (1, delta_record(MEMBERS, 1)),
        (2, delta_record(LATER, 2)),
        (3, checkpoint_record(BOARD2)),
        (4, delta_record(ROLE, 3)),
    ]
    recovered = recover("t1", records)
    assert recovered.board == BOARD3
    assert recovered.checkpoint == (3, BOARD2)
    assert (recovered.applied, recovered.refused, recovered.last_at) == (1, (), 4)


def test_a_checkpoint_last_in_the_store_is_found_and_nothing_follows_it() -> None:
    recovered = recover("t1", [(1, delta_record(MEMBERS, 1)), (7, checkpoint_record(BOARD1))])
    assert recovered.checkpoint == (7, BOARD1) and recovered.board == BOARD1
    assert (recovered.applied, recovered.refused, recovered.last_at) == (0, (), 0)


def test_the_newest_checkpoint_wins_wherever_it_lies() -> None:
    """The scan goes back one record at a time, so the newest valid checkpoint is taken even when the
    newest record is a delta and an older checkpoint sits before it."""
    records: list[Record] = [
        (1, checkpoint_record(BOARD1)),
        (2, delta_record(LATER, 2)),
        (3, checkpoint_record(BOARD2)),
        (4, delta_record(ROLE, 3)),
        (5, delta_record(b.TakeRole("again", SESSION, "bob", 6, "qa"), 4)),
    ]
    recovered = recover("t1", records)
    assert recovered.checkpoint == (3, BOARD2)
    assert recovered.applied == 2 and recovered.last_at == 6 and recovered.refused == ()


def test_an_unversioned_snapshot_is_ignored_not_used_even_when_it_holds_a_valid_board() -> None:
    """Seed 002: "Unversioned snapshots are ignored"; ignored, it is no rejection."""
    snapshot = {"board": board_to_json(BOARD2)}
    recovered = recover("t1", [(1, delta_record(MEMBERS, 1)), (2, snapshot)])
    assert recovered.board == BOARD1 and recovered.checkpoint is None and recovered.applied == 1
    assert recovered.refused == (Refused(2, "unversioned snapshot", ignored=True),)
    assert recovered.rejected == ()


def test_an_inconsistent_checkpoint_is_refused_with_its_first_broken_invariant() -> None:
    """Seed 002: "Inconsistent checkpoints and deltas are rejected as a whole, while earlier valid entries
    remain recoverable." No repair: the checkpoint's wrong measure (B7) is named."""
    body = checkpoint_record(BOARD2)
    board = body["board"]
    assert isinstance(board, dict)
    body = {**body, "board": {**board, "bytes": BOARD2.bytes + 1}}
    recovered = recover("t1", [(1, delta_record(MEMBERS, 1)), (2, body)])
    assert recovered.board == BOARD1 and recovered.checkpoint is None
    assert [(r.seq, r.reason) for r in recovered.refused] == [
        (
            2,
            "checkpoint is inconsistent: B7: "
            f"the board counts {BOARD2.bytes + 1} bytes; its records weigh {BOARD2.bytes}",
        )
    ]


def test_a_checkpoint_that_is_not_a_board_is_refused_and_the_deltas_go_on_past_it() -> None:
    records: list[Record] = [
        (1, delta_record(MEMBERS, 1)),
        (2, {"journalVersion": 1, "board": {"junk": 1}}),
        (3, delta_record(LATER, 2)),
    ]
    recovered = recover("t1", records)
    assert recovered.board == BOARD2 and recovered.applied == 2 and recovered.checkpoint is None
    assert [r.seq for r in recovered.rejected] == [2]
    assert recovered.rejected[0].reason.startswith("checkpoint is not a board: ")


def test_a_refused_newer_checkpoint_does_not_stop_the_deltas_after_the_valid_one() -> None:
    damaged = {"journalVersion": 1, "board": {"junk": 1}}
    records: list[Record] = [
        (1, checkpoint_record(BOARD1)),
        (2, delta_record(LATER, 2)),
        (3, damaged),
        (4, delta_record(ROLE, 3)),
    ]
    recovered = recover("t1", records)
    assert recovered.checkpoint == (1, BOARD1) and recovered.board == BOARD3 and recovered.applied == 2
    assert [r.seq for r in recovered.refused] == [3]


def test_a_checkpoint_of_another_team_and_a_delta_of_another_team_are_refused() -> None:
    other = b.Session("t2", 5)
    foreign = b.SetMembers("members", other, None, 1, ("alice",))
    recovered = recover("t1", [(1, checkpoint_record(b.step(b.empty_board(other), foreign).state))])  # type: ignore[union-attr]
    assert recovered.board is None and [r.reason for r in recovered.refused] == [
        "checkpoint belongs to team 't2'"
    ]
    recovered = recover("t1", [(1, delta_record(foreign, 1))])
    assert recovered.board is None and [r.reason for r in recovered.refused] == ["delta belongs to team 't2'"]


def test_a_delta_without_its_version_or_command_or_revision_is_rejected() -> None:
    unversioned = {k: v for k, v in delta_record(MEMBERS, 1).items() if k != "journalVersion"}
    not_a_command = {**delta_record(MEMBERS, 1), "command": {"type": "steal"}}
    no_revision = {k: v for k, v in delta_record(MEMBERS, 1).items() if k != "revision"}
    text_revision = {**delta_record(MEMBERS, 1), "revision": "1"}
    wrong_revision = delta_record(MEMBERS, 2)
    reasons = {
        "unversioned": "delta is not journalVersion 1",
        "no revision": "delta revision None does not connect to revision 0",
        "text revision": "delta revision '1' does not connect to revision 0",
        "wrong revision": "delta revision 2 does not connect to revision 0",
    }
    bodies = {"unversioned": unversioned, "no revision": no_revision, "text revision": text_revision}
    bodies["wrong revision"] = wrong_revision
    for name, body in bodies.items():
        recovered = recover("t1", [(1, body), (2, delta_record(LATER, 2))])
        assert recovered.board is None and recovered.applied == 0, name
        assert [(r.seq, r.reason) for r in recovered.refused] == [
            (1, reasons[name]),
            (2, "follows a rejected delta, so it cannot connect"),
        ], name
    recovered = recover("t1", [(1, not_a_command)])
    assert [r.reason.startswith("delta is not a board command: ") for r in recovered.refused] == [True]


def test_refusals_are_reported_in_store_order() -> None:
    """The scan back finds refused checkpoints newest first; the report lists every refusal by seq."""
    records: list[Record] = [
        (1, {"board": board_to_json(BOARD1)}),
        (2, delta_record(MEMBERS, 1)),
        (3, {"journalVersion": 1, "board": {"junk": 1}}),
        (4, delta_record(MEMBERS, 9)),
        (5, {"board": board_to_json(BOARD1)}),
    ]
    recovered = recover("t1", records)
    assert [r.seq for r in recovered.refused] == [1, 3, 4, 5]
    assert [r.seq for r in recovered.rejected] == [3, 4]
    assert recovered.board == BOARD1 and recovered.applied == 1 and recovered.last_at == 1
