# Example tests of the board reducer: one story per rule of spec/board-v1.md, each checked against the
# board invariants after every step, and one hostile case per refusal the seed and the issue name.
from __future__ import annotations

import itertools

import pytest

from harness.core import board as b
from harness.core.board_invariants import board_violations, check_step
from harness.core.errors import ErrorCode as E
from harness.core.errors import Rejected
from harness.core.outcome import Accepted

SESSION = b.Session("t", 1)
LIMITS = b.BoardLimits()


def member(name: str) -> b.Addressee:
    return b.Addressee(b.AddresseeKind.MEMBER, name)


def role(name: str) -> b.Addressee:
    return b.Addressee(b.AddresseeKind.ROLE, name)


class Driver:
    """Steps one board, checking every invariant after every step; ops and clock are drawn here."""

    def __init__(self, limits: b.BoardLimits = LIMITS) -> None:
        self.board = b.empty_board(SESSION)
        self.limits = limits
        self.ops = itertools.count(1)
        self.now = 1_000

    def op(self) -> str:
        return f"op{next(self.ops)}"

    def send(
        self, kind: type[b.BoardCommand], actor: str | None, *args: object, **kw: object
    ) -> Accepted[b.Board] | Rejected:
        self.now += 1
        op = str(kw.pop("op", self.op()))
        session = kw.pop("session", SESSION)
        command = kind(op, session, actor, self.now, *args, **kw)  # type: ignore[arg-type]
        return self.apply(command)

    def apply(self, command: b.BoardCommand) -> Accepted[b.Board] | Rejected:
        before = self.board
        outcome = b.step(before, command, self.limits)
        check_step(before, command, outcome, self.limits)
        if isinstance(outcome, Accepted):
            self.board = outcome.state
        return outcome

    def ok(
        self, kind: type[b.BoardCommand], actor: str | None, *args: object, **kw: object
    ) -> Accepted[b.Board]:
        outcome = self.send(kind, actor, *args, **kw)
        assert isinstance(outcome, Accepted), outcome
        return outcome

    def fails(
        self, code: E, kind: type[b.BoardCommand], actor: str | None, *args: object, **kw: object
    ) -> Rejected:
        before = self.board
        outcome = self.send(kind, actor, *args, **kw)
        assert isinstance(outcome, Rejected) and outcome.code is code, outcome
        assert self.board is before
        return outcome

    def task(self, task_id: str) -> b.Task:
        return self.board.tasks[task_id]


@pytest.fixture
def d() -> Driver:
    d = Driver()
    d.ok(b.SetMembers, None, ("lead", "peer", "other"))
    return d


def test_a_command_for_a_replaced_board_generation_is_refused_before_it_reads(d: Driver) -> None:
    """Seed: "Queued actions capture the manager and session header and reject replacement, including
    in-place new sessions, before accessing or changing the board." """
    for stale in (b.Session("t", 0), b.Session("t", 2), b.Session("other", 1)):
        # Even a command that would be a not_found on this board answers the stale session first.
        refused = d.fails(E.CONFLICT, b.Claim, "peer", "no-such-task", session=stale)
        assert "replaced" in refused.detail
        d.fails(E.CONFLICT, b.ReadMessages, "peer", session=stale)


def test_roles_are_named_described_and_may_stay_empty(d: Driver) -> None:
    reviewer = d.ok(b.DefineRole, None, "reviewer", "reads every change").result
    assert reviewer == b.Role("reviewer", "reads every change", (), d.now)
    d.ok(b.TakeRole, "peer", "reviewer")
    d.ok(b.TakeRole, None, "reviewer", member="lead")
    assert d.board.roles["reviewer"].holders == ("peer", "lead")
    assert b.roles_of(d.board, "peer") == ("reviewer",)
    d.ok(b.LeaveRole, "peer", "reviewer")
    d.ok(b.LeaveRole, None, "reviewer", member="lead")
    assert d.board.roles["reviewer"].holders == ()
    d.fails(E.CONFLICT, b.DefineRole, None, "reviewer", "another description")
    d.fails(E.UNAUTHORIZED, b.DefineRole, "peer", "writer", "")
    d.fails(E.UNAUTHORIZED, b.TakeRole, "peer", "reviewer", member="lead")
    d.fails(E.NOT_FOUND, b.TakeRole, "peer", "nobody")
    d.fails(E.BAD_REQUEST, b.DefineRole, None, "has space", "")


