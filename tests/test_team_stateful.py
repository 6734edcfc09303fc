# A Hypothesis rule machine over the real team reducer: members and the owner interleave asks, replies,
# cancels and expiries (with reasons, hostile ones too), pauses, membership changes, delivery reports and
# clock jumps, with small bounds so every bound is hit. After every step it checks the core invariants (the
# same functions the model checker and the daemon call), that a repeat of any accepted operation returns the
# same record (T14), that rejections leave the ledger untouched (T10), that no accepted ask ever vanishes,
# that a pause never refuses an ask, what breaks a wait: exactly the open questions to the waiter that are
# news to it, and that a question's reason is a short token set once, by the step that ended it, and is never
# an answer.
from __future__ import annotations

import json

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.core import commands as c
from harness.core import effects as fx
from harness.core.codec import command_from_json, command_to_json, from_json, to_json
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import check_step, ledger_violations, repeat_violations
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.queries import WaitReason, decide_wait, incoming_for, was_read
from harness.core.records import EMPTY_LEDGER, REASON_PATTERN, Ledger, QuestionState, TeamState
from harness.core.team import owed_machines, owed_notices, step
from harness.io.ledger_runner import ledger_events

LIMITS = Limits(memberships=6, exchanges=14, pending_per_sender=3, asks_per_minute=6, parent_chain=3)
TEAM = "t"
TEXTS = st.sampled_from(["which endpoint?", "GET /state", "see src/api.ts", "x" * 20])
TARGETS = st.sampled_from(["m0", "m1", "n2", "m4", "nobody"])
QIDS = st.sampled_from([f"q{n}" for n in range(18)])
TTLS = st.sampled_from([None, 10_000, 30_000, 5_000])
MEMBER_KEYS = st.sampled_from([None, "k0", "k1", "k2", "k3", "k4", "k5", "stale"])
# Reasons a shell may send: the session's tokens, the longest allowed, and hostile ones (too long, empty,
# upper case, a line break or escape sequence for a terminal, a key-shaped secret, a shell expansion).
REASONS = st.sampled_from(
    [
        *("no_answer", "concluded", "adjourned", "recessed", "stopped", "a" * 32),
        *("", "a" * 33, "No_answer", "no answer", "no_answer\n", "\x1b[2Jgone", "ghp_" + "x" * 36),
        *("$(reboot)", "r\u00e9ason", "no-answer", "\u2028"),
    ]
)


def machine_of(member: int) -> str:
    """Members on two machines, so that a notice owed to the wrong member names the wrong machine."""
    return "mach" if member % 2 == 0 else "mach-b"


class TeamLedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger: Ledger = EMPTY_LEDGER
        self.now = 1_000
        self.accepted_asks: dict[str, c.Ask] = {}
        self.next_member = 4
        self.owed: dict[str, fx.SubmitNotice] = {}
        self.ended_with: dict[str, str | None] = {}  # question id -> the reason it ended with

    def apply(self, command: c.TeamCommand) -> Accepted[Ledger] | Rejected:
        before = self.ledger
        outcome = step(before, command, LIMITS)
        check_step(before, command, outcome, LIMITS)
        # The journal stores commands as JSON; a command must survive that trip unchanged.
        assert command_from_json(json.loads(json.dumps(command_to_json(command)))) == command
        name = type(command).__name__
        event(f"{name}: {outcome.code}" if isinstance(outcome, Rejected) else f"{name}: accepted")
        if isinstance(outcome, Rejected):
            return outcome
        assert repeat_violations(outcome.state, command, outcome, LIMITS) == []
        self.ledger = outcome.state
        self.track_notices(outcome.effects)
        self.check_trace_of_ended_questions(before, command)
        for exchange in self.ledger.teams[TEAM].exchanges.values() if TEAM in self.ledger.teams else ():
            if exchange.state is not QuestionState.OPEN:
                self.ended_with.setdefault(exchange.id, exchange.reason)
        if isinstance(command, c.Ask) and outcome.changed:
            self.accepted_asks[command.id] = command
        return outcome

    def check_trace_of_ended_questions(self, before: Ledger, command: c.TeamCommand) -> None:
        """The trace's `question_ended` events are exactly the questions open before the step and not after,
        in deadline order, whatever shortcut the daemon takes to find them."""
        if TEAM not in before.teams or TEAM not in self.ledger.teams:
            return
        was, team = before.teams[TEAM], self.ledger.teams[TEAM]
        still_open = {exchange_id for _, exchange_id in team.open_deadlines}
        expected = [exchange_id for _, exchange_id in was.open_deadlines if exchange_id not in still_open]
        events = ledger_events(was, team, command)
        assert [e["exchangeId"] for e in events if e["type"] == "question_ended"] == expected

    def track_notices(self, effects: tuple[object, ...]) -> None:
        """What a destination would hold unsent if it obeyed every effect: submits minus withdrawals."""
        for effect in effects:
            if isinstance(effect, fx.SubmitNotice):
                self.owed[effect.notice_id] = effect
            elif isinstance(effect, fx.WithdrawNotice):
                self.owed.pop(effect.notice_id, None)
            elif isinstance(effect, fx.WithdrawMember):
                self.owed = {k: n for k, n in self.owed.items() if n.membership_id != effect.membership_id}
            elif isinstance(effect, fx.WithdrawTeam):
                self.owed.clear()

    def at(self, advance: int = 1) -> int:
        self.now += advance
        return self.now

    @initialize()
    def create(self) -> None:
        members = tuple(c.NewMember(f"m{n}", machine_of(n), f"a{n}", f"n{n}", "", f"k{n}") for n in range(4))
        assert isinstance(self.apply(c.CreateTeam(self.at(), TEAM, "team", members)), Accepted)

    def known_qid(self, data: st.DataObject) -> str:
        known = sorted(self.ledger.teams[TEAM].exchanges.keys())
        return data.draw(st.sampled_from(known) if known and data.draw(st.integers(0, 9)) else QIDS)

    def addressee_key(self, data: st.DataObject, qid: str) -> str | None:
        """Mostly the key of the member the question is addressed to; sometimes anyone's."""
        team = self.ledger.teams[TEAM]
        exchange = team.exchanges.get(qid)
        if exchange is not None and data.draw(st.integers(0, 3)):
            keys = [key for key, member_id in team.keys.items() if member_id == exchange.to]
            if keys:
                return keys[0]
        return data.draw(MEMBER_KEYS)

    def active_key(self, data: st.DataObject) -> str | None:
        """Mostly a live member's key; sometimes the owner, a revoked or an unknown key."""
        keys = sorted(self.ledger.teams[TEAM].keys)
        return data.draw(st.sampled_from(keys) if keys and data.draw(st.integers(0, 4)) else MEMBER_KEYS)

    @rule(data=st.data(), qid=QIDS, text=TEXTS, ttl=TTLS, notify=st.booleans())
    def ask(self, data: st.DataObject, qid: str, text: str, ttl: int | None, notify: bool) -> None:
        team = self.ledger.teams[TEAM]
        sender = self.active_key(data)
        active = sorted(m.id for m in team.members.values() if m.state == "active")
        to = data.draw(st.sampled_from(active) if active and data.draw(st.integers(0, 4)) else TARGETS)
        from_ = data.draw(st.sampled_from([None, *active, "n1", "m9"])) if sender is None else None
        parent = self.known_qid(data) if data.draw(st.booleans()) else None
        paused = team.state is TeamState.PAUSED
        outcome = self.apply(c.Ask(self.at(), TEAM, qid, to, text, None, ttl, parent, notify, from_, sender))
        # Seed: "Pause holds new sends": a paused team refuses no ask for being paused.
        assert not (isinstance(outcome, Rejected) and outcome.code is ErrorCode.TEAM_PAUSED), outcome
        if paused and isinstance(outcome, Accepted) and outcome.changed:
            event("ask accepted while paused")

    @rule(data=st.data())
    @precondition(lambda self: bool(self.accepted_asks))
    def repeat_an_accepted_ask(self, data: st.DataObject) -> None:
        original = data.draw(st.sampled_from(sorted(self.accepted_asks)))
        again = self.accepted_asks[original]
        outcome = self.apply(
            c.Ask(
                self.at(),
                again.team_id,
                again.id,
                again.to,
                again.text,
                again.context,
                again.ttl_ms,
                again.parent_id,
                again.notify,
                again.from_,
                again.member_key,
            )
        )
        team = self.ledger.teams[TEAM]
        if again.member_key is None or again.member_key in team.keys:
            assert isinstance(outcome, Accepted) and not outcome.changed, outcome
        else:  # the asker was removed since: its key is revoked, even for a repeat
            assert isinstance(outcome, Rejected) and outcome.code == "unauthorized", outcome

    @rule(
        data=st.data(),
        text=TEXTS,
        member_id=st.sampled_from([None, "m0", "m1", "m2", "m3"]),
        evidence=st.sampled_from([(), ("a.py:1",), ("a.py:1", "b.py:2")]),
    )
    def reply(self, data: st.DataObject, text: str, member_id: str | None, evidence: tuple[str, ...]) -> None:
        qid = self.known_qid(data)
        by = self.addressee_key(data, qid)
        self.apply(c.Reply(self.at(), TEAM, qid, text, evidence, member_id if by is None else None, by))

    @rule(data=st.data(), reason=st.one_of(st.none(), REASONS))
    def cancel(self, data: st.DataObject, reason: str | None) -> None:
        qid = self.known_qid(data)
        by = None if data.draw(st.booleans()) else self.active_key(data)  # the owner half the time
        self.check_reasoned(c.Cancel(self.at(), TEAM, qid, by, reason), QuestionState.CANCELLED)

    @rule(data=st.data(), reason=REASONS, key=st.sampled_from([None] * 5 + ["k1"]))
    def expire(self, data: st.DataObject, reason: str, key: str | None) -> None:
        """The owner ends an open question `expired` with a reason, as a deadline would, never answered."""
        command = c.Expire(self.at(), TEAM, self.known_qid(data), reason, key)
        outcome = self.check_reasoned(command, QuestionState.EXPIRED)
        if key is not None:
            assert isinstance(outcome, Rejected) and outcome.code is ErrorCode.UNAUTHORIZED, outcome

    def check_reasoned(
        self, command: c.Cancel | c.Expire, ends: QuestionState
    ) -> Accepted[Ledger] | Rejected:
        """Apply a cancel or expire: a hostile reason is refused; an accepted one that ended the question
        left it in `ends`, with exactly its reason and no answer; one already ended kept its first reason."""
        before = self.ledger.teams[TEAM].exchanges.get(command.question_id)
        outcome = self.apply(command)
        if command.reason is not None and not REASON_PATTERN.fullmatch(command.reason):
            assert isinstance(outcome, Rejected), outcome
            event(f"hostile reason refused: {outcome.code}")
            return outcome
        if isinstance(outcome, Accepted):
            after = self.ledger.teams[TEAM].exchanges[command.question_id]
            if outcome.changed:
                assert before is not None and before.state is QuestionState.OPEN
                assert (after.state, after.reason, after.answer) == (ends, command.reason, None)
                event(f"{type(command).__name__} ended a question with a reason")
            else:
                assert before is not None and after == before
        return outcome

    @rule(ms=st.sampled_from([1, 1_000, 9_000, 20_000, 61_000]))
    def tick(self, ms: int) -> None:
        self.apply(c.Tick(self.at(ms), TEAM))

    @rule(
        which=st.sampled_from(["pause", "resume"] * 6 + ["archive"]),
        key=st.sampled_from([None] * 5 + ["k1"]),
    )
    def lifecycle(self, which: str, key: str | None) -> None:
        kind = {"pause": c.PauseTeam, "resume": c.ResumeTeam, "archive": c.ArchiveTeam}[which]
        self.apply(kind(self.at(), TEAM, key))

    @rule(same_agent=st.booleans())
    def add(self, same_agent: bool) -> None:
        n = self.next_member
        self.next_member += 1
        machine, agent = (machine_of(1), "a1") if same_agent else (machine_of(n), f"a{n}")
        self.apply(c.AddMember(self.at(), TEAM, c.NewMember(f"m{n}", machine, agent, f"n{n}", "", f"k{n}")))

    @rule(membership=st.sampled_from(["m0", "m1", "m2", "m3", "m4", "m5", "nope"]), now=st.integers(0, 3))
    def remove(self, membership: str, now: int) -> None:
        if now:  # removals are rarer than the rest: a removed member mostly stops the story
            return
        self.apply(c.RemoveMember(self.at(), TEAM, membership))

    @rule(
        data=st.data(),
        kind=st.sampled_from(["question", "answer"]),
        report=st.sampled_from(
            [
                *(("queued", None), ("writing", None), ("delivered", None), ("accepted", None)),
                *(("read", "inbox"), ("withdrawn", "inbox"), ("withdrawn", "cancelled"), ("held", "paused")),
            ]
        ),
    )
    def record_delivery(self, data: st.DataObject, kind: str, report: tuple[str, str | None]) -> None:
        qid = self.known_qid(data)
        self.apply(c.RecordDelivery(self.at(), TEAM, f"{TEAM}/{qid}/{kind}", *report))

    @rule(data=st.data(), left=st.sampled_from([0, 1, 30_000]))
    def wait(self, data: st.DataObject, left: int) -> None:
        """Seed: "Incoming questions break the wait so the agent can answer them": a wait begun at `since`,
        with `seen` some of the questions the shell already showed the waiter, breaks exactly on news."""
        team = self.ledger.teams[TEAM]
        qid = self.known_qid(data)
        exchange = team.exchanges.get(qid)
        if exchange is None:
            return
        busiest = max(team.member_order, key=lambda member_id: len(incoming_for(team, member_id)))
        waiter = data.draw(st.sampled_from([exchange.from_, exchange.to, busiest]))
        incoming = incoming_for(team, waiter)
        seen = frozenset(data.draw(st.sets(st.sampled_from([q.id for q in incoming]))) if incoming else ())
        since = data.draw(st.sampled_from([0, self.now, *(q.created_at + 1 for q in incoming)]))
        decision = decide_wait(team, waiter, exchange, self.now, self.now + left, since=since, seen=seen)
        news = tuple(q.id for q in incoming if q.created_at >= since or not (q.id in seen or was_read(q)))
        ended = exchange.state is not QuestionState.OPEN
        if decision is None:
            assert not news and not ended and left > 0
            event("wait blocks")
            return
        woken = decision.reason in (WaitReason.ANSWERED, WaitReason.INCOMING)
        assert decision.news == (news if woken else ())
        assert decision.incoming == incoming and decision.exchange == exchange
        if decision.reason is WaitReason.INCOMING:
            assert news and exchange.state is not QuestionState.ANSWERED
            event("wait broken by news")
        else:
            assert not news or decision.reason is WaitReason.ANSWERED

    @invariant()
    def invariants_hold(self) -> None:
        if not self.ledger.teams:
            return
        assert ledger_violations(self.ledger, LIMITS) == []

    @invariant()
    def owed_notices_are_what_the_effects_left_owed(self) -> None:
        # A daemon that crashed between a ledger change and its destination's submit resubmits owed_notices:
        # they must be exactly the notices the reducer's effects submitted and did not withdraw.
        team = self.ledger.teams.get(TEAM)
        if team is not None:
            assert {n.notice_id: n for n in owed_notices(team, LIMITS)} == self.owed
            # A start's guards reach every machine owed a notice without making the notices.
            assert owed_machines(team) == {n.machine_id for n in self.owed.values()}

    @invariant()
    def no_accepted_ask_vanishes(self) -> None:
        team = self.ledger.teams.get(TEAM)
        for qid, ask in self.accepted_asks.items():
            assert team is not None
            exchange = team.exchanges[qid]
            assert (exchange.text, exchange.parent_id, exchange.notify) == (
                ask.text,
                ask.parent_id,
                ask.notify,
            )

    @invariant()
    def a_reason_never_changes_and_never_answers(self) -> None:
        team = self.ledger.teams.get(TEAM)
        for qid, reason in self.ended_with.items():
            assert team is not None
            exchange = team.exchanges[qid]
            assert exchange.reason == reason
            assert reason is None or REASON_PATTERN.fullmatch(reason)
            assert reason is None or exchange.answer is None or exchange.answer.late
        for exchange in team.exchanges.values() if team is not None else ():
            assert exchange.state is not QuestionState.OPEN or exchange.reason is None

    @invariant()
    def checkpoint_round_trip(self) -> None:
        restored = from_json(json.loads(json.dumps(to_json(self.ledger))), Ledger)
        assert restored == self.ledger and hash(restored) == hash(self.ledger)


TeamLedgerMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


test_team_ledger_machine = TeamLedgerMachine.TestCase
