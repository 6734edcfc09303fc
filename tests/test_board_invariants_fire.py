# Issue 19: "no invariant check is ever seen to fire". The board's stateful machine and the daemon only ever
# show core/board_invariants.py silent, so any check could be deleted unnoticed. Here each check gets the
# smallest state or step that breaks exactly its rule (records changed directly: the checks exist to catch
# reducer bugs, so the reducer cannot build these) and must report exactly that violation, while the valid
# board it was made from reports nothing. The ids covered must be the ids spec/board-v1.md lists.
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.core import board as b
from harness.core import board_invariants as bi
from harness.core.errors import ProtocolViolation, Rejected
from harness.core.outcome import Accepted, unchanged
from harness.core.values import replace

SPEC = Path(__file__).resolve().parent.parent / "spec" / "board-v1.md"
SESSION = b.Session("t", 1)
LIMITS = b.BoardLimits()
TS = b.TaskState
Violation = tuple[str, str]
# Invariants no state or step can break, so no check exists for them.
BY_CONSTRUCTION = {"B9": "a Rejected outcome carries no board, so it cannot differ from the one it was given"}


def member(name: str) -> b.Addressee:
    return b.Addressee(b.AddresseeKind.MEMBER, name)


def role(name: str) -> b.Addressee:
    return b.Addressee(b.AddresseeKind.ROLE, name)


def command(kind: type[b.BoardCommand], op: str, actor: str | None, *args: Any, **kw: Any) -> b.BoardCommand:
    return kind(op, SESSION, actor, 1_000, *args, **kw)


def _build() -> b.Board:
    """A valid board with one record in each state the checks tell apart: members lead and peer (active) and
    gone (removed); role dev held by peer; tasks a (done, with evidence), b (in progress, owned by dev), c
    (pending on b), x (cancelled), y (blocked on x), z (pending on c); notes n1, n3 to dev (peer read n1)
    and n2, n4 to lead (both unread)."""
    steps: list[b.BoardCommand] = [
        command(b.SetMembers, "m1", None, ("lead", "peer", "gone")),
        command(b.SetMembers, "m2", None, ("lead", "peer")),
        command(b.DefineRole, "dev", None, "dev", "builds"),
        command(b.TakeRole, "r1", "peer", "dev"),
        command(b.AddTask, "a", "lead", "first"),
        command(b.Claim, "a1", "lead", "a"),
        command(b.Start, "a2", "lead", "a"),
        command(b.Complete, "a3", "lead", "a", ("ref",)),
        command(b.AddTask, "b", "lead", "second", "the detail", role("dev"), ("a",)),
        command(b.Claim, "b1", "peer", "b"),
        command(b.Start, "b2", "peer", "b"),
        command(b.AddTask, "c", "lead", "third", dependencies=("b",)),
        command(b.AddTask, "x", None, "dropped"),
        command(b.CancelTask, "x1", None, "x"),
        command(b.AddTask, "y", None, "stuck", dependencies=("x",)),
        command(b.AddTask, "z", None, "later", dependencies=("c",)),
        command(b.SendNote, "n1", "lead", role("dev"), "hello dev"),
        command(b.ReadMessages, "read1", "peer"),
        command(b.SendNote, "n2", "peer", member("lead"), "hello lead"),
        command(b.SendNote, "n3", None, role("dev"), "again"),
        command(b.SendNote, "n4", None, member("lead"), "and you"),
    ]
    board = b.empty_board(SESSION)
    for each in steps:
        outcome = b.step(board, each, LIMITS)
        assert isinstance(outcome, Accepted) and outcome.changed, (each, outcome)
        board = outcome.state
    return board


BOARD = _build()


def measured(board: b.Board) -> b.Board:
    """`board` with its byte count and its members' shares made right again, so a case breaks only the rule
    it means to (B7, B15)."""
    total = sum(
        b.weight(record)
        for records in (board.members, board.roles, board.tasks, board.notes, board.operations)
        for record in records.values()
    )
    return replace(board, bytes=total, shares=b.shares_of(board.operations))