def test_a_removed_member_loses_its_roles_and_its_key_to_the_board(d: Driver) -> None:
    d.ok(b.DefineRole, None, "dev", "")
    d.ok(b.TakeRole, "other", "dev")
    d.ok(b.SetMembers, None, ("lead", "peer"))
    assert d.board.roles["dev"].holders == ()
    assert d.board.members["other"].state is b.MemberState.REMOVED
    d.fails(E.UNAUTHORIZED, b.AddTask, "other", "x")


def test_a_task_is_ready_only_when_every_dependency_is_done(d: Driver) -> None:
    """Issue: "a task is `ready` only when every dependency is `done`, and derived states are recomputed and
    checked consistent at every revision"."""
    d.ok(b.AddTask, "lead", "schema", op="a")
    d.ok(b.AddTask, "lead", "api", op="b", dependencies=("a",))
    d.ok(b.AddTask, "lead", "ui", op="c", dependencies=("b",))
    assert [d.task(t).state for t in "abc"] == [b.TaskState.READY, b.TaskState.PENDING, b.TaskState.PENDING]
    d.fails(E.CONFLICT, b.Claim, "peer", "b")
    d.ok(b.Claim, "peer", "a")
    d.ok(b.Start, "peer", "a")
    assert d.task("b").state is b.TaskState.PENDING
    done = d.ok(b.Complete, "peer", "a", evidence=("src/schema.sql:1",)).result
    assert (
        isinstance(done, b.Task) and done.state is b.TaskState.DONE and done.evidence == ("src/schema.sql:1",)
    )
    assert d.task("b").state is b.TaskState.READY and d.task("c").state is b.TaskState.PENDING


def test_one_done_dependency_of_two_does_not_make_a_task_ready(d: Driver) -> None:
    """Issue: "a task is `ready` only when every dependency is `done`" — every, not any (the mutant that took
    one done dependency as enough survived the stateful run)."""
    d.ok(b.AddTask, "lead", "schema", op="a")
    d.ok(b.AddTask, "lead", "fixtures", op="b")
    d.ok(b.AddTask, "lead", "api", op="c", dependencies=("a", "b"))
    d.ok(b.Claim, "peer", "a")
    d.ok(b.Start, "peer", "a")
    d.ok(b.Complete, "peer", "a")
    assert d.task("c").state is b.TaskState.PENDING
    d.fails(E.CONFLICT, b.Claim, "peer", "c")
    d.ok(b.Claim, "peer", "b")
    d.ok(b.Start, "peer", "b")
    d.ok(b.Complete, "peer", "b")
    assert d.task("c").state is b.TaskState.READY


def test_a_cancelled_dependency_blocks_its_dependents_transitively(d: Driver) -> None:
    d.ok(b.AddTask, "lead", "a", op="a")
    d.ok(b.AddTask, "lead", "b", op="b", dependencies=("a",))
    d.ok(b.AddTask, "lead", "c", op="c", dependencies=("b",))
    d.ok(b.CancelTask, None, "a")
    assert [d.task(t).state for t in "abc"] == [
        b.TaskState.CANCELLED,
        b.TaskState.BLOCKED,
        b.TaskState.BLOCKED,
    ]
    d.fails(E.CONFLICT, b.Claim, "peer", "b")
    d.fails(E.CANCELLED, b.Claim, "peer", "a")
    d.ok(b.CancelTask, "lead", "b")  # the creator may cancel its blocked task
    assert d.task("c").state is b.TaskState.BLOCKED


def test_a_dependency_cycle_is_refused(d: Driver) -> None:
    """Issue: "A dependency cycle is refused"."""
    d.ok(b.AddTask, "lead", "a", op="a")
    d.ok(b.AddTask, "lead", "b", op="b", dependencies=("a",))
    d.ok(b.AddTask, "lead", "c", op="c", dependencies=("b",))
    d.fails(E.BAD_REQUEST, b.AddDependency, "lead", "a", "c")
    d.fails(E.BAD_REQUEST, b.AddDependency, "lead", "a", "a")
    d.fails(E.NOT_FOUND, b.AddTask, "lead", "d", dependencies=("zzz",))
    d.fails(E.BAD_REQUEST, b.AddTask, "lead", "d", dependencies=("a", "a"))
    d.fails(E.WRONG_MEMBER, b.AddDependency, "peer", "c", "a")
    d.ok(b.AddDependency, None, "c", "a")  # not a cycle: c already waits on a through b
    assert d.task("c").dependencies == ("b", "a")


