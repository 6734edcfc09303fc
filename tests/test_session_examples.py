# Example tests of the session reducer: one story per rule of spec/session-v1.md, each checked against the
# session invariants after every step, and one refusal per rule the seed, team.v1 and issue 21 name.
from __future__ import annotations

import itertools
from typing import TypeVar

import pytest

from harness.core import session as s
from harness.core.errors import ErrorCode as E
from harness.core.errors import Rejected
from harness.core.outcome import Accepted
from harness.core.session_invariants import check_step

X = TypeVar("X")
MIN = 60_000
T0 = 1_000_000
LIMITS = s.SessionLimits()


class Driver:
    """Steps one session, checking every invariant after every step; the clock and ops are drawn here."""

    def __init__(self, limits: s.SessionLimits = LIMITS) -> None:
        self.session: s.Session | None = None
        self.limits = limits
        self.ops = itertools.count(1)
        self.now = T0

    def op(self) -> str:
        return f"op{next(self.ops)}"

    def apply(self, command: s.SessionCommand) -> Accepted[s.Session] | Rejected:
        before = self.session
        outcome = s.step(before, command, self.limits)
        check_step(before, command, outcome, self.limits)
        if isinstance(outcome, Accepted):
            self.session = outcome.state
        return outcome

    def ok(self, command: s.SessionCommand) -> Accepted[s.Session]:
        outcome = self.apply(command)
        assert isinstance(outcome, Accepted), outcome
        return outcome

    def fails(self, code: E, command: s.SessionCommand) -> Rejected:
        before = self.session
        outcome = self.apply(command)
        assert isinstance(outcome, Rejected) and outcome.code is code, outcome
        assert self.session is before
        return outcome

    @property
    def state(self) -> s.Session:
        assert self.session is not None
        return self.session

    def start(self, mode: s.Mode, lead: str, *participants: str) -> Accepted[s.Session]:
        return self.ok(s.Start(self.now, "sess", mode, lead, participants))

    def ask(self, actor: str, to: str | None = None, op: str | None = None) -> Accepted[s.Session]:
        return self.ok(s.Ask(self.now, actor, op or self.op(), "What is your current condition?", to))

    def tick(self, at: int) -> Accepted[s.Session]:
        self.now = at
        return self.ok(s.Tick(at))


def effects_of(outcome: Accepted[s.Session], kind: type[X]) -> list[X]:
    return [effect for effect in outcome.effects if isinstance(effect, kind)]


def traces(outcome: Accepted[s.Session], kind: s.TraceKind) -> list[s.TraceEvent]:
    return [e for e in outcome.effects if isinstance(e, s.TraceEvent) and e.kind is kind]


@pytest.fixture
def fac() -> Driver:
    d = Driver()
    d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    return d


# --- start --------------------------------------------------------------------------------------------------


def test_start_traces_the_session_and_every_agent_with_its_role() -> None:
    d = Driver()
    outcome = d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    kinds = [effect.kind for effect in outcome.effects if isinstance(effect, s.TraceEvent)]
    assert kinds == [s.TraceKind.SESSION_START, *[s.TraceKind.AGENT_START] * 3]
    assert [(e.fields["name"], e.fields["role"]) for e in traces(outcome, s.TraceKind.AGENT_START)] == [
        ("chair", "facilitator"),
        ("alice", "facilitated_agent"),
        ("bob", "facilitated_agent"),
    ]
    assert d.state.state is s.SessionState.RUNNING and d.state.termination is None
    again = d.ok(s.Start(d.now + 5, "sess", s.Mode.FACILITATE, "chair", ("alice", "bob")))
    assert not again.changed
    d.fails(E.CONFLICT, s.Start(d.now, "sess", s.Mode.DISCUSS, "chair", ("alice", "bob")))