def with_task(board: b.Board, task_id: str, /, **changes: Any) -> b.Board:
    return measured(replace(board, tasks=board.tasks.set(task_id, replace(board.tasks[task_id], **changes))))


def with_member(board: b.Board, member_id: str, /, **changes: Any) -> b.Board:
    changed = replace(board.members[member_id], **changes)
    return measured(replace(board, members=board.members.set(member_id, changed)))


def with_role(board: b.Board, name: str, /, **changes: Any) -> b.Board:
    return measured(replace(board, roles=board.roles.set(name, replace(board.roles[name], **changes))))


def with_note(board: b.Board, note_id: str, /, **changes: Any) -> b.Board:
    return measured(replace(board, notes=board.notes.set(note_id, replace(board.notes[note_id], **changes))))


def with_dependents(board: b.Board, **dependents: tuple[str, ...]) -> b.Board:
    index = board.dependents
    for task_id, ids in dependents.items():
        index = index.set(task_id, ids)
    return replace(board, dependents=index)


def test_the_valid_board_reports_nothing_and_holds_every_state_the_cases_need() -> None:
    assert bi.board_violations(BOARD) == []
    states = {task_id: BOARD.tasks[task_id].state for task_id in BOARD.task_order}
    assert states == {
        "a": TS.DONE, "b": TS.IN_PROGRESS, "c": TS.PENDING,
        "x": TS.CANCELLED, "y": TS.BLOCKED, "z": TS.PENDING,
    }  # fmt: skip
    assert BOARD.members["gone"].state is b.MemberState.REMOVED
    assert BOARD.members["lead"].unread == ("n2", "n4")
    assert BOARD.members["peer"].mailbox == ("n1", "n3") and BOARD.members["peer"].unread == ("n3",)


# --- state invariants: each case, the check that must report it, and exactly what it reports ---------------

Case = tuple[Callable[[b.Board, b.BoardLimits], Any], b.Board, list[Violation]]