def test_adding_a_dependency_makes_a_ready_task_pending_again(d: Driver) -> None:
    d.ok(b.AddTask, "lead", "a", op="a")
    d.ok(b.AddTask, "lead", "b", op="b")
    d.ok(b.AddDependency, "lead", "b", "a")
    assert d.task("b").state is b.TaskState.PENDING
    d.ok(b.Claim, "peer", "a")
    d.fails(E.CONFLICT, b.AddDependency, "lead", "a", "b")  # claimed: its dependencies are fixed


def test_a_claim_cannot_be_stolen(d: Driver) -> None:
    """Issue: "A claim cannot be stolen: only the claimant, or the owner explicitly, releases it." """
    d.ok(b.AddTask, "lead", "a", op="a")
    d.ok(b.Claim, "peer", "a")
    d.fails(E.CONFLICT, b.Claim, "other", "a")
    d.fails(E.WRONG_MEMBER, b.Release, "other", "a")
    d.fails(E.WRONG_MEMBER, b.Start, "other", "a")
    d.fails(E.WRONG_MEMBER, b.CancelTask, "other", "a")
    d.fails(E.WRONG_MEMBER, b.CancelTask, "lead", "a")  # the creator does not cancel another's claim
    d.fails(E.CONFLICT, b.Release, None, "a")  # the owner must name the claim it releases
    d.fails(E.CONFLICT, b.Release, None, "a", claimant="other")
    d.ok(b.Release, None, "a", claimant="peer")
    assert d.task("a").claimant is None and d.task("a").state is b.TaskState.READY
    d.ok(b.Claim, "other", "a")
    d.ok(b.Start, "other", "a")
    d.ok(b.Release, "other", "a")
    assert d.task("a").state is b.TaskState.READY and d.task("a").claimant is None
    d.fails(E.CONFLICT, b.Release, "other", "a")
    d.fails(E.UNAUTHORIZED, b.Claim, None, "a")


def test_only_the_claimant_starts_and_completes_and_done_is_final(d: Driver) -> None:
    d.ok(b.AddTask, "lead", "a", op="a")
    d.fails(E.CONFLICT, b.Start, "peer", "a")
    d.ok(b.Claim, "peer", "a")
    d.fails(E.CONFLICT, b.Complete, "peer", "a")  # start first
    d.ok(b.Start, "peer", "a")
    d.fails(E.WRONG_MEMBER, b.Complete, "other", "a")
    d.ok(b.Complete, "peer", "a", evidence=("PR 12",))
    assert not d.ok(b.Complete, "peer", "a", evidence=("PR 12",)).changed
    d.fails(E.CONFLICT, b.Complete, "peer", "a", evidence=("PR 13",))
    d.fails(E.CONFLICT, b.CancelTask, None, "a")
    d.fails(E.CONFLICT, b.Release, None, "a", claimant="peer")


def test_completion_evidence_is_bounded_like_an_answers() -> None:
    d = Driver(b.BoardLimits(evidence_refs=2, evidence_ref_chars=5))
    d.ok(b.SetMembers, None, ("peer",))
    d.ok(b.AddTask, None, "a", op="a")
    d.ok(b.Claim, "peer", "a")
    d.ok(b.Start, "peer", "a")
    assert (
        d.fails(E.BOUND_EXCEEDED, b.Complete, "peer", "a", evidence=("1", "2", "3")).bound == "evidence_refs"
    )
    assert (
        d.fails(E.BOUND_EXCEEDED, b.Complete, "peer", "a", evidence=("123456",)).bound == "evidence_ref_chars"
    )
    d.ok(b.Complete, "peer", "a", evidence=("12345", "1"))


