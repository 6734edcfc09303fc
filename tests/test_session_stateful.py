# A Hypothesis rule machine over the real session reducer: a session of a random mode where every member
# calls every tool (allowed by its role or not), the clock jumps across reminder and violation deadlines, the
# ledger reports answers and ends, the lead takes turns, and crashes, errors and aborts end it now and then,
# with small bounds so every bound is hit. After every step it checks every session invariant (the functions
# the daemon calls), and beside them a plain model of the ledger the effects drive: a question is opened only
# by OpenAsk, reminded at most once, released or cancelled at most once, and none is left open at the end.
from __future__ import annotations

import json
from collections import Counter

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.core import session as s
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted
from harness.core.session_invariants import check_step, session_violations
from harness.core.values import replace
from harness.io.session_runner import decode_command, encode_command

MIN = 60_000
LIMITS = s.SessionLimits(
    participants=3,
    lead_turns=6,
    reminders=5,
    announcements=3,
    announcement_chars=40,
    asks=12,
    rfcs=2,
    thread_posts=4,
    text_chars=60,
    session_ms=90 * MIN,
    reminder_after_ms=5 * MIN,
    violation_after_ms=5 * MIN,
)
ROSTERS = {
    s.Mode.SUPERVISE: ("lead", ("p1",)),
    s.Mode.FACILITATE: ("lead", ("p1", "p2", "p3")),
    s.Mode.DISCUSS: ("lead", ("p1", "p2")),
    s.Mode.JUDGE: ("lead", ()),
    s.Mode.RUN: ("lead", ()),
}
NAMES = ["lead", "p1", "p2", "p3", "stranger"]
ACTORS = st.sampled_from(NAMES)
TARGETS = st.none() | st.sampled_from(NAMES)
TEXTS = st.sampled_from(["status?", "", "x" * 70])

# The seed's "Tool surface, by role", restated here from the seed's table rather than imported, so the machine
# checks the code against the seed and not against itself.
Y = True
SEED_TABLE: dict[s.Role, tuple[bool, ...]] = {
    # ask, answer, announce, roll_call, conclude, request_for_comment, recess, adjourn, acknowledge
    s.Role.FACILITATOR: (Y, Y, Y, Y, Y, False, False, False, False),
    s.Role.FACILITATED_AGENT: (Y, Y, Y, Y, False, Y, False, False, False),
    s.Role.SUPERVISOR: (Y, Y, Y, Y, Y, False, False, False, False),
    s.Role.SUPERVISED_AGENT: (Y, Y, Y, Y, False, False, False, False, False),
    s.Role.DISCUSS_LEAD: (Y, Y, Y, Y, False, False, Y, Y, Y),
    s.Role.DISCUSS_AGENT: (Y, Y, Y, Y, False, Y, False, False, Y),
    s.Role.JUDGE: (False, False, False, False, Y, False, False, False, False),
    # Not in the seed's table: `run` is one-shot there; harness gives its one agent only Conclude, as a judge.
    s.Role.RUNNER: (False, False, False, False, Y, False, False, False, False),
}
SEED_TOOLS = (
    s.Tool.ASK,
    s.Tool.ANSWER,
    s.Tool.ANNOUNCE,
    s.Tool.ROLL_CALL,
    s.Tool.CONCLUDE,
    s.Tool.REQUEST_FOR_COMMENT,
    s.Tool.RECESS,
    s.Tool.ADJOURN,
    s.Tool.ACKNOWLEDGE,
)


