# Issue 19: mutants of core/board.py that the board's example and stateful tests let survive
# (scripts/mutate_core.py, sample 60, seed 0). Each test pins the rule the surviving mutant broke.
from __future__ import annotations

import re
from pathlib import Path

from harness.core import board as b
from harness.core.errors import ErrorCode as E
from harness.core.errors import Rejected
from harness.core.outcome import Accepted

SPEC = Path(__file__).resolve().parent.parent / "spec" / "board-v1.md"
SESSION = b.Session("t", 1)


def _record_values(record: str, field: str) -> list[str]:
    """The values the spec's records table gives `field` of `record`, as in "`kind` (`member`/`role`)"."""
    row = next(
        line for line in SPEC.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {record} |")
    )
    found = re.search(rf"`{field}` \(([^)]*)\)", row)
    assert found is not None, row
    return re.findall(r"`([^`]+)`", found.group(1))


def test_the_wire_values_of_addressee_kinds_and_member_states_are_the_specs() -> None:
    """An addressee's kind and a member's state leave the core as these strings (snapshots, the journal)."""
    assert [kind.value for kind in b.AddresseeKind] == _record_values("Addressee", "kind")
    assert [state.value for state in b.MemberState] == _record_values("Member", "state")


def test_a_read_without_unread_only_reads_the_whole_mailbox() -> None:
    """Spec: `read_messages(unreadOnly, offset)`; unreadOnly is opt-in, so a plain read pages the mailbox."""
    board = b.empty_board(SESSION)
    for command in (
        b.SetMembers("m", SESSION, None, 1, ("lead", "peer")),
        b.SendNote("n1", SESSION, "peer", 2, b.Addressee(b.AddresseeKind.MEMBER, "lead"), "one"),
        b.ReadMessages("r1", SESSION, "lead", 3),
        b.SendNote("n2", SESSION, "peer", 4, b.Addressee(b.AddresseeKind.MEMBER, "lead"), "two"),
    ):
        outcome = b.step(board, command)
        assert isinstance(outcome, Accepted), outcome
        board = outcome.state
    read = b.step(board, b.ReadMessages("r2", SESSION, "lead", 5))
    assert isinstance(read, Accepted) and isinstance(read.result, b.Page)
    assert [note.id for note in read.result.notes] == ["n1", "n2"]


def test_setting_the_same_members_again_changes_nothing_and_returns_them() -> None:
    """set_members with the membership the board already has (under a new operation id) is a no-op that
    still answers with the members, as a changing one does."""
    first = b.step(b.empty_board(SESSION), b.SetMembers("m1", SESSION, None, 1, ("lead", "peer")))
    assert isinstance(first, Accepted) and first.changed
    again = b.step(first.state, b.SetMembers("m2", SESSION, None, 2, ("lead", "peer")))
    assert isinstance(again, Accepted) and not again.changed
    assert again.state is first.state and again.result == first.result
    assert [member.id for member in again.result] == ["lead", "peer"]  # type: ignore[attr-defined]


# --- the refusals and no-ops the example stories do not reach (branch coverage, issue 19) ------------------


def _board(*commands: b.BoardCommand, limits: b.BoardLimits = b.DEFAULT_BOARD_LIMITS) -> b.Board:
    board = b.empty_board(SESSION)
    for command in commands:
        outcome = b.step(board, command, limits)
        assert isinstance(outcome, Accepted), (command, outcome)
        board = outcome.state
    return board


def _refused(
    board: b.Board, command: b.BoardCommand, limits: b.BoardLimits = b.DEFAULT_BOARD_LIMITS
) -> Rejected:
    outcome = b.step(board, command, limits)
    assert isinstance(outcome, Rejected), outcome
    return outcome


MEMBERS = b.SetMembers("m", SESSION, None, 1, ("lead", "peer", "gone"))
DEV = b.DefineRole("dev", SESSION, None, 2, "dev", "builds")
TASK_A = b.AddTask("a", SESSION, "lead", 3, "first")
TASK_B = b.AddTask("b", SESSION, "lead", 4, "second", dependencies=("a",))