def test_a_task_owned_by_a_member_or_role_is_claimed_only_by_them(d: Driver) -> None:
    d.ok(b.DefineRole, None, "dev", "writes code")
    d.ok(b.TakeRole, "peer", "dev")
    d.ok(b.AddTask, None, "mine", op="m", owner=member("other"))
    d.ok(b.AddTask, None, "devs", op="r", owner=role("dev"))
    d.fails(E.WRONG_MEMBER, b.Claim, "peer", "m")
    d.fails(E.WRONG_MEMBER, b.Claim, "other", "r")
    d.ok(b.Claim, "other", "m")
    d.ok(b.Claim, "peer", "r")
    d.fails(E.NOT_FOUND, b.AddTask, None, "x", owner=role("nobody"))
    d.fails(E.NOT_FOUND, b.AddTask, None, "x", owner=member("ghost"))


def test_operation_ids_make_every_command_idempotent_with_conflict_on_changed_reuse(d: Driver) -> None:
    """Issue: "Operation ids make every command idempotent with `conflict` on changed reuse"."""
    first = d.ok(b.AddTask, "lead", "schema", op="t1")
    again = d.ok(b.AddTask, "lead", "schema", op="t1")
    assert not again.changed and again.result == first.result and d.board.revision == first.state.revision
    d.fails(E.CONFLICT, b.AddTask, "lead", "other title", op="t1")
    d.fails(E.CONFLICT, b.AddTask, "peer", "schema", op="t1")
    d.fails(E.CONFLICT, b.SendNote, "lead", member("peer"), "hi", op="t1")
    d.ok(b.Claim, "peer", "t1", op="c1")
    assert not d.ok(b.Claim, "peer", "t1", op="c1").changed
    d.ok(b.Release, "peer", "t1", op="r1")
    assert not d.ok(b.Claim, "peer", "t1", op="c1").changed  # a retry of the old claim claims nothing again
    assert d.task("t1").claimant is None


def test_notes_are_pulled_and_paged_by_25(d: Driver) -> None:
    """Seed: "read_messages returns at most 25 matching notes per call. Follow the returned nextOffset to
    retrieve later pages." """
    for n in range(60):
        d.ok(b.SendNote, "lead", member("peer"), f"note {n}", op=f"n{n}")
    assert b.unread_count(d.board, "peer") == 60
    offset: int | None = 0
    seen: list[str] = []
    while offset is not None:
        page = d.ok(b.ReadMessages, "peer", offset=offset).result
        assert isinstance(page, b.Page) and len(page.notes) <= 25
        seen.extend(note.id for note in page.notes)
        offset = page.next_offset
    assert seen == [f"n{n}" for n in range(60)]
    assert b.unread_count(d.board, "peer") == 0


def test_unread_paging_keeps_next_offset_until_the_page_is_exhausted(d: Driver) -> None:
    """Seed: "When unreadOnly: true, returned notes leave the unread result set, so nextOffset intentionally
    remains at the current offset until that page is exhausted." """
    for n in range(60):
        d.ok(b.SendNote, "lead", member("peer"), f"note {n}", op=f"n{n}")
    first = d.ok(b.ReadMessages, "peer", unread_only=True).result
    assert isinstance(first, b.Page) and [n.id for n in first.notes] == [f"n{n}" for n in range(25)]
    assert first.next_offset == 0 and first.unread == 35
    d.ok(b.SendNote, "lead", member("peer"), "late", op="late")  # a concurrent write joins the end
    second = d.ok(b.ReadMessages, "peer", unread_only=True).result
    assert isinstance(second, b.Page) and second.next_offset == 0
    third = d.ok(b.ReadMessages, "peer", unread_only=True).result
    assert isinstance(third, b.Page) and [n.id for n in third.notes][-1] == "late"
    assert third.next_offset is None and third.unread == 0
    assert len(first.notes) + len(second.notes) + len(third.notes) == 61


def test_a_note_to_a_role_reaches_its_holders_then_and_a_lost_read_reply_is_repeatable(d: Driver) -> None:
    d.ok(b.DefineRole, None, "dev", "")
    d.ok(b.TakeRole, "peer", "dev")
    d.ok(b.TakeRole, "lead", "dev")
    note = d.ok(b.SendNote, "lead", role("dev"), "standup at ten").result
    assert isinstance(note, b.Note) and note.recipients == ("peer",)  # the sender is not its own recipient
    d.ok(b.TakeRole, "other", "dev")
    assert b.unread_count(d.board, "other") == 0
    read = d.ok(b.ReadMessages, "peer", unread_only=True, op="read1")
    retry = d.ok(b.ReadMessages, "peer", unread_only=True, op="read1")
    assert not retry.changed and retry.result == read.result
    d.fails(E.CONFLICT, b.ReadMessages, "peer", unread_only=True, offset=3, op="read1")
    d.fails(E.BAD_REQUEST, b.ReadMessages, "peer", offset=-1)
    d.fails(E.BAD_REQUEST, b.ReadMessages, None)
    d.fails(E.UNAUTHORIZED, b.ReadMessages, "peer", member="other")
    for holder in ("peer", "lead", "other"):
        d.ok(b.LeaveRole, holder, "dev")
    empty = d.ok(b.SendNote, "peer", role("dev"), "anyone there?").result  # a role may be empty
    assert isinstance(empty, b.Note) and empty.recipients == ()


