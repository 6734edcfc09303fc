# A Hypothesis rule machine over the real board reducer: the owner and members interleave roles, tasks,
# dependencies, claims, releases, completions, cancels, notes and reads (with and without unreadOnly, each
# reader following its own nextOffset while others write), with small bounds so every bound is hit. After
# every step it checks every board invariant (the same functions the model checker and the daemon call),
# replays accepted operations, and checks each read against a plain reference model of the paging rule.
from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from harness.core import board as b
from harness.core.board_invariants import board_violations, check_step
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted

SESSION = b.Session("t", 7)
LIMITS = b.BoardLimits(
    members=5, roles=2, tasks=6, dependencies=2, notes=14, page_notes=3, operations=45, state_bytes=9_000
)
MEMBERS = ["m0", "m1", "m2", "m3", "m4"]
ACTORS = st.sampled_from([None, "m0", "m1", "m1", "m2", "m2", "m2", "m3", "m4"])
MEMBER_IDS = st.sampled_from(MEMBERS)
ROLES = st.sampled_from(["r0", "r0", "r1", "r2"])
TASKS = st.sampled_from([f"t{n}" for n in range(7)])
NOTE_TEXT = st.sampled_from(["hi", "see src/api.ts", "x" * 300])
OFFSETS = st.sampled_from([0, 0, 1, 3, 5])


class BoardMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.board = b.empty_board(SESSION)
        self.now = 1_000
        self.ops = 0
        self.accepted: list[b.BoardCommand] = []
        # The reference model of mailboxes: plain lists, updated only from accepted commands' own fields.
        self.holders: dict[str, list[str]] = {}
        self.active: set[str] = set()
        self.mailbox: dict[str, list[str]] = {}
        self.unread: dict[str, list[str]] = {}
        self.cursor: dict[str, tuple[bool, int]] = {}  # reader -> (unreadOnly, the nextOffset it follows)

    def next_op(self, prefix: str = "op") -> str:
        self.ops += 1
        return f"{prefix}{self.ops}"

    def apply(self, command: b.BoardCommand) -> Accepted[b.Board] | Rejected:
        before = self.board
        outcome = b.step(before, command, LIMITS)
        check_step(before, command, outcome, LIMITS)
        name = type(command).__name__
        event(f"{name}: {outcome.code}" if isinstance(outcome, Rejected) else f"{name}: accepted")
        if isinstance(outcome, Rejected):
            return outcome
        self.board = outcome.state
        if outcome.changed:
            self.accepted.append(command)
        return outcome

    def at(self) -> int:
        self.now += 1
        return self.now

    @initialize()
    def start(self) -> None:
        self.sync(frozenset(MEMBERS[:4]))

    # --- members and roles ---------------------------------------------------------------------------------

    @rule(extra=st.frozensets(st.sampled_from(["m3", "m4"])))
    def set_members(self, extra: frozenset[str]) -> None:
        self.sync(frozenset({"m0", "m1", "m2"}) | extra)

    @rule()
    def remove_a_member(self) -> None:
        self.sync(frozenset({"m0", "m2"}))

    def sync(self, members: frozenset[str]) -> None:
        ordered = tuple(sorted(members))
        outcome = self.apply(b.SetMembers(self.next_op(), SESSION, None, self.at(), ordered))
        if isinstance(outcome, Accepted):
            self.active = set(members)
            for member_id in members:
                self.mailbox.setdefault(member_id, [])
                self.unread.setdefault(member_id, [])
            self.holders = {role: [h for h in held if h in members] for role, held in self.holders.items()}

    @rule(name=ROLES, actor=ACTORS)
    def define_role(self, name: str, actor: str | None) -> None:
        outcome = self.apply(b.DefineRole(self.next_op(), SESSION, actor, self.at(), name, f"the {name}"))
        if isinstance(outcome, Accepted):
            self.holders.setdefault(name, [])

    @rule(role=ROLES, actor=ACTORS, member=st.none() | MEMBER_IDS, take=st.booleans())
    def take_or_leave_role(self, role: str, actor: str | None, member: str | None, take: bool) -> None:
        kind = b.TakeRole if take else b.LeaveRole
        outcome = self.apply(kind(self.next_op(), SESSION, actor, self.at(), role, member))
        if isinstance(outcome, Accepted):
            who = actor if actor is not None else member
            assert who is not None and who in self.active
            held = self.holders[role]
            if take and who not in held:
                held.append(who)
            elif not take and who in held:
                held.remove(who)
            assert list(self.board.roles[role].holders) == held

    # --- tasks ---------------------------------------------------------------------------------------------

    @rule(
        task=TASKS,
        actor=ACTORS,
        owner=st.none()
        | st.builds(b.Addressee, st.sampled_from(b.AddresseeKind), st.sampled_from(["m1", "r0"])),
        data=st.data(),
    )
    def add_task(self, task: str, actor: str | None, owner: b.Addressee | None, data: st.DataObject) -> None:
        known = [*self.board.task_order, "nothing"]
        deps = data.draw(st.lists(st.sampled_from(known), max_size=3))
        self.apply(b.AddTask(task, SESSION, actor, self.at(), f"do {task}", "", owner, tuple(deps)))

    def pick(self, data: st.DataObject) -> str:
        """A task of the board, now and then one that does not exist."""
        return data.draw(st.sampled_from([*self.board.task_order, *self.board.task_order, "t-missing"]))

    @rule(data=st.data(), actor=ACTORS)
    def add_dependency(self, data: st.DataObject, actor: str | None) -> None:
        task, on = self.pick(data), self.pick(data)
        outcome = self.apply(b.AddDependency(self.next_op(), SESSION, actor, self.at(), task, on))
        if isinstance(outcome, Rejected) and outcome.code is ErrorCode.BAD_REQUEST:
            assert b.reaches(self.board, on, task), "only a cycle refuses a dependency as bad_request"

    @rule(data=st.data(), actor=ACTORS)
    def claim(self, data: st.DataObject, actor: str | None) -> None:
        task = self.pick(data)
        before = self.board.tasks.get(task)
        outcome = self.apply(b.Claim(self.next_op(), SESSION, actor, self.at(), task))
        if before is not None and before.claimant is not None and before.claimant != actor:
            assert isinstance(outcome, Rejected), "a claim was stolen"

    @rule(data=st.data(), actor=st.sampled_from(["m0", "m2"]))
    def work_a_ready_task(self, data: st.DataObject, actor: str) -> None:
        """A member claims, starts and completes a ready task, so dependents become ready."""
        ready = [t for t in self.board.task_order if self.board.tasks[t].state is b.TaskState.READY]
        if not ready:
            return
        task = data.draw(st.sampled_from(ready))
        for kind in (b.Claim, b.Start):
            self.apply(kind(self.next_op(), SESSION, actor, self.at(), task))
        self.apply(b.Complete(self.next_op(), SESSION, actor, self.at(), task, ("PR 1",)))

    @rule(data=st.data(), actor=ACTORS, claimant=st.none() | MEMBER_IDS)
    def release(self, data: st.DataObject, actor: str | None, claimant: str | None) -> None:
        task = self.pick(data)
        self.apply(b.Release(self.next_op(), SESSION, actor, self.at(), task, claimant))

    @rule(data=st.data(), actor=ACTORS)
    def start_task(self, data: st.DataObject, actor: str | None) -> None:
        task = self.pick(data)
        self.apply(b.Start(self.next_op(), SESSION, actor, self.at(), task))

    @rule(
        data=st.data(),
        actor=ACTORS,
        evidence=st.lists(st.sampled_from(["PR 1", "log:3", "PR 1", ""]), max_size=2),
    )
    def complete(self, data: st.DataObject, actor: str | None, evidence: list[str]) -> None:
        task = self.pick(data)
        self.apply(b.Complete(self.next_op(), SESSION, actor, self.at(), task, tuple(evidence)))

    @rule(data=st.data(), actor=ACTORS)
    def cancel(self, data: st.DataObject, actor: str | None) -> None:
        task = self.pick(data)
        self.apply(b.CancelTask(self.next_op(), SESSION, actor, self.at(), task))

    # --- notes ---------------------------------------------------------------------------------------------

    @rule(
        actor=ACTORS,
        to=st.builds(
            b.Addressee, st.sampled_from(b.AddresseeKind), st.sampled_from(["m1", "m2", "r0", "r1"])
        ),
        text=NOTE_TEXT,
    )
    def send_note(self, actor: str | None, to: b.Addressee, text: str) -> None:
        op = self.next_op("n")
        outcome = self.apply(b.SendNote(op, SESSION, actor, self.at(), to, text))
        if isinstance(outcome, Accepted):
            sender = actor or b.OWNER
            if to.kind is b.AddresseeKind.MEMBER:
                recipients = [to.name]
            else:
                recipients = [h for h in self.holders[to.name] if h != sender]
            for member_id in recipients:
                self.mailbox[member_id].append(op)
                self.unread[member_id].append(op)

    @rule(count=st.integers(2, 5))
    def burst_of_notes(self, count: int) -> None:
        """Several notes to one reader, so its unread set spans pages while it reads."""
        for _ in range(count):
            self.send_note("m0", b.Addressee(b.AddresseeKind.MEMBER, "m2"), "hi")

    @rule(reader=MEMBER_IDS, by_owner=st.booleans(), unread_only=st.booleans(), offset=OFFSETS)
    def read(self, reader: str, by_owner: bool, unread_only: bool, offset: int) -> None:
        self.read_page(reader, by_owner, unread_only, offset)

    @rule(reader=MEMBER_IDS)
    def continue_reading(self, reader: str) -> None:
        """A reader following its own nextOffset with the same filter, while other rules write notes."""
        unread_only, offset = self.cursor.get(reader, (True, 0))
        self.read_page(reader, False, unread_only, offset)

    def read_page(self, reader: str, by_owner: bool, unread_only: bool, offset: int) -> None:
        actor, member = (None, reader) if by_owner else (reader, None)
        command = b.ReadMessages(self.next_op("read"), SESSION, actor, self.at(), unread_only, offset, member)
        outcome = self.apply(command)
        if isinstance(outcome, Rejected):
            assert reader not in self.active
            return
        page = outcome.result
        assert isinstance(page, b.Page)
        # The reference: the matching set, the page of it at offset, and the seed's nextOffset rule.
        source = self.unread[reader] if unread_only else self.mailbox[reader]
        expected = source[offset : offset + LIMITS.page_notes]
        more = offset + len(expected) < len(source)
        expected_next = (offset if unread_only else offset + len(expected)) if more else None
        assert [note.id for note in page.notes] == expected
        assert page.next_offset == expected_next
        self.unread[reader] = [n for n in self.unread[reader] if n not in expected]
        assert page.unread == len(self.unread[reader])
        self.cursor[reader] = (unread_only, 0 if expected_next is None else expected_next)

    # --- replays and stale sessions ------------------------------------------------------------------------

    @rule(data=st.data())
    def repeat_an_accepted_operation(self, data: st.DataObject) -> None:
        if not self.accepted:
            return
        command = data.draw(st.sampled_from(self.accepted))
        if isinstance(command, b.ReadMessages):
            return  # only a member's last read is replayable; the reference model covers reads
        outcome = self.apply(command)
        if command.actor is not None and command.actor not in self.active:
            # The actor is checked before the repeat, as in the team ledger: a removed member's key is gone.
            assert isinstance(outcome, Rejected) and outcome.code is ErrorCode.UNAUTHORIZED
        else:
            assert isinstance(outcome, Accepted) and not outcome.changed

    @rule(task=TASKS, generation=st.sampled_from([6, 8]))
    def stale_session(self, task: str, generation: int) -> None:
        stale = b.Session("t", generation)
        outcome = self.apply(b.Claim(self.next_op(), stale, "m1", self.at(), task))
        assert isinstance(outcome, Rejected) and outcome.code is ErrorCode.CONFLICT

    @invariant()
    def holds_every_invariant(self) -> None:
        assert board_violations(self.board, LIMITS) == []

    @invariant()
    def reference_mailboxes_agree(self) -> None:
        for member_id, member in self.board.members.items():
            assert list(member.mailbox) == self.mailbox[member_id]
            assert list(member.unread) == self.unread[member_id]


BoardMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_board_machine = BoardMachine.TestCase