STATE_CASES: dict[str, Case] = {
    # B2: derived dependency states
    "ready_with_unfinished_dependency": (
        bi._dependency_states,
        with_task(BOARD, "c", state=TS.READY),
        [("B2", "task 'c' is ready with an unfinished dependency")],
    ),
    "in_progress_with_unfinished_dependency": (
        bi._dependency_states,
        with_task(BOARD, "c", state=TS.IN_PROGRESS, claimant="lead"),
        [("B2", "task 'c' is in_progress with an unfinished dependency")],
    ),
    "done_with_a_dead_dependency": (
        bi._dependency_states,
        with_task(BOARD, "y", state=TS.DONE, claimant="lead"),
        [("B2", "task 'y' is done with an unfinished dependency")],
    ),
    "pending_with_every_dependency_done": (
        bi._dependency_states,
        with_task(BOARD, "b", state=TS.PENDING, claimant=None),
        [("B2", "task 'b' is pending, but its dependencies are all done or one is dead")],
    ),
    "pending_with_a_dead_dependency": (
        bi._dependency_states,
        with_task(BOARD, "y", state=TS.PENDING),
        [("B2", "task 'y' is pending, but its dependencies are all done or one is dead")],
    ),
    "blocked_with_a_live_dependency": (
        bi._dependency_states,
        with_task(BOARD, "z", state=TS.BLOCKED),
        [("B2", "task 'z' is blocked with no cancelled or blocked dependency")],
    ),
    # B3: the dependency graph
    "dependency_listed_twice": (
        bi._graph,
        with_dependents(with_task(BOARD, "c", dependencies=("b", "b")), b=("c", "c")),
        [("B3", "task 'c' lists a dependency twice or itself")],
    ),
    "dependency_on_itself": (
        bi._graph,
        with_dependents(with_task(BOARD, "x", dependencies=("x",)), x=("y", "x")),
        [("B3", "task 'x' lists a dependency twice or itself"), ("B3", "dependency cycle among ['x', 'y']")],
    ),
    "dependency_on_a_missing_task": (
        bi._graph,
        with_dependents(with_task(BOARD, "c", dependencies=("b", "ghost")), ghost=("c",)),
        [("B3", "task 'c' depends on missing 'ghost'")],
    ),
    "dependents_index_not_the_inverse": (
        bi._graph,
        with_dependents(BOARD, b=()),
        [("B3", "the dependents index is not the inverse of the dependencies")],
    ),
    "dependency_cycle": (
        bi._graph,
        with_dependents(with_task(BOARD, "c", dependencies=("b", "z")), z=("c",)),
        [("B3", "dependency cycle among ['c', 'z']")],
    ),
    # B4: claims and evidence
    "in_progress_without_claimant": (
        bi._claims,
        with_task(BOARD, "b", claimant=None),
        [("B4", "task 'b' is in_progress without a claimant")],
    ),
    "done_without_claimant": (
        bi._claims,
        with_task(BOARD, "a", claimant=None),
        [("B4", "task 'a' is done without a claimant")],
    ),
    "pending_claimed": (
        bi._claims,
        with_task(BOARD, "c", claimant="peer"),
        [("B4", "task 'c' is pending and claimed by 'peer'")],
    ),
    "blocked_claimed": (
        bi._claims,
        with_task(BOARD, "y", claimant="peer"),
        [("B4", "task 'y' is blocked and claimed by 'peer'")],
    ),
    "cancelled_claimed": (
        bi._claims,
        with_task(BOARD, "x", claimant="lead"),
        [("B4", "task 'x' is cancelled and claimed by 'lead'")],
    ),
    "claimed_by_an_unknown_member": (
        bi._claims,
        with_task(BOARD, "b", claimant="ghost"),
        [("B4", "task 'b' is claimed by unknown 'ghost'")],
    ),
    "evidence_before_done": (
        bi._claims,
        with_task(BOARD, "b", evidence=("ref",)),
        [("B4", "task 'b' carries evidence while in_progress")],
    ),
    # B5: roles and addressees
    "holder_listed_twice": (
        bi._roles,
        with_role(BOARD, "dev", holders=("peer", "peer")),
        [("B5", "role 'dev' lists a holder twice")],
    ),
    "held_by_a_removed_member": (
        bi._roles,
        with_role(BOARD, "dev", holders=("peer", "gone")),
        [("B5", "role 'dev' is held by 'gone', not an active member")],
    ),
    "held_by_an_unknown_member": (
        bi._roles,
        with_role(BOARD, "dev", holders=("ghost", "peer")),
        [("B5", "role 'dev' is held by 'ghost', not an active member")],
    ),
    "task_owned_by_a_missing_role": (
        bi._roles,
        with_task(BOARD, "b", owner=role("lead")),
        [("B5", "role 'lead' is named but does not exist")],
    ),
    "note_to_a_missing_member": (
        bi._roles,
        with_note(BOARD, "n2", to=member("dev")),
        [("B5", "member 'dev' is named but does not exist")],
    ),
    # B6: mailboxes
    "note_missing_from_a_mailbox": (
        bi._mailboxes,
        with_member(BOARD, "peer", mailbox=("n3",), unread=("n3",)),
        [("B6", "member 'peer' has mailbox ('n3',), not its notes ['n1', 'n3']")],
    ),
    "mailbox_out_of_order": (
        bi._mailboxes,
        with_member(BOARD, "peer", mailbox=("n3", "n1")),
        [("B6", "member 'peer' has mailbox ('n3', 'n1'), not its notes ['n1', 'n3']")],
    ),
    "unread_outside_the_mailbox": (
        bi._mailboxes,
        with_member(BOARD, "peer", unread=("n2", "n3")),
        [("B6", "member 'peer' has unread notes out of its mailbox or order")],
    ),
    "unread_out_of_order": (
        bi._mailboxes,
        with_member(BOARD, "lead", unread=("n4", "n2")),
        [("B6", "member 'lead' has unread notes out of its mailbox or order")],
    ),
    "unread_listed_twice": (
        bi._mailboxes,
        with_member(BOARD, "lead", unread=("n2", "n2")),
        [("B6", "member 'lead' has unread notes out of its mailbox or order")],
    ),
    "note_reached_a_non_member": (
        bi._mailboxes,
        with_note(BOARD, "n2", recipients=("lead", "ghost")),
        [("B6", "notes reached 'ghost', who is not a board member")],
    ),
    # B7: the measure
    "bytes_miscounted": (
        bi._measure,
        replace(BOARD, bytes=BOARD.bytes + 1),
        [("B7", f"the board counts {BOARD.bytes + 1} bytes; its records weigh {BOARD.bytes}")],
    ),
    # B15: members' shares
    "share_miscounted": (
        bi._shares,
        replace(BOARD, shares=BOARD.shares.set("peer", replace(BOARD.shares["peer"], notes=2))),
        [("B15", "'peer' holds a share of (4, 0, 2, 154); its operations make (4, 0, 1, 154)")],
    ),
    "owner_given_a_share": (
        bi._shares,
        replace(BOARD, shares=BOARD.shares.set("owner", b.Share(1, 0, 0, 1))),
        [("B15", "'owner' holds a share of (1, 0, 0, 1); its operations make None")],
    ),
    # B8: orders and filing
    "order_lists_a_record_twice": (
        bi._orders,
        replace(BOARD, member_order=(*BOARD.member_order, "lead")),
        [("B8", "order ('lead', 'peer', 'gone', 'lead') does not list its records once each")],
    ),
    "order_misses_a_record": (
        bi._orders,
        replace(BOARD, role_order=()),
        [("B8", "order () does not list its records once each")],
    ),
    "member_filed_under_another_id": (
        bi._orders,
        with_member(BOARD, "gone", id="left"),
        [("B8", "a record is filed under 'gone'")],
    ),
    "role_filed_under_another_name": (
        bi._orders,
        with_role(BOARD, "dev", name="ops"),
        [("B8", "a record is filed under 'dev'")],
    ),
    "task_filed_under_another_id": (
        bi._orders,
        with_task(BOARD, "x", id="w"),
        [("B8", "a record is filed under 'x'")],
    ),
    "note_filed_under_another_id": (
        bi._orders,
        with_note(BOARD, "n4", id="n5"),
        [("B8", "a record is filed under 'n4'")],
    ),
    "operation_filed_under_another_id": (
        bi._orders,
        measured(replace(BOARD, operations=BOARD.operations.set("a1", BOARD.operations["a2"]))),
        [("B8", "operation 'a2' is filed under 'a1'")],
    ),
}