@pytest.mark.parametrize(
    ("mode", "participants", "code"),
    [
        (s.Mode.SUPERVISE, ("a", "b"), E.BAD_REQUEST),
        (s.Mode.SUPERVISE, (), E.BAD_REQUEST),
        (s.Mode.FACILITATE, (), E.BAD_REQUEST),
        (s.Mode.JUDGE, ("a",), E.BAD_REQUEST),
        (s.Mode.DISCUSS, ("a", "a"), E.BAD_REQUEST),
        (s.Mode.DISCUSS, ("lead",), E.BAD_REQUEST),
        (s.Mode.DISCUSS, ("a b",), E.BAD_REQUEST),
        (s.Mode.DISCUSS, tuple(f"p{n}" for n in range(32)), E.BOUND_EXCEEDED),
    ],
)
def test_start_refuses_a_wrong_roster(mode: s.Mode, participants: tuple[str, ...], code: E) -> None:
    Driver().fails(code, s.Start(T0, "sess", mode, "lead", participants))


def test_nothing_but_start_without_a_session() -> None:
    Driver().fails(E.NOT_FOUND, s.Tick(T0))


# --- the role x tool table ----------------------------------------------------------------------------------


def test_a_participant_cannot_conclude_and_a_judge_cannot_ask() -> None:
    """Seed: "The facilitator gets Ask/Answer/Announce/RollCall/Conclude. Each agent gets the same minus
    Conclude." """
    d = Driver()
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    refused = d.fails(E.UNAUTHORIZED, s.Conclude(d.now, "worker", "done"))
    assert "supervised_agent has no conclude" in refused.detail
    d.fails(E.UNAUTHORIZED, s.RequestForComment(d.now, "worker", "r1", "open a thread"))
    d.fails(E.UNAUTHORIZED, s.Ask(d.now, "stranger", "q1", "hi"))
    judge = Driver()
    judge.start(s.Mode.JUDGE, "judge")
    judge.fails(E.UNAUTHORIZED, s.Ask(T0, "judge", "q1", "hi"))
    judge.fails(E.UNAUTHORIZED, s.RollCall(T0, "judge"))
    assert judge.ok(s.Conclude(T0 + 1, "judge", "pass")).state.termination is s.Termination.CONCLUDED


def test_discuss_roles_have_recess_adjourn_acknowledge_and_request_for_comment() -> None:
    d = Driver()
    d.start(s.Mode.DISCUSS, "lead", "ann", "ben")
    d.fails(E.UNAUTHORIZED, s.Recess(d.now, "ann"))
    d.fails(E.UNAUTHORIZED, s.RequestForComment(d.now, "lead", "r0", "later"))
    rfc = d.ok(s.RequestForComment(d.now, "ann", "r1", "Should we move to Bun?"))
    assert rfc.effects == () and d.state.rfcs[0].text == "Should we move to Bun?"
    ack = d.ok(s.Acknowledge(d.now, "ben", "k1", "on it"))
    assert effects_of(ack, s.PostToThread) == [s.PostToThread("k1", s.PostKind.ACKNOWLEDGE, "ben", "on it")]
    d.fails(E.UNAUTHORIZED, s.Conclude(d.now, "lead"))
    assert d.ok(s.Adjourn(d.now, "lead", "done")).state.termination is s.Termination.CONCLUDED


# --- asks ---------------------------------------------------------------------------------------------------


def test_supervise_rejects_to_and_asks_the_other_one() -> None:
    """Seed: "The supervise pair has only one possible target, so it rejects to." """
    d = Driver()
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    d.fails(E.BAD_REQUEST, s.Ask(d.now, "boss", "q1", "status?", "worker"))
    outcome = d.ask("boss", op="q1")
    assert outcome.result == ("q1",)
    assert effects_of(outcome, s.OpenAsk) == [
        s.OpenAsk("q1", "boss", "worker", "What is your current condition?")
    ]
    assert d.ask("worker", op="q2").result == ("q2",)
    assert s.owed_by(d.state, "boss") == ("q2",)


def test_a_lead_without_to_asks_every_participant_each_its_own_question(fac: Driver) -> None:
    outcome = fac.ask("chair", op="q1")
    assert outcome.result == ("q1:alice", "q1:bob")
    assert [(e.question_id, e.to) for e in effects_of(outcome, s.OpenAsk)] == [
        ("q1:alice", "alice"),
        ("q1:bob", "bob"),
    ]
    assert s.owed_by(fac.state, "alice") == ("q1:alice",)
    again = fac.ask("chair", op="q1")
    assert not again.changed and again.result == outcome.result and again.effects == ()
    fac.fails(E.CONFLICT, s.Ask(fac.now, "chair", "q1", "another question"))


