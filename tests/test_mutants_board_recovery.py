# Issue 19: recovery's two refusals of a delta that decodes and connects by its revision but not by `step`
# had no core test: a delta the board refuses on replay, and one that changes nothing. Each is rejected, and
# so is everything after it, while the deltas before it stay recovered.
from __future__ import annotations

from harness.core import board as b
from harness.core.board_recovery import delta_record, recover

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