def test_every_bound_is_an_explicit_error() -> None:
    limits = b.BoardLimits(
        members=2, roles=1, tasks=2, notes=1, dependencies=1, title_chars=5, note_chars=5, operations=6
    )
    d = Driver(limits)
    assert d.fails(E.BOUND_EXCEEDED, b.SetMembers, None, ("a", "b", "c")).bound == "members"
    d.ok(b.SetMembers, None, ("a", "b"))
    d.ok(b.DefineRole, None, "r1", "")
    assert d.fails(E.BOUND_EXCEEDED, b.DefineRole, None, "r2", "").bound == "roles"
    assert d.fails(E.BOUND_EXCEEDED, b.AddTask, "a", "123456").bound == "title_chars"
    d.ok(b.AddTask, "a", "12345", op="t1")  # a text of exactly its bound is taken
    d.ok(b.AddTask, "a", "t", op="t2", dependencies=("t1",))
    assert d.fails(E.BOUND_EXCEEDED, b.AddTask, "a", "t").bound == "tasks"
    assert d.fails(E.BOUND_EXCEEDED, b.AddTask, "a", "t", dependencies=("t1", "t2")).bound == "dependencies"
    assert d.fails(E.BOUND_EXCEEDED, b.SendNote, "a", member("b"), "123456").bound == "note_chars"
    d.ok(b.SendNote, "a", member("b"), "hi")
    assert d.fails(E.BOUND_EXCEEDED, b.SendNote, "a", member("b"), "hi").bound == "notes"
    d.ok(b.TakeRole, "a", "r1")
    assert d.fails(E.BOUND_EXCEEDED, b.TakeRole, "b", "r1").bound == "operations"
    d.ok(b.ReadMessages, "b")  # reads keep no operation id, so a full operation log never silences a mailbox


def test_a_board_may_reach_its_state_limit_exactly_and_not_one_byte_past_it() -> None:
    def filled(state_bytes: int) -> Accepted[b.Board] | Rejected:
        d = Driver(b.BoardLimits(state_bytes=state_bytes))
        d.ok(b.SetMembers, None, ("a", "b"))
        return d.send(b.SendNote, "a", member("b"), "x" * 200)

    full = filled(b.DEFAULT_BOARD_LIMITS.state_bytes)
    assert isinstance(full, Accepted)
    assert isinstance(filled(full.state.bytes), Accepted)
    refused = filled(full.state.bytes - 1)
    assert isinstance(refused, Rejected) and refused.bound == "state_bytes"


def test_a_member_flooding_the_board_fills_its_own_share_and_the_others_go_on() -> None:
    """board-v1 section 5, a member's share: a peer's agent that sent notes, tasks or texts without end used
    to fill the board's bounds for the whole team, for good (retained means retained). Each share refuses
    its member naming the bound; another member and the owner are not touched; a repeat of an accepted
    operation is still answered with its record."""
    note = b.SendNote("op9", SESSION, "flood", 1_009, member("peer"), "x" * 100)  # as the flood's notes weigh
    shares = {"member_operations": 4, "member_tasks": 2, "member_notes": 2}
    shares["member_bytes"] = 3 * b.weight(note)
    for bound, most in shares.items():
        d = Driver(b.BoardLimits(**{bound: most}))  # type: ignore[arg-type]
        d.ok(b.SetMembers, None, ("flood", "peer"))
        while True:
            if bound in ("member_tasks", "member_operations"):
                outcome = d.send(b.AddTask, "flood", "t")
            else:
                outcome = d.send(b.SendNote, "flood", member("peer"), "x" * 100)
            if isinstance(outcome, Rejected):
                break
        assert (outcome.code, outcome.bound) == (E.BOUND_EXCEEDED, bound), outcome
        assert "'flood'" in outcome.detail
        held = d.board.shares["flood"]
        assert getattr(held, bound.removeprefix("member_")) == most  # the whole share, and not one more
        first = d.board.operations["op2"]  # op1 is set_members
        again = d.apply(first)
        assert first.actor == "flood" and isinstance(again, Accepted) and not again.changed
        d.ok(b.SendNote, "peer", member("flood"), "still here")
        d.ok(b.AddTask, "peer", "mine")
        d.ok(b.SendNote, None, member("peer"), "the owner has no share")
        assert "owner" not in d.board.shares and None not in d.board.shares