def test_participants_ask_the_lead_or_a_named_member(fac: Driver) -> None:
    assert effects_of(fac.ask("alice", op="a1"), s.OpenAsk)[0].to == "chair"
    assert effects_of(fac.ask("alice", "bob", op="a2"), s.OpenAsk)[0].to == "bob"
    fac.fails(E.BAD_REQUEST, s.Ask(fac.now, "alice", "a3", "me?", "alice"))
    fac.fails(E.NOT_FOUND, s.Ask(fac.now, "alice", "a4", "you?", "carol"))
    fac.fails(E.BAD_REQUEST, s.Ask(fac.now, "chair", "a5", "me?", "chair"))


def test_an_answer_without_an_id_is_refused_listing_the_owed_question_ids(fac: Driver) -> None:
    """Issue 21: "a reply without an id lists the caller's owed question ids and is refused" -- the seed's
    forgiving Answer (auto-pick the only owed ask; broadcast when none) is not adopted."""
    fac.ask("chair", op="q1")
    fac.ask("bob", "alice", op="q2")
    refused = fac.fails(E.BAD_REQUEST, s.Answer(fac.now, "alice", None))
    assert "q1:alice, q2" in refused.detail
    assert "none" in fac.fails(E.BAD_REQUEST, s.Answer(fac.now, "chair", None)).detail
    fac.fails(E.WRONG_MEMBER, s.Answer(fac.now, "alice", "q1:bob"))
    fac.fails(E.NOT_FOUND, s.Answer(fac.now, "alice", "elsewhere"))
    answered = fac.ok(s.Answer(fac.now, "alice", "q2"))
    assert answered.effects == (s.PostAnswer("q2", "alice"),)
    assert s.owed_by(fac.state, "alice") == ("q1:alice", "q2"), (
        "the ledger's answer, not the call, settles it"
    )
    fac.ok(s.AskAnswered(fac.now, "q2"))
    assert s.owed_by(fac.state, "alice") == ("q1:alice",)


# --- the orchestration loop ---------------------------------------------------------------------------------


def test_an_ignored_ask_gets_one_reminder_then_a_violation_releases_its_asker(fac: Driver) -> None:
    """Issue 21: "a participant with an owed ask gets exactly one reminder notice, then a protocol_violation
    event, then the asker is released (the question ends expired with reason no_answer, visible, never an
    invented answer)"; the other answers; the facilitator concludes."""
    fac.ask("chair", op="q1")
    assert s.next_deadline(fac.state) == T0 + 5 * MIN
    fac.ok(s.AskAnswered(T0 + MIN, "q1:bob"))
    assert fac.tick(T0 + 5 * MIN - 1).changed is False
    reminded = fac.tick(T0 + 5 * MIN)
    assert reminded.effects == (s.SubmitReminder("alice", "q1:alice"),)
    assert s.next_deadline(fac.state) == T0 + 10 * MIN
    assert fac.tick(T0 + 9 * MIN).effects == (), "never two reminders for one ask"
    released = fac.tick(T0 + 10 * MIN)
    assert effects_of(released, s.ProtocolViolation) == [s.ProtocolViolation("alice", "q1:alice")]
    assert effects_of(released, s.ReleaseAsker) == [s.ReleaseAsker("q1:alice", "no_answer")]
    (violation,) = traces(released, s.TraceKind.PROTOCOL_VIOLATION)
    assert dict(violation.fields) == {
        "session": "sess",
        "participant": "alice",
        "question": "q1:alice",
        "asker": "chair",
        "reason": "no_answer",
    }
    assert fac.state.asks["q1:alice"].state is s.AskState.RELEASED
    assert s.owed_by(fac.state, "alice") == ()
    assert fac.ok(s.AskEnded(fac.now, "q1:alice", "expired")).changed is False
    ended = fac.ok(s.Conclude(fac.now + 1, "chair", "storyboard done"))
    assert effects_of(ended, s.CancelAsk) == []
    (summary,) = traces(ended, s.TraceKind.SUMMARY)
    assert summary.fields["termination"] == "concluded" and summary.fields["success"] is True
    assert summary.fields["violations"] == ("q1:alice",) and summary.fields["answered"] == 1