def test_an_over_long_id_and_an_empty_title_are_refused_with_their_codes() -> None:
    board = _board(MEMBERS)
    long_id = _refused(board, b.AddTask("x" * 129, SESSION, "lead", 5, "title"))
    assert (long_id.code, long_id.bound) == (E.BOUND_EXCEEDED, "id_chars")
    assert _refused(board, b.AddTask("t", SESSION, "lead", 5, " \n")).code is E.BAD_REQUEST
    assert _refused(board, b.AddTask("t/1", SESSION, "lead", 5, "title")).code is E.BAD_REQUEST


def test_the_member_bound_counts_removed_members_and_the_new_ones() -> None:
    limits = b.BoardLimits(members=3)
    board = _board(MEMBERS, b.SetMembers("m2", SESSION, None, 2, ("lead",)), limits=limits)
    refused = _refused(board, b.SetMembers("m3", SESSION, None, 3, ("lead", "new")), limits)
    assert (refused.code, refused.bound) == (E.BOUND_EXCEEDED, "members")
    assert _refused(board, b.SetMembers("m4", SESSION, None, 3, ("lead", "lead"))).code is E.BAD_REQUEST


def test_removing_a_member_leaves_the_roles_it_did_not_hold_alone() -> None:
    take = b.TakeRole("r1", SESSION, "lead", 3, "dev")
    board = _board(MEMBERS, DEV, b.DefineRole("ops", SESSION, None, 3, "ops", ""), take)
    after = _board(MEMBERS, DEV, b.DefineRole("ops", SESSION, None, 3, "ops", ""), take,
                   b.SetMembers("m2", SESSION, None, 4, ("lead", "peer")))  # fmt: skip
    assert after.roles["dev"].holders == ("lead",) and after.roles["ops"] == board.roles["ops"]


def test_the_owner_acts_only_for_an_active_member_and_taking_a_held_role_changes_nothing() -> None:
    board = _board(MEMBERS, DEV, b.SetMembers("m2", SESSION, None, 3, ("lead", "peer")))
    assert _refused(board, b.TakeRole("r1", SESSION, None, 4, "dev", member="gone")).code is E.NOT_FOUND
    held = _board(MEMBERS, DEV, b.TakeRole("r1", SESSION, "peer", 3, "dev"))
    again = b.step(held, b.TakeRole("r2", SESSION, "peer", 4, "dev"))
    assert isinstance(again, Accepted) and not again.changed and again.result == held.roles["dev"]


def test_add_dependency_refusals_and_its_repeat() -> None:
    board = _board(MEMBERS, TASK_A, TASK_B)
    assert _refused(board, b.AddDependency("d", SESSION, None, 5, "nope", "a")).code is E.NOT_FOUND
    assert _refused(board, b.AddDependency("d", SESSION, "peer", 5, "b", "a")).code is E.WRONG_MEMBER
    assert _refused(board, b.AddDependency("d", SESSION, "lead", 5, "b", "nope")).code is E.NOT_FOUND
    same = b.step(board, b.AddDependency("d", SESSION, "lead", 5, "b", "a"))
    assert isinstance(same, Accepted) and not same.changed and same.result == board.tasks["b"]
    one = b.BoardLimits(dependencies=1)
    board = _board(MEMBERS, TASK_A, TASK_B, b.AddTask("c", SESSION, "lead", 5, "third"), limits=one)
    full = _refused(board, b.AddDependency("d", SESSION, "lead", 6, "b", "c"), one)
    assert (full.code, full.bound) == (E.BOUND_EXCEEDED, "dependencies")


def test_a_task_event_on_a_missing_task_is_not_found() -> None:
    board = _board(MEMBERS)
    for command in (b.Claim("c", SESSION, "lead", 2, "nope"), b.CancelTask("c", SESSION, None, 2, "nope")):
        assert _refused(board, command).code is E.NOT_FOUND


def test_reaches_follows_shared_dependencies_once() -> None:
    """A diamond (d on b and c, both on a): the walk meets a twice and visits it once."""
    board = _board(
        MEMBERS, TASK_A, TASK_B,
        b.AddTask("c", SESSION, "lead", 5, "third", dependencies=("a",)),
        b.AddTask("d", SESSION, "lead", 6, "fourth", dependencies=("b", "c")),
    )  # fmt: skip
    assert b.reaches(board, "d", "a") and not b.reaches(board, "d", "nope") and not b.reaches(board, "a", "d")
    assert _refused(board, b.AddDependency("x", SESSION, "lead", 7, "a", "d")).code is E.BAD_REQUEST