def test_shares_are_rebuilt_from_a_checkpoint_and_replay_admits_what_was_accepted() -> None:
    """Shares are derived, not journaled: a checkpoint holds none (so it is what it was before shares) and
    decoding counts them from the operations; a journal in which a member went past a share, accepted
    before the rule, recovers whole (recovery replays under `replay_limits`)."""
    from harness.core.board_recovery import checkpoint_record, delta_record, recover
    from harness.core.codec import board_from_json, board_to_json

    d = Driver(b.BoardLimits(member_notes=1_000))
    commands = [b.SetMembers("m", SESSION, None, 1, ("lead", "peer"))]
    commands += [b.SendNote(f"n{i}", SESSION, "lead", 2 + i, member("peer"), "hi") for i in range(3)]
    for command in commands:
        assert isinstance(d.apply(command), Accepted)
    encoded = board_to_json(d.board)
    assert "shares" not in encoded
    assert board_from_json(encoded) == d.board and d.board.shares["lead"].notes == 3
    tight = b.BoardLimits(member_notes=2)
    deltas = [(n, delta_record(command, n)) for n, command in enumerate(commands, start=1)]
    found = recover("t", deltas, tight)
    assert found.board == d.board and found.rejected == ()
    with_checkpoint = [*deltas[:2], (3, checkpoint_record(found.board)), *deltas[2:]]
    assert recover("t", with_checkpoint, tight).board == d.board
    refused = b.step(d.board, b.SendNote("n9", SESSION, "lead", 9, member("peer"), "x"), tight)
    assert isinstance(refused, Rejected) and refused.bound == "member_notes"


def test_the_state_limit_is_measured_and_refuses_growth_only() -> None:
    """Seed: "Current mutations enforce the existing eight-MiB state limit"."""
    d = Driver(b.BoardLimits(state_bytes=2_000))
    d.ok(b.SetMembers, None, ("a", "b"))
    while True:
        outcome = d.send(b.SendNote, "a", member("b"), "x" * 200)
        if isinstance(outcome, Rejected):
            break
    assert outcome.code is E.BOUND_EXCEEDED and outcome.bound == "state_bytes"
    assert d.board.bytes <= 2_000 and board_violations(d.board, d.limits) == []
    d.ok(b.ReadMessages, "b", unread_only=True)  # a read shrinks the state, so it is never refused


def test_previews_say_when_they_cut() -> None:
    assert b.preview("short") == b.Preview("short", False, 5)
    long = b.preview("y" * 1_000)
    assert long.truncated and len(long.text) == LIMITS.preview_chars and long.chars == 1_000


def test_the_measure_is_the_compact_json_of_each_record() -> None:
    role_record = b.Role("dev", "é", (), 5)
    assert b.weight(role_record) == len('["dev","é",[],5]'.encode())


def test_an_operation_id_a_caller_chooses_is_an_id_and_never_the_daemons() -> None:
    """board-v1 section 8 (RPC): a member's notes under `members:N` once froze every board request."""
    for op, code, bound in (
        ("members:1", "bad_request", None),
        ("members:", "bad_request", None),
        ("x" * 129, "bound_exceeded", "id_chars"),
        ("a b", "bad_request", None),
        ("\x1b]0;x\x07", "bad_request", None),
    ):
        refused = b.caller_op_problem(op)
        assert refused is not None and (refused.code.value, refused.bound) == (code, bound), op
    for op in ("x" * 128, "members", "note-1", "Members:1", "m:members:1"):
        assert b.caller_op_problem(op) is None, op