def test_an_ask_the_ledger_ended_is_never_reminded(fac: Driver) -> None:
    fac.ask("chair", "alice", op="q1")
    fac.ok(s.AskEnded(fac.now, "q1", "bound_exceeded"))
    assert fac.state.asks["q1"].reason == "bound_exceeded"
    assert fac.tick(T0 + 60 * MIN).effects == ()
    assert s.next_deadline(fac.state) == T0 + LIMITS.session_ms


def test_conclude_cancels_every_in_flight_ask_with_a_visible_reason(fac: Driver) -> None:
    """Seed: "ctx.concluded is explicit Conclude/Adjourn/Recess. It also cancels in-flight Asks, so askers see
    why nobody will answer their question." """
    fac.ask("chair", op="q1")
    fac.ask("alice", "bob", op="q2")
    fac.ok(s.AskAnswered(fac.now, "q1:bob"))
    ended = fac.ok(s.Conclude(fac.now + 1, "chair"))
    cancels = effects_of(ended, s.CancelAsk)
    reason = "session sess concluded: conclude by chair"
    assert cancels == [s.CancelAsk("q1:alice", reason), s.CancelAsk("q2", reason)]
    assert fac.state.asks["q2"].reason == reason and s.in_flight(fac.state) == ()
    assert fac.state.termination is s.Termination.CONCLUDED and fac.state.reason == "conclude by chair"
    fac.fails(E.CONFLICT, s.Ask(fac.now, "chair", "q3", "more?"))
    fac.fails(E.CONFLICT, s.Answer(fac.now, "alice", "q1:alice"))
    fac.fails(E.CONFLICT, s.Conclude(fac.now, "chair"))
    roll = fac.ok(s.RollCall(fac.now, "bob"))
    assert not roll.changed and [entry.owed for entry in roll.result] == [(), (), ()]
    assert fac.ok(s.AskAnswered(fac.now, "q2")).changed is False
    assert fac.ok(s.Abort(fac.now, "late")).changed is False, "the first ending stays"


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (s.AgentCrashed(T0 + 1, "bob", "exit 1"), "agent_crashed: bob: exit 1"),
        (s.LeadError(T0 + 1, "rate limited"), "lead_error: rate limited"),
        (s.Abort(T0 + 1, "ctrl-c"), "abort: ctrl-c"),
    ],
)
def test_a_crash_an_error_or_an_abort_stops_the_session(
    fac: Driver, command: s.SessionCommand, reason: str
) -> None:
    """Seed: "stopped is broader: lead error, agent crash, abort path." """
    fac.ask("chair", "bob", op="q1")
    ended = fac.ok(command)
    assert fac.state.termination is s.Termination.STOPPED and fac.state.reason == reason
    assert [c.question_id for c in effects_of(ended, s.CancelAsk)] == ["q1"]
    assert traces(ended, s.TraceKind.SUMMARY)[0].fields["success"] is False


def test_a_crash_of_a_stranger_is_not_found(fac: Driver) -> None:
    fac.fails(E.NOT_FOUND, s.AgentCrashed(fac.now, "carol", "exit 1"))


# --- bounds -------------------------------------------------------------------------------------------------


def test_announce_is_explicit_bounded_and_recorded() -> None:
    """team.v1: "No automatic broadcasts" -- Announce is an explicit call counted against a budget."""
    d = Driver(s.SessionLimits(announcements=2, announcement_chars=20))
    d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    posted = d.ok(s.Announce(d.now, "alice", "n1", "FYI switching to Bun"))
    assert posted.effects == (s.PostAnnouncement("n1", "alice", ("chair", "bob"), "FYI switching to Bun"),)
    assert not d.ok(s.Announce(d.now + 9, "alice", "n1", "FYI switching to Bun")).changed
    d.fails(E.CONFLICT, s.Announce(d.now, "alice", "n1", "something else"))
    d.fails(E.BAD_REQUEST, s.Announce(d.now, "bob", "n2", "  "))
    refused = d.fails(E.BOUND_EXCEEDED, s.Announce(d.now, "bob", "n2", "x" * 21))
    assert refused.bound == "announcement_chars"
    d.ok(s.Announce(d.now, "chair", "n3", "halfway"))
    assert d.fails(E.BOUND_EXCEEDED, s.Announce(d.now, "bob", "n4", "one more")).bound == "announcements"
    assert len(d.state.announcements) == 2