@pytest.mark.parametrize("case", STATE_CASES)
def test_each_state_check_reports_exactly_the_rule_its_case_breaks(case: str) -> None:
    check, board, expected = STATE_CASES[case]
    assert list(check(BOARD, LIMITS)) == []
    assert list(check(board, LIMITS)) == expected
    assert bi.board_violations(board) == expected  # no other check reports it


# --- B1: every bound, at its limit (holds) and one under it (reported) -------------------------------------


def _longest(values: list[int]) -> int:
    return max(values, default=0)


BOUNDS: dict[str, int] = {
    "members": len(BOARD.member_order),
    "roles": len(BOARD.role_order),
    "tasks": len(BOARD.task_order),
    "notes": len(BOARD.note_order),
    "operations": len(BOARD.operations),
    "state_bytes": BOARD.bytes,
    "title_chars": _longest([len(task.title) for task in BOARD.tasks.values()]),
    "description_chars": _longest([len(task.description) for task in BOARD.tasks.values()]),
    "dependencies": 1,
    "evidence_refs": 1,
    "evidence_ref_chars": len("ref"),
    "note_chars": _longest([len(note.text) for note in BOARD.notes.values()]),
    "role_description_chars": len("builds"),
}
BOUND_REPORTS = {
    "members": "3 members; bound 2",
    "roles": "1 roles; bound 0",
    "tasks": "6 tasks; bound 5",
    "notes": "4 notes; bound 3",
    "operations": f"{len(BOARD.operations)} operations; bound {len(BOARD.operations) - 1}",
    "state_bytes": f"{BOARD.bytes} state_bytes; bound {BOARD.bytes - 1}",
    "title_chars": "task 'x' exceeds a bound",  # "dropped", the longest title
    "description_chars": "task 'b' exceeds a bound",
    "dependencies": "",  # every task with a dependency: checked below
    "evidence_refs": "task 'a' exceeds a bound",
    "evidence_ref_chars": "task 'a' exceeds a bound",
    "note_chars": "note 'n2' has 10 characters",
    "role_description_chars": "role 'dev' has a description over its bound",
}