def seed_allows(role: s.Role, tool: s.Tool) -> bool:
    return SEED_TABLE[role][SEED_TOOLS.index(tool)]


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.session: s.Session | None = None
        self.now = 1_000_000
        self.ops = 0
        # The ledger as the effects drive it: question id -> open | answered | released | cancelled | ended.
        self.ledger: dict[str, str] = {}
        self.reminded: Counter[str] = Counter()
        self.announce_calls = 0
        self.announcements_posted = 0
        self.journal: list[str] = []  # every accepted command, as the hosting daemon journals it

    @property
    def state(self) -> s.Session:
        assert self.session is not None
        return self.session

    def next_op(self) -> str:
        self.ops += 1
        return f"op{self.ops}"

    def apply(self, command: s.SessionCommand) -> Accepted[s.Session] | Rejected:
        before = self.session
        outcome = s.step(before, command, LIMITS)
        check_step(before, command, outcome, LIMITS)
        name = type(command).__name__
        event(f"{name}: {outcome.code}" if isinstance(outcome, Rejected) else f"{name}: accepted")
        if isinstance(command, s.ToolCommand) and before is not None:
            self.check_role_table(before, command, outcome)
        if isinstance(outcome, Rejected):
            return outcome
        self.session = outcome.state
        self.journal.append(json.dumps(encode_command(command)))
        for effect in outcome.effects:
            event(f"effect: {type(effect).__name__}")
        self.drive_ledger(outcome.effects)
        if isinstance(command, s.Announce) and outcome.changed:
            self.announce_calls += 1
        return outcome

    def teardown(self) -> None:
        """A daemon restarted after a crash replays the session's journal: every accepted command, read back
        from its JSON line, leads to the same session (the reducer is pure, and the journal loses nothing)."""
        replayed: s.Session | None = None
        for line in self.journal:
            outcome = s.step(replayed, decode_command(json.loads(line)), LIMITS)
            assert isinstance(outcome, Accepted), outcome
            replayed = outcome.state
        assert replayed == self.session

    def check_role_table(
        self, before: s.Session, command: s.ToolCommand, outcome: Accepted[s.Session] | Rejected
    ) -> None:
        """The role x tool table enforced: a tool the seed's table denies the caller's role is refused as
        `unauthorized`, whatever else is wrong with the call; one it grants is never refused for the role."""
        member = before.members.get(command.actor)
        tool = s.TOOLS[type(command)]
        if member is None or not seed_allows(member.role, tool):
            assert isinstance(outcome, Rejected) and outcome.code is ErrorCode.UNAUTHORIZED, outcome
        else:
            assert isinstance(outcome, Accepted) or outcome.code is not ErrorCode.UNAUTHORIZED, outcome

    def drive_ledger(self, effects: tuple[object, ...]) -> None:
        for effect in effects:
            if isinstance(effect, s.OpenAsk):
                assert effect.question_id not in self.ledger
                self.ledger[effect.question_id] = "open"
            elif isinstance(effect, s.SubmitReminder):
                assert self.ledger[effect.question_id] == "open"
                self.reminded[effect.question_id] += 1
            elif isinstance(effect, s.ReleaseAsker):
                assert self.ledger[effect.question_id] == "open" and effect.reason == "no_answer"
                assert self.reminded[effect.question_id] == 1, "a violation follows exactly one reminder"
                self.ledger[effect.question_id] = "released"
            elif isinstance(effect, s.CancelAsk):
                assert self.ledger[effect.question_id] == "open" and effect.reason
                self.ledger[effect.question_id] = "cancelled"
            elif isinstance(effect, s.PostAnnouncement):
                self.announcements_posted += 1

    @initialize(mode=st.sampled_from(s.Mode))
    def start(self, mode: s.Mode) -> None:
        lead, participants = ROSTERS[mode]
        outcome = self.apply(s.Start(self.now, f"sess{self.ops}", mode, lead, participants))
        assert isinstance(outcome, Accepted)

    # --- tools ---------------------------------------------------------------------------------------------

    @rule(actor=ACTORS, to=TARGETS, text=st.sampled_from(["status?", "what next?"]))
    def ask(self, actor: str, to: str | None, text: str) -> None:
        self.apply(s.Ask(self.now, actor, self.next_op(), text, to))

    @rule()
    def lead_asks_everyone(self) -> None:
        self.apply(s.Ask(self.now, "lead", self.next_op(), "where are we?"))

    @rule(data=st.data(), actor=ACTORS)
    def answer(self, data: st.DataObject, actor: str) -> None:
        known = [None, "unknown", *self.state.ask_order]
        question_id = data.draw(st.sampled_from(known))
        owed = s.owed_by(self.state, actor)
        outcome = self.apply(s.Answer(self.now, actor, question_id))
        if question_id is None and isinstance(outcome, Rejected) and outcome.code is ErrorCode.BAD_REQUEST:
            assert all(qid in outcome.detail for qid in owed), "a refused answer lists the owed question ids"
        if isinstance(outcome, Accepted):
            assert outcome.effects == (s.PostAnswer(str(question_id), actor),)

    @rule(data=st.data(), actor=ACTORS)
    def answer_what_is_owed(self, data: st.DataObject, actor: str) -> None:
        """A member answers a question it owes, and the ledger reports it answered."""
        owed = s.owed_by(self.state, actor) if self.session else ()
        if not owed:
            return
        question_id = data.draw(st.sampled_from(owed))
        if isinstance(self.apply(s.Answer(self.now, actor, question_id)), Accepted):
            self.ledger[question_id] = "answered"
            self.apply(s.AskAnswered(self.now, question_id))

    @rule(actor=ACTORS, text=TEXTS, reuse=st.booleans())
    def announce(self, actor: str, text: str, reuse: bool) -> None:
        op = f"op{self.ops}" if reuse else self.next_op()
        self.apply(s.Announce(self.now, actor, op, text))

    @rule(actor=ACTORS)
    def roll_call(self, actor: str) -> None:
        outcome = self.apply(s.RollCall(self.now, actor))
        if isinstance(outcome, Accepted):
            assert not outcome.changed

    @rule(actor=ACTORS, text=TEXTS, acknowledge=st.booleans())
    def request_or_acknowledge(self, actor: str, text: str, acknowledge: bool) -> None:
        kind = s.Acknowledge if acknowledge else s.RequestForComment
        self.apply(kind(self.now, actor, self.next_op(), text))

    @rule(actor=ACTORS, kind=st.sampled_from([s.Conclude, s.Recess, s.Adjourn]), summary=TEXTS)
    def conclude(self, actor: str, kind: type[s.Conclude | s.Recess | s.Adjourn], summary: str) -> None:
        """Conclude, Recess and Adjourn cancel every in-flight ask with its reason."""
        before = self.state
        flying = s.in_flight(before)
        outcome = self.apply(kind(self.now, actor, summary))
        if isinstance(outcome, Accepted) and outcome.changed:
            cancels = [e for e in outcome.effects if isinstance(e, s.CancelAsk)]
            assert [c.question_id for c in cancels] == list(flying)
            assert all(c.reason and c.reason == self.state.asks[c.question_id].reason for c in cancels)
            assert self.state.termination is s.Termination.CONCLUDED

    @precondition(lambda self: self.session is not None and bool(s.in_flight(self.session)))
    @rule(adjourn=st.booleans())
    def lead_ends_with_asks_in_flight(self, adjourn: bool) -> None:
        """The lead ends the session with the terminal tool its mode gives it, asks still in flight."""
        kind = {
            s.Mode.DISCUSS: s.Adjourn if adjourn else s.Recess,
        }.get(self.state.mode, s.Conclude)
        self.conclude("lead", kind, "done")

    # --- the loop and observations -------------------------------------------------------------------------

    @rule(minutes=st.sampled_from([1, 4, 5, 5, 6, 10, 30]))
    def tick(self, minutes: int) -> None:
        self.now += minutes * MIN
        self.apply(s.Tick(self.now))

    @rule()
    def tick_at_the_next_deadline(self) -> None:
        deadline = s.next_deadline(self.state, LIMITS)
        if deadline is None:
            return
        self.now = max(self.now, deadline)
        outcome = self.apply(s.Tick(self.now))
        assert isinstance(outcome, Accepted) and outcome.changed, "a deadline always has something due"

    @rule(member=ACTORS)
    def turn(self, member: str) -> None:
        self.apply(s.TurnStarted(self.now, member))

    @rule(data=st.data(), reason=st.sampled_from(["expired", "cancelled", "bound_exceeded"]))
    def ledger_ends_a_question(self, data: st.DataObject, reason: str) -> None:
        question_id = data.draw(st.sampled_from(["unknown", *self.state.ask_order]))
        was_open = self.ledger.get(question_id) == "open"
        outcome = self.apply(s.AskEnded(self.now, question_id, reason))
        if was_open and self.state.state is s.SessionState.RUNNING and outcome.changed:
            self.ledger[question_id] = "ended"

    @rule(
        ending=st.sampled_from(
            [s.AgentCrashed(0, "p1", "exit 1"), s.LeadError(0, "rate limited"), s.Abort(0, "ctrl-c")]
        ),
        roll=st.integers(0, 5),
    )
    def stop(self, ending: s.AgentCrashed | s.LeadError | s.Abort, roll: int) -> None:
        """Now and then (one draw in six), so most sessions end by a tool or a bound."""
        if roll == 0:
            self.apply(replace(ending, at=self.now))

    @precondition(lambda self: self.session is not None and self.session.state is s.SessionState.ENDED)
    @rule(mode=st.sampled_from(s.Mode))
    def start_over(self, mode: s.Mode) -> None:
        """An ended session is kept as it is; the next one starts afresh (the ledger model with it)."""
        self.session = None
        self.journal.clear()  # its own journal, in its own session directory
        self.ledger.clear()
        self.reminded.clear()
        self.announce_calls = self.announcements_posted = 0
        self.start(mode)

    @invariant()
    def holds_every_invariant(self) -> None:
        assert session_violations(self.state, LIMITS) == []

    @invariant()
    def never_two_reminders_for_one_ask(self) -> None:
        assert all(count == 1 for count in self.reminded.values())

    @invariant()
    def no_announcement_without_an_explicit_call(self) -> None:
        assert self.announcements_posted == self.announce_calls == len(self.state.announcements)

    @invariant()
    def an_ended_session_leaves_no_question_open(self) -> None:
        if self.state.state is s.SessionState.ENDED:
            assert [qid for qid, state in self.ledger.items() if state == "open"] == []


SessionMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_session_machine = SessionMachine.TestCase