def test_the_lead_turn_past_the_limit_stops_the_session() -> None:
    d = Driver(s.SessionLimits(lead_turns=2))
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    for n in range(3):
        d.ok(s.TurnStarted(T0 + n, "worker"))
    d.ok(s.TurnStarted(T0 + 5, "boss"))
    d.ok(s.TurnStarted(T0 + 6, "boss"))
    assert d.state.lead_turns == 2 and d.state.state is s.SessionState.RUNNING
    ended = d.ok(s.TurnStarted(T0 + 7, "boss"))
    assert traces(ended, s.TraceKind.LEAD_TURN_LIMIT)[0].fields["turns"] == 2
    assert (d.state.termination, d.state.reason) == (s.Termination.STOPPED, "lead_turn_limit")


def test_the_session_length_stops_it() -> None:
    d = Driver(s.SessionLimits(session_ms=30 * MIN))
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    d.ask("boss", op="q1")
    assert s.next_deadline(d.state, d.limits) == T0 + 5 * MIN
    d.tick(T0 + 5 * MIN)
    ended = d.tick(T0 + 30 * MIN)
    assert (d.state.termination, d.state.reason) == (s.Termination.STOPPED, "session_length")
    assert [c.question_id for c in effects_of(ended, s.CancelAsk)] == ["q1"]
    assert s.next_deadline(d.state, d.limits) is None


def test_a_full_reminder_budget_stops_the_session_rather_than_release_unreminded() -> None:
    d = Driver(s.SessionLimits(reminders=1))
    d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    d.ask("chair", op="q1")
    ended = d.tick(T0 + 5 * MIN)
    assert effects_of(ended, s.SubmitReminder) == [], "no reminder is sent only to be cancelled"
    assert d.state.reason == "reminder_limit" and effects_of(ended, s.ProtocolViolation) == []


def test_asks_are_bounded_per_session() -> None:
    d = Driver(s.SessionLimits(asks=3))
    d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    d.ask("chair", op="q1")
    assert d.fails(E.BOUND_EXCEEDED, s.Ask(d.now, "chair", "q2", "again")).bound == "asks"
    d.ask("alice", op="q3")


def test_discuss_streams_answers_to_the_lead_into_the_thread() -> None:
    """Seed: "Each agent's Answer becomes a separate reply. The thread receives it immediately." """
    d = Driver()
    d.start(s.Mode.DISCUSS, "lead", "ann", "ben")
    d.ask("lead", op="q1")
    d.ask("ann", "ben", op="q2")
    posted = d.ok(s.AskAnswered(d.now, "q1:ben"))
    assert posted.effects == (s.PostToThread("q1:ben", s.PostKind.ANSWER, "ben", ""),)
    assert d.ok(s.AskAnswered(d.now, "q2")).effects == (), "only answers to the lead reach the thread"
    ended = d.ok(s.Recess(d.now, "lead", "back tomorrow"))
    assert d.state.summary == "back tomorrow" and d.state.reason == "recess by lead"
    assert [c.question_id for c in effects_of(ended, s.CancelAsk)] == ["q1:ann"]


def test_roll_call_shows_owed_asks_and_last_activity(fac: Driver) -> None:
    fac.now += 7
    fac.ask("chair", op="q1")
    roll = fac.ok(s.RollCall(fac.now + 1, "alice")).result
    assert roll == (
        s.RollCallEntry("chair", s.Role.FACILITATOR, (), T0 + 7),
        s.RollCallEntry("alice", s.Role.FACILITATED_AGENT, ("q1:alice",), T0),
        s.RollCallEntry("bob", s.Role.FACILITATED_AGENT, ("q1:bob",), T0),
    )