@pytest.mark.parametrize("bound", BOUNDS)
def test_each_bound_holds_at_its_limit_and_is_reported_one_under_it(bound: str) -> None:
    limit = BOUNDS[bound]
    assert list(bi._bounds(BOARD, replace(LIMITS, **{bound: limit}))) == []
    found = list(bi._bounds(BOARD, replace(LIMITS, **{bound: limit - 1})))
    assert found and all(invariant == "B1" for invariant, _ in found), found
    assert bi.board_violations(BOARD, replace(LIMITS, **{bound: limit - 1})) == found
    if bound == "dependencies":
        with_deps = [task_id for task_id in BOARD.task_order if BOARD.tasks[task_id].dependencies]
        assert sorted(detail for _, detail in found) == [
            f"task {task_id!r} exceeds a bound" for task_id in with_deps
        ]
    elif bound in ("members", "roles", "tasks", "notes", "operations", "state_bytes"):
        assert [detail for _, detail in found] == [BOUND_REPORTS[bound]]
    else:
        assert BOUND_REPORTS[bound] in [detail for _, detail in found]


# --- step invariants ----------------------------------------------------------------------------------------


def stepped(board: b.Board, each: b.BoardCommand) -> Accepted[b.Board]:
    outcome = b.step(board, each, LIMITS)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def accepted(after: b.Board, result: object = None, *, changed: bool = True) -> Accepted[b.Board]:
    return Accepted(after, result, changed=changed)


def next_revision(board: b.Board) -> b.Board:
    return replace(board, revision=BOARD.revision + 1)


RELEASE_BY_PEER = command(b.Release, "rel", "peer", "b")
CLAIM_BY_LEAD = command(b.Claim, "cl", "lead", "b")
READ_BY_LEAD = command(b.ReadMessages, "rd", "lead")
NOTE_TO_LEAD = command(b.SendNote, "n5", None, member("lead"), "more")

STEP_CASES: dict[str, tuple[b.BoardCommand, Accepted[b.Board], list[str]]] = {
    "changed_without_a_new_revision": (
        RELEASE_BY_PEER,
        accepted(with_task(BOARD, "b", claimant=None, state=TS.READY)),
        ["B10: revision 21 -> 21, changed=True"],
    ),
    "a_new_revision_said_unchanged": (
        CLAIM_BY_LEAD,
        accepted(next_revision(BOARD), changed=False),
        ["B10: revision 21 -> 22, changed=False"],
    ),
    "unchanged_but_different": (
        CLAIM_BY_LEAD,
        accepted(with_note(BOARD, "n1", text="edited"), changed=False),
        ["B10: revision 21 -> 21, changed=False", "B12: note 'n1' changed"],
    ),
    "claim_stolen": (
        CLAIM_BY_LEAD,
        accepted(next_revision(with_task(BOARD, "b", claimant="lead"))),
        ["B11: task 'b' claim moved 'peer' -> 'lead' by " + repr(CLAIM_BY_LEAD)],
    ),
    "released_by_another_member": (
        command(b.Release, "rel", "lead", "b"),
        accepted(next_revision(with_task(BOARD, "b", claimant=None, state=TS.READY))),
        ["B11: task 'b' claim moved 'peer' -> None by " + repr(command(b.Release, "rel", "lead", "b"))],
    ),
    "owner_releases_a_claim_it_did_not_name": (
        command(b.Release, "rel", None, "b", "lead"),
        accepted(next_revision(with_task(BOARD, "b", claimant=None, state=TS.READY))),
        ["B11: task 'b' claim moved 'peer' -> None by " + repr(command(b.Release, "rel", None, "b", "lead"))],
    ),
    "released_by_a_command_on_another_task": (
        command(b.Release, "rel", "peer", "c"),
        accepted(next_revision(with_task(BOARD, "b", claimant=None, state=TS.READY))),
        ["B11: task 'b' claim moved 'peer' -> None by " + repr(command(b.Release, "rel", "peer", "c"))],
    ),
    "cancelled_by_another_member": (
        command(b.CancelTask, "cn", "lead", "b"),
        accepted(next_revision(with_task(BOARD, "b", claimant=None, state=TS.READY))),
        ["B11: task 'b' claim moved 'peer' -> None by " + repr(command(b.CancelTask, "cn", "lead", "b"))],
    ),
    "an_operation_vanished": (
        CLAIM_BY_LEAD,
        accepted(next_revision(measured(replace(BOARD, operations=BOARD.operations.delete("a1"))))),
        ["B12: operations ['a1'] vanished"],
    ),
    "an_ended_task_changed": (
        CLAIM_BY_LEAD,
        accepted(next_revision(with_task(BOARD, "x", title="renamed"))),
        ["B12: ended task 'x' changed"],
    ),
    "a_done_task_changed": (
        CLAIM_BY_LEAD,
        accepted(next_revision(with_task(BOARD, "a", evidence=("other",)))),
        ["B12: ended task 'a' changed"],
    ),
    "a_role_changed_its_description": (
        CLAIM_BY_LEAD,
        accepted(next_revision(with_role(BOARD, "dev", description="other"))),
        ["B12: role 'dev' changed its description"],
    ),
    "a_note_left_unread_without_a_read": (
        CLAIM_BY_LEAD,
        accepted(next_revision(with_member(BOARD, "lead", unread=("n4",)))),
        ["B13: notes ['n2'] left 'lead''s unread set unread"],
    ),
    "a_read_marks_a_note_it_did_not_return": (
        command(b.ReadMessages, "rd", "lead", offset=1),
        accepted(
            next_revision(with_member(BOARD, "lead", unread=())),
            b.Page((BOARD.notes["n4"],), None, 0),
        ),
        ["B13: notes ['n2'] left 'lead''s unread set unread"],
    ),
    "a_read_for_one_member_marks_anothers": (
        command(b.ReadMessages, "rd", None, member="peer"),
        accepted(next_revision(with_member(BOARD, "lead", unread=())), b.Page((), None, 0)),
        ["B13: notes ['n2', 'n4'] left 'lead''s unread set unread"],
    ),
    "a_new_note_arrives_read": (
        NOTE_TO_LEAD,
        accepted(
            next_revision(
                measured(
                    replace(
                        with_member(BOARD, "lead", mailbox=("n2", "n4", "n5")),
                        notes=BOARD.notes.set(
                            "n5", b.Note("n5", b.OWNER, member("lead"), "more", 1, ("lead",))
                        ),
                        note_order=(*BOARD.note_order, "n5"),
                    )
                )
            )
        ),
        ["B13: new notes ['n5'] reached 'lead' already read"],
    ),
}


@pytest.mark.parametrize("case", STEP_CASES)
def test_each_step_check_reports_exactly_the_rule_its_case_breaks(case: str) -> None:
    each, outcome, expected = STEP_CASES[case]
    found = bi.step_violations(BOARD, each, outcome)
    # repeat_violations (B14) runs on every changed outcome; it is asserted on its own below
    assert [f"{invariant}: {detail}" for invariant, detail in found if invariant != "B14"] == expected


@pytest.mark.parametrize(
    "each",
    [
        RELEASE_BY_PEER,
        command(b.Release, "rel", None, "b", "peer"),
        command(b.CancelTask, "cn", None, "b"),
        command(b.CancelTask, "cn", "peer", "b"),
        CLAIM_BY_LEAD,  # refused: B9 holds by construction
        READ_BY_LEAD,
        command(b.ReadMessages, "rd", None, member="lead"),
        command(b.ReadMessages, "rd", "peer", unread_only=True),
        NOTE_TO_LEAD,
        command(b.SendNote, "n5", None, role("dev"), "to peer"),
        command(b.SetMembers, "m3", None, ("lead",)),
        command(b.Claim, "a1", "lead", "a"),  # a repeat
    ],
)
def test_real_steps_report_nothing(each: b.BoardCommand) -> None:
    """The valid neighbours of the step cases: the reducer's own releases, cancels, reads and notes."""
    outcome = b.step(BOARD, each, LIMITS)
    assert bi.step_violations(BOARD, each, outcome) == []
    bi.check_step(BOARD, each, outcome)


def test_a_repeated_operation_that_changes_the_board_is_b14() -> None:
    repeat = command(b.Claim, "a1", "lead", "a")
    outcome = accepted(next_revision(BOARD), BOARD.tasks["a"])
    changed = ("B14", "a repeat of operation 'a1' changed the board")
    assert changed in bi.step_violations(BOARD, repeat, outcome)
    again = replace(repeat, at=5)  # another clock reading is still the same operation
    assert changed in bi.step_violations(BOARD, again, outcome)
    other = command(b.Claim, "a1", "lead", "b")  # the same id for another command is no repeat
    assert changed not in bi.step_violations(BOARD, other, outcome)
    assert changed not in bi.step_violations(BOARD, command(b.Start, "a1", "lead", "a"), outcome)


def test_a_command_that_answers_differently_when_repeated_is_b14() -> None:
    note = command(b.SendNote, "n5", None, member("lead"), "more")
    real = stepped(BOARD, note)
    assert bi.repeat_violations(real.state, note, real) == []
    wrong = accepted(real.state, "another record")
    assert bi.repeat_violations(real.state, note, wrong) == [
        ("B14", f"repeating operation 'n5' gave {unchanged(real.state, real.result)!r}, not 'another record'")
    ]
    refused = accepted(BOARD, None)  # on a board that never took it, the repeat is a new command: it changes
    assert [invariant for invariant, _ in bi.repeat_violations(BOARD, note, refused)] == ["B14"]


def test_a_repeat_that_is_refused_is_b14() -> None:
    claim = command(b.Claim, "cl", "peer", "c")  # c is pending: a claim of it is refused
    assert isinstance(b.step(BOARD, claim, LIMITS), Rejected)
    assert [invariant for invariant, _ in bi.repeat_violations(BOARD, claim, accepted(BOARD))] == ["B14"]


def test_check_step_raises_the_first_violation_and_a_refusal_has_none() -> None:
    each, outcome, expected = STEP_CASES["claim_stolen"]
    with pytest.raises(ProtocolViolation) as raised:
        bi.check_step(BOARD, each, outcome)
    assert f"{raised.value.invariant}: {raised.value.detail}" == expected[0]
    refused = Rejected(b.E.CONFLICT, "no")
    assert bi.step_violations(BOARD, each, refused) == []
    bi.check_step(BOARD, each, refused)


def test_the_cases_cover_every_invariant_the_spec_lists() -> None:
    listed = set(re.findall(r"\bB(\d+)\b", SPEC.read_text(encoding="utf-8")))
    covered = {invariant for _, _, found in STATE_CASES.values() for invariant, _ in found}
    covered |= {"B1", "B14"}
    covered |= {line.split(":")[0] for _, _, found in STEP_CASES.values() for line in found}
    assert {f"B{n}" for n in listed} == covered | set(BY_CONSTRUCTION)
