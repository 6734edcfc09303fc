# The delivery desk, rule by rule, as the observation sequences a real terminal produces. Every step is
# checked against the core invariants (D1-D11), so each example also shows the invariants hold on its path.
from __future__ import annotations

from typing import Any

import attrs
import pytest

from harness.core import delivery as d
from harness.core.delivery_invariants import (
    check_step,
    desk_violations,
    effect_violations,
    transition_violations,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind

S = d.DeliveryState
O = d.Observed  # noqa: E741
R = d.Reason
MACHINE = "m1"
DAY = 24 * 3_600_000


@attrs.define
class Desk:
    limits: Limits = DEFAULT_LIMITS
    desk: d.Desk = attrs.field(factory=lambda: d.empty_desk(MACHINE))
    now: int = 10_000
    writes: list[str] = attrs.field(factory=list)  # every WriteNotice ever emitted: the physical writes
    effects: list[object] = attrs.field(factory=list)

    def run(self, command: Any) -> Accepted[d.Desk] | Rejected:
        before = self.desk
        outcome = d.step(before, command, self.limits)
        check_step(before, command, outcome, self.limits)
        if isinstance(outcome, Accepted):
            self.desk = outcome.state
            self.effects = list(outcome.effects)
            self.writes.extend(e.notice_id for e in outcome.effects if isinstance(e, d.WriteNotice))
        return outcome

    def ok(self, command: Any) -> Accepted[d.Desk]:
        outcome = self.run(command)
        assert isinstance(outcome, Accepted), outcome
        return outcome

    def fails(self, command: Any, code: ErrorCode, bound: str | None = None) -> Rejected:
        before = self.desk
        outcome = self.run(command)
        assert isinstance(outcome, Rejected), outcome
        assert outcome.code is code, outcome
        assert outcome.bound == bound
        assert self.desk is before
        return outcome

    def at(self, ms: int = 100) -> int:
        self.now += ms
        return self.now

    def submit(
        self, n: int, agent: str = "a1", team: str = "t1", kind: NoticeKind = NoticeKind.QUESTION, **kw: Any
    ) -> str:
        notice_id = f"{team}/q{n}/{kind}"
        fields: dict[str, Any] = {
            "expires_at": self.now + DAY,
            "text": f"notice {n}",
            "membership_id": f"mem-{agent}",
        }
        fields.update(kw)
        self.ok(
            d.Submit(self.at(), team, notice_id, kind, f"q{n}", agent_id=agent, machine_id=MACHINE, **fields)
        )
        return notice_id

    def observe(self, seen: d.Observed, agent: str = "a1") -> list[object]:
        return list(self.ok(d.Observe(self.at(), agent, seen)).effects)

    def start(self, notice_id: str, seen: d.Observed = O.IDLE, age: int = 10) -> Accepted[d.Desk] | Rejected:
        at = self.at()
        return self.run(d.WriteStarted(at, notice_id, seen, at - age))

    def write(self, notice_id: str, result: d.WriteResult = d.WriteResult.OK, agent: str = "a1") -> None:
        """Settle, look, see idle, start and finish one write, as the shell does."""
        self.at(self.limits.write_settle_ms)
        assert d.WriteDue(agent, notice_id) in self.observe(O.IDLE, agent)
        assert isinstance(self.start(notice_id), Accepted)
        self.ok(d.WriteFinished(self.at(), notice_id, result))

    def state(self, notice_id: str) -> d.DeliveryState:
        return self.desk.notices[notice_id].state

    def reason(self, notice_id: str) -> d.Reason | None:
        return self.desk.notices[notice_id].reason


def due(effects: list[object]) -> list[str]:
    return [e.notice_id for e in effects if isinstance(e, d.WriteDue)]


# --- rule 1: at most one write per notice, ever -------------------------------------------------------------


@pytest.mark.parametrize("result", list(d.WriteResult))
def test_rule1_a_notice_is_written_once_whatever_its_write_reported(result: d.WriteResult) -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.write(n, result)
    desk.at(desk.limits.write_settle_ms)
    assert due(desk.observe(O.IDLE)) == []
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)
    assert desk.writes == [n]
    assert (
        desk.state(n)
        is {
            d.WriteResult.OK: S.DELIVERED,
            d.WriteResult.FAILED: S.REJECTED,
            d.WriteResult.UNCERTAIN: S.UNCONFIRMED,
        }[result]
    )


def test_rule1_a_second_start_while_writing_is_refused() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.observe(O.IDLE)
    assert isinstance(desk.start(n), Accepted)
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)
    assert desk.writes == [n]


def test_rule1_a_repeated_submit_is_the_same_notice_even_restated_and_another_one_conflicts() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.write(n)
    notice = desk.desk.notices[n]
    repeat = desk.ok(
        d.Submit(
            desk.at(),
            "t1",
            n,
            NoticeKind.QUESTION,
            "q1",
            "mem-a1",
            MACHINE,
            "a1",
            notice.expires_at,
            "notice 1",
        )
    )
    assert not repeat.changed and repeat.result == notice
    # Restated after an owner restart, rendered anew: still the notice held, its first text stands.
    restated = desk.ok(
        d.Submit(
            desk.at(), "t1", n, NoticeKind.QUESTION, "q1", "mem-a1", MACHINE, "a1", notice.expires_at, "other"
        )
    )
    assert not restated.changed and desk.desk.notices[n] == notice
    desk.fails(
        d.Submit(
            desk.at(), "t1", n, NoticeKind.QUESTION, "q1", "mem-b2", MACHINE, "b2", notice.expires_at, "other"
        ),
        ErrorCode.CONFLICT,
    )
    assert desk.writes == [n]


# --- rule 2: per-session serialization, in order ------------------------------------------------------------


def test_rule2_one_write_per_session_in_submission_order() -> None:
    desk = Desk()
    first, second, third = desk.submit(1), desk.submit(2), desk.submit(3)
    assert [desk.reason(n) for n in (second, third)] == [R.PRESSURE, R.PRESSURE]
    assert due(desk.observe(O.IDLE)) == [first]
    desk.fails(d.WriteStarted(desk.at(), second, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)  # not next
    assert isinstance(desk.start(first), Accepted)
    assert desk.reason(second) is R.PRESSURE
    desk.fails(d.WriteStarted(desk.at(), second, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)  # one at a time
    desk.ok(d.WriteFinished(desk.at(), first, d.WriteResult.OK))
    desk.write(second)
    desk.write(third)
    assert desk.writes == [first, second, third]


def test_rule2_sessions_are_independent() -> None:
    desk = Desk()
    one, two = desk.submit(1, agent="a1"), desk.submit(2, agent="a2")
    desk.observe(O.IDLE, "a1")
    desk.observe(O.IDLE, "a2")
    assert isinstance(desk.start(one), Accepted)
    assert isinstance(desk.start(two), Accepted)
    assert desk.writes == [one, two]


# --- rule 3: a write starts only on a fresh idle with no draft and no dialog --------------------------------


@pytest.mark.parametrize("seen", [O.BUSY, O.DRAFT, O.DIALOG, O.OFFLINE, O.SETTLING, O.LEFTOVER])
def test_rule3_anything_but_idle_waits(seen: d.Observed) -> None:
    desk = Desk()
    n = desk.submit(1)
    assert due(desk.observe(seen)) == []
    assert desk.state(n) is S.QUEUED and desk.reason(n) is d.OBSERVATION_REASON[seen]
    desk.observe(O.IDLE)
    code = ErrorCode.OFFLINE if seen is O.OFFLINE else ErrorCode.CONFLICT
    desk.fails(d.WriteStarted(desk.at(), n, seen, desk.now - 1), code)  # the boundary recheck saw it again
    assert desk.writes == []


def test_rule4_a_crash_leftover_is_named_and_never_written_over() -> None:
    """A write cut off between paste and Enter leaves its notice in the composer: the next notice waits as
    `leftover` (not an unexplained `draft`), and nothing is written until a person submits or clears it."""
    desk = Desk()
    cut, later = desk.submit(1), desk.submit(2)
    desk.at(desk.limits.write_settle_ms)
    desk.observe(O.IDLE)
    assert isinstance(desk.start(cut), Accepted)
    desk.ok(d.Restart(desk.at()))  # the daemon was killed after the paste, before the Enter
    assert desk.state(cut) is S.UNCONFIRMED
    assert due(desk.observe(O.LEFTOVER)) == []
    assert (desk.state(later), desk.reason(later)) == (S.QUEUED, R.LEFTOVER)
    desk.fails(d.WriteStarted(desk.at(), later, O.LEFTOVER, desk.now - 1), ErrorCode.CONFLICT)
    desk.ok(d.TurnObserved(desk.at(), cut))  # a person pressed Enter: the notice's turn shows
    desk.write(later)
    assert desk.writes == [cut, later] and desk.state(cut) is S.ACCEPTED


def test_rule3_stale_idle_is_refused() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.observe(O.IDLE)
    fresh = desk.limits.observation_fresh_ms
    desk.fails(d.WriteStarted(desk.at(fresh + 1), n, O.IDLE, desk.now - fresh - 1), ErrorCode.CONFLICT)  # old
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, desk.now + 1), ErrorCode.BAD_REQUEST)  # from the future


def test_rule3_an_idle_seen_before_a_busy_observation_is_stale() -> None:
    desk = Desk()
    n = desk.submit(1)
    idle_at = desk.at()
    desk.observe(O.BUSY)
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, idle_at), ErrorCode.CONFLICT)
    desk.ok(d.Observe(idle_at, "a1", O.IDLE))  # a late report of the old look is ignored
    assert desk.reason(n) is R.BUSY


def test_rule3_an_idle_from_before_the_last_write_settled_is_stale() -> None:
    desk = Desk()
    first, second = desk.submit(1), desk.submit(2)
    desk.write(first)
    assert due(desk.observe(O.IDLE)) == []  # the engine may not show busy yet: "idle" sticks right after
    assert desk.reason(second) is R.UNOBSERVED
    desk.fails(d.WriteStarted(desk.at(), second, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)
    desk.at(desk.limits.write_settle_ms)
    assert due(desk.observe(O.IDLE)) == [second]


def test_rule3_a_fresh_idle_goes_stale_with_time() -> None:
    desk = Desk()
    first = desk.submit(1)
    desk.observe(O.IDLE)
    desk.at(desk.limits.observation_fresh_ms + 1)
    second = desk.submit(2, agent="a1")
    assert desk.reason(first) is R.UNOBSERVED and desk.reason(second) is R.PRESSURE


# --- rule 4: no interrupt, no cancel key, no cleared draft --------------------------------------------------


def test_rule4_the_desk_has_no_key_effect_but_its_own_paste() -> None:
    assert set(d.DESK_EFFECTS) == {d.WriteDue, d.WriteNotice, d.DeliveryChanged, d.ArmDeskTimer}
    desk = Desk()
    n = desk.submit(1)
    desk.observe(O.IDLE)
    outcome = desk.start(n)
    assert isinstance(outcome, Accepted)
    (write,) = [e for e in outcome.effects if isinstance(e, d.WriteNotice)]
    assert write == d.WriteNotice("a1", n, "notice 1")


def test_rule4_a_real_draft_is_never_written_over() -> None:
    desk = Desk()
    n = desk.submit(1)
    for _ in range(5):
        assert due(desk.observe(O.DRAFT)) == []
        desk.fails(d.WriteStarted(desk.at(), n, O.DRAFT, desk.now - 1), ErrorCode.CONFLICT)
    desk.ok(d.Tick(desk.now + DAY))
    assert desk.state(n) is S.EXPIRED and desk.writes == []


# --- rule 5: restart ----------------------------------------------------------------------------------------


def test_rule5_restart_makes_writing_unconfirmed_and_resumes_queued() -> None:
    desk = Desk()
    first, second = desk.submit(1), desk.submit(2)
    desk.observe(O.IDLE)
    assert isinstance(desk.start(first), Accepted)
    seen_before = desk.now
    desk.ok(d.Restart(desk.at()))
    assert desk.state(first) is S.UNCONFIRMED and desk.reason(first) is R.RESTART
    assert desk.state(second) is S.QUEUED and desk.reason(second) is R.UNOBSERVED
    desk.fails(d.WriteFinished(seen_before, first, d.WriteResult.OK), ErrorCode.CONFLICT)  # from before it
    desk.ok(d.Observe(seen_before, "a1", O.IDLE))
    assert desk.desk.sessions["a1"].observed is None  # not trusted
    desk.write(second)
    desk.at(desk.limits.write_settle_ms)
    desk.observe(O.IDLE)
    assert desk.writes == [first, second]
    assert desk.state(first) is S.UNCONFIRMED  # stays until read or inspected
    desk.ok(d.InboxRead(desk.at(), (first,)))
    assert desk.state(first) is S.READ


def test_rule5_the_owner_resolves_an_unconfirmed_notice_and_only_a_declared_loss_writes_again() -> None:
    """Seed: "offline, unpaired, busy, draft, expired, cancelled, and uncertain states are visible and
    actionable" and "Delivery unconfirmed ... do not invent a new ID and resend": the notice keeps its id;
    only the owner's declared loss permits one more write, under the notice's second write id, recorded as
    such."""
    desk = Desk()
    landed, lost = desk.submit(1), desk.submit(2)
    desk.write(landed, d.WriteResult.UNCERTAIN)
    desk.write(lost, d.WriteResult.UNCERTAIN)
    first_write = desk.desk.notices[lost].started_at
    assert d.write_id(desk.desk.notices[lost]) == f"{lost}#1"
    desk.ok(d.Inspect(desk.at(), landed, landed=True))
    assert desk.state(landed) is S.DELIVERED and desk.reason(landed) is R.INSPECTED
    declared_at = desk.at()
    desk.ok(d.Inspect(declared_at, lost, landed=False))
    notice = desk.desk.notices[lost]
    assert notice.state is S.QUEUED and notice.started_at is None
    assert (notice.lost_at, notice.lost_started_at) == (declared_at, first_write)
    assert d.write_id(notice) == f"{lost}#2"
    assert desk.writes == [landed, lost]  # nothing is written by the declaration itself
    desk.write(lost, d.WriteResult.UNCERTAIN)  # its one more write, on a fresh idle look like any other
    assert desk.writes == [landed, lost, lost]
    assert desk.desk.notices[lost].lost_started_at == first_write  # the lost write stays on record
    refused = desk.fails(d.Inspect(desk.at(), lost, landed=False), ErrorCode.CONFLICT)
    assert "never written a third time" in refused.detail
    desk.ok(d.Inspect(desk.at(), lost, landed=True))  # it may still be confirmed
    assert desk.state(lost) is S.DELIVERED
    desk.fails(d.Inspect(desk.at(), landed, landed=False), ErrorCode.CONFLICT)  # delivered is never lost


def test_rule5_a_declared_loss_is_refused_unless_the_write_is_unconfirmed_and_may_still_be_owed() -> None:
    """Only an `unconfirmed` write can be declared lost: a delivered one landed, a failed one sent no byte and
    stays rejected; an expired notice and a full queue refuse it with their own codes."""
    desk = Desk(attrs.evolve(DEFAULT_LIMITS, queued_per_agent=2))
    ok = desk.submit(1)
    desk.write(ok)
    desk.fails(d.Inspect(desk.at(), ok, landed=False), ErrorCode.CONFLICT)
    failed = desk.submit(2)
    desk.write(failed, d.WriteResult.FAILED)
    desk.ok(d.Inspect(desk.at(), failed, landed=False))
    assert desk.state(failed) is S.REJECTED and desk.writes == [ok, failed]
    late = desk.submit(3, expires_at=desk.now + 60_000)
    desk.write(late, d.WriteResult.UNCERTAIN)
    desk.at(60_000)
    desk.fails(d.Inspect(desk.at(), late, landed=False), ErrorCode.EXPIRED)
    desk.fails(d.Inspect(desk.at(), "t1/none/question", landed=False), ErrorCode.NOT_FOUND)
    other = desk.submit(4)
    desk.write(other, d.WriteResult.UNCERTAIN)
    desk.submit(5)
    desk.submit(6)  # the session holds queued_per_agent unsent notices now
    desk.fails(d.Inspect(desk.at(), other, landed=False), ErrorCode.BOUND_EXCEEDED, "queued_per_agent")
    assert desk.state(other) is S.UNCONFIRMED and desk.writes == [ok, failed, late, other]


def test_rule5_a_loss_declared_while_its_team_is_paused_waits_held() -> None:
    desk = Desk()
    lost = desk.submit(1)
    desk.write(lost, d.WriteResult.UNCERTAIN)
    desk.ok(d.Hold(desk.at(), "t1"))
    desk.ok(d.Inspect(desk.at(), lost, landed=False))
    assert desk.state(lost) is S.HELD
    desk.ok(d.Release(desk.at(), "t1"))
    assert desk.state(lost) is S.QUEUED
    desk.write(lost)
    assert desk.writes == [lost, lost] and desk.state(lost) is S.DELIVERED


def test_rule5_a_rewrite_is_suppressed_like_any_unsent_notice_and_restart_leaves_it_owed() -> None:
    """A declared loss makes the notice unsent again: the member's read withdraws it before its rewrite, and a
    restart resumes it (known-unsent work) rather than losing it."""
    desk = Desk()
    read, resumed = desk.submit(1), desk.submit(2)
    desk.write(read, d.WriteResult.UNCERTAIN)
    desk.write(resumed, d.WriteResult.UNCERTAIN)
    desk.ok(d.Inspect(desk.at(), read, landed=False))
    desk.ok(d.Inspect(desk.at(), resumed, landed=False))
    desk.ok(d.InboxRead(desk.at(), (read,)))
    assert desk.state(read) is S.WITHDRAWN and desk.desk.notices[read].lost_at is not None
    desk.ok(d.Restart(desk.at()))
    assert desk.state(resumed) is S.QUEUED
    desk.write(resumed)
    assert desk.writes == [read, resumed, resumed]


def test_invariants_catch_a_rewrite_without_a_declared_loss() -> None:
    """D1 is production code: a desk that queued a written notice again without the owner's declaration, or
    wrote it twice, is caught."""
    desk = Desk()
    n = desk.submit(1)
    desk.write(n, d.WriteResult.UNCERTAIN)
    before = desk.desk
    notice = before.notices[n]
    sneaky = attrs.evolve(notice, state=S.QUEUED, reason=R.PRESSURE, started_at=None, seen_at=None)
    after = attrs.evolve(before, notices=before.notices.set(n, sneaky))
    assert any(code == "D1" for code, _ in transition_violations(before, after))
    forged = attrs.evolve(sneaky, lost_at=desk.now, lost_started_at=notice.started_at)
    forged_desk = attrs.evolve(before, notices=before.notices.set(n, forged))
    outcome: Accepted[d.Desk] = Accepted(forged_desk, None, (), ())
    assert any(code == "D1" for code, _ in effect_violations(before, d.Tick(desk.now), outcome))
    twice = attrs.evolve(notice, lost_at=None, lost_started_at=notice.started_at)
    unrecorded = attrs.evolve(before, notices=before.notices.set(n, twice))
    assert any(code == "D1" for code, _ in desk_violations(unrecorded))


def test_rule5_a_write_that_never_reports_times_out_unconfirmed() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.observe(O.IDLE)
    assert isinstance(desk.start(n), Accepted)
    desk.ok(d.Tick(desk.now + desk.limits.write_timeout_ms))
    assert desk.state(n) is S.UNCONFIRMED and desk.reason(n) is R.TIMEOUT


# --- rule 6: reading suppresses unsent notices only ---------------------------------------------------------


def test_rule6_reading_suppresses_unsent_but_never_withdraws_written() -> None:
    desk = Desk()
    written, unsent = desk.submit(1), desk.submit(2)
    desk.write(written)
    desk.ok(d.InboxRead(desk.at(), (written, unsent, "t1/unknown/question")))
    assert desk.state(written) is S.READ
    assert (desk.state(unsent), desk.reason(unsent)) == (S.WITHDRAWN, R.INBOX)
    desk.at(desk.limits.write_settle_ms)
    assert due(desk.observe(O.IDLE)) == []
    assert desk.writes == [written]


def test_rule6_a_retrieved_answer_suppresses_its_continuation() -> None:
    desk = Desk()
    answer = desk.submit(1, kind=NoticeKind.ANSWER)
    desk.observe(O.BUSY)
    desk.ok(d.AnswerRetrieved(desk.at(), answer))
    assert (desk.state(answer), desk.reason(answer)) == (S.WITHDRAWN, R.RETRIEVED)
    desk.fails(d.WriteStarted(desk.at(), answer, O.IDLE, desk.now - 1), ErrorCode.CANCELLED)


def test_rule6_a_read_while_writing_leaves_the_write_to_its_report() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.observe(O.IDLE)
    desk.start(n)
    desk.ok(d.InboxRead(desk.at(), (n,)))
    assert desk.state(n) is S.WRITING


# --- rule 7: pause holds, resume releases only known-unsent work --------------------------------------------


def test_rule7_hold_and_release() -> None:
    desk = Desk()
    written, queued = desk.submit(1), desk.submit(2)
    other = desk.submit(3, team="t2")
    desk.observe(O.IDLE)
    desk.start(written)
    desk.ok(d.Hold(desk.at(), "t1"))
    assert (desk.state(written), desk.state(queued)) == (S.WRITING, S.HELD)
    late = desk.submit(4)
    assert desk.state(late) is S.HELD and desk.reason(late) is R.PAUSED
    desk.ok(d.WriteFinished(desk.at(), written, d.WriteResult.OK))
    desk.fails(d.WriteStarted(desk.at(), queued, O.IDLE, desk.now - 1), ErrorCode.TEAM_PAUSED)
    desk.write(other)  # another team's notice goes ahead
    desk.ok(d.Release(desk.at(), "t1"))
    assert desk.desk.sessions["a1"].queue == (queued, late)
    assert desk.state(written) is S.DELIVERED
    desk.write(queued)
    desk.write(late)
    assert desk.writes == [written, other, queued, late]


def test_rule7_release_merges_in_submission_order() -> None:
    desk = Desk()
    first = desk.submit(1)
    desk.ok(d.Hold(desk.at(), "t1"))
    second = desk.submit(2, team="t2")
    desk.observe(O.BUSY)
    desk.ok(d.Release(desk.at(), "t1"))
    assert desk.desk.sessions["a1"].queue == (first, second)
    assert (desk.reason(first), desk.reason(second)) == (R.BUSY, R.PRESSURE)


# --- rule 8: cancellation stops unsent notices only ---------------------------------------------------------


def test_rule8_cancellation_withdraws_unsent_and_leaves_written() -> None:
    desk = Desk()
    written, unsent, member, team = desk.submit(1), desk.submit(2), desk.submit(3, agent="a2"), desk.submit(4)
    desk.write(written)
    for notice_id in (written, unsent):
        desk.ok(d.Withdraw(desk.at(), notice_id))
    desk.ok(d.WithdrawMember(desk.at(), "t1", "mem-a2"))
    desk.ok(d.WithdrawTeam(desk.at(), "t1"))
    assert desk.state(written) is S.DELIVERED
    assert [(desk.state(n), desk.reason(n)) for n in (unsent, member, team)] == [
        (S.WITHDRAWN, R.CANCELLED),
        (S.WITHDRAWN, R.REMOVED),
        (S.WITHDRAWN, R.ARCHIVED),
    ]
    desk.ok(d.Withdraw(desk.at(), "t1/never/question"))  # unknown: ignored


# --- rule 9: bounds -----------------------------------------------------------------------------------------


def test_rule9_queued_per_agent_is_explicit() -> None:
    desk = Desk(limits=Limits(queued_per_agent=3))
    for n in range(3):
        desk.submit(n)
    notice = d.Submit(
        desk.at(), "t1", "t1/q9/question", NoticeKind.QUESTION, "q9", "m", MACHINE, "a1", 10**9, "x"
    )
    desk.fails(notice, ErrorCode.BOUND_EXCEEDED, "queued_per_agent")
    desk.submit(10, agent="a2")  # another agent has room


def test_rule9_delivery_records_is_explicit_and_retained() -> None:
    desk = Desk(limits=Limits(delivery_records=3))
    for n in range(3):
        notice_id = desk.submit(n)
        desk.ok(d.Withdraw(desk.at(), notice_id))
    notice = d.Submit(
        desk.at(), "t1", "t1/q9/question", NoticeKind.QUESTION, "q9", "m", MACHINE, "a2", 10**9, "x"
    )
    desk.fails(notice, ErrorCode.BOUND_EXCEEDED, "delivery_records")
    assert len(desk.desk.notices) == 3


@pytest.mark.parametrize("text", ["", "   ", "é" * 40])
def test_rule9_a_full_desk_or_an_expiry_refuses_a_notice_before_its_text_is_looked_at(text: str) -> None:
    """The owner tells a refusal as recorded before it renders a notice (a start's restatement): the refusals
    `admission_refusal` names are the desk's answer whatever the text, empty or too long."""
    desk = Desk(limits=Limits(delivery_records=1, notice_bytes=64))
    desk.submit(0)
    later = d.Submit(
        desk.at(), "t1", "t1/q1/question", NoticeKind.QUESTION, "q1", "m", MACHINE, "a1", 10**9, text
    )
    full = desk.fails(later, ErrorCode.BOUND_EXCEEDED, "delivery_records")
    assert d.admission_refusal(desk.desk, later.notice_id, later.expires_at, later.at, desk.limits) == full
    roomy = Desk(limits=Limits(notice_bytes=64))
    expired = attrs.evolve(later, expires_at=later.at)
    assert roomy.fails(expired, ErrorCode.EXPIRED) == d.admission_refusal(
        roomy.desk, expired.notice_id, expired.expires_at, expired.at, roomy.limits
    )
    assert d.admission_refusal(roomy.desk, later.notice_id, later.expires_at, later.at, roomy.limits) is None


def test_rule9_notice_bytes_and_excerpts() -> None:
    desk = Desk(limits=Limits(notice_bytes=64))
    text = "é" * 40  # 80 bytes
    notice = d.Submit(
        desk.at(), "t1", "t1/q1/question", NoticeKind.QUESTION, "q1", "m", MACHINE, "a1", 10**9, text
    )
    desk.fails(notice, ErrorCode.BOUND_EXCEEDED, "notice_bytes")
    short = d.excerpt_notice(text, "status q1", 64)
    assert len(short.encode()) <= 64 and short.startswith("é") and short.endswith("status q1]")
    assert d.excerpt_notice("fits", "p", 64) == "fits"
    assert len(d.excerpt_notice(text, "p" * 100, 10).encode()) <= 10
    desk.ok(attrs.evolve(notice, text=short))


def test_rule9_unsent_notices_expire() -> None:
    desk = Desk()
    intro = desk.submit(1, kind=NoticeKind.INTRODUCTION, expires_at=desk.now + 1_000)
    question = desk.submit(2, expires_at=desk.now + 5_000)
    desk.fails(d.WriteStarted(desk.now + 1_000, intro, O.IDLE, desk.now + 999), ErrorCode.EXPIRED)
    desk.ok(d.Tick(desk.now + 1_000))
    assert (desk.state(intro), desk.state(question)) == (S.EXPIRED, S.QUEUED)
    desk.fails(
        d.Submit(
            desk.at(), "t1", "t1/q3/question", NoticeKind.QUESTION, "q3", "m", MACHINE, "a1", desk.now, "x"
        ),
        ErrorCode.EXPIRED,
    )


# --- errors -------------------------------------------------------------------------------------------------


def test_errors_are_values() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.fails(d.WriteFinished(desk.at(), "nope", d.WriteResult.OK), ErrorCode.NOT_FOUND)
    desk.fails(d.WriteFinished(desk.at(), n, d.WriteResult.OK), ErrorCode.CONFLICT)  # never started
    desk.fails(d.TurnObserved(desk.at(), n), ErrorCode.CONFLICT)
    desk.fails(d.Inspect(desk.at(), n, landed=True), ErrorCode.CONFLICT)
    wrong = d.Submit(desk.at(), "t1", "t1/x/question", NoticeKind.QUESTION, "x", "m", "m2", "a1", 10**9, "x")
    desk.fails(wrong, ErrorCode.BAD_REQUEST)
    desk.fails(attrs.evolve(wrong, machine_id=MACHINE, text="  "), ErrorCode.BAD_REQUEST)
    desk.ok(d.Restart(desk.at()))
    desk.fails(d.Restart(desk.now - 1), ErrorCode.BAD_REQUEST)
    desk.ok(d.Withdraw(desk.at(), n))
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, desk.now - 1), ErrorCode.CANCELLED)
    desk.fails(d.Inspect(desk.at(), n, landed=False), ErrorCode.CONFLICT)


def test_delivered_refuses_a_contradicting_report_but_a_turn_beats_any() -> None:
    desk = Desk()
    n = desk.submit(1)
    desk.write(n)
    desk.fails(d.WriteFinished(desk.at(), n, d.WriteResult.FAILED), ErrorCode.CONFLICT)
    desk.ok(d.TurnObserved(desk.at(), n))
    desk.ok(d.WriteFinished(desk.at(), n, d.WriteResult.FAILED))
    assert desk.state(n) is S.ACCEPTED


# --- the two engine regressions -----------------------------------------------------------------------------


def test_regression_a_footer_mistaken_for_a_draft_waits_then_writes_once() -> None:
    """Codex's configurable footer was read as a draft: the notice waits, then is written exactly once."""
    desk = Desk()
    n = desk.submit(1)
    for _ in range(3):
        assert due(desk.observe(O.DRAFT)) == []  # the confused profile
    assert desk.reason(n) is R.DRAFT and desk.writes == []
    assert due(desk.observe(O.IDLE)) == [n]  # the fixed profile
    assert isinstance(desk.start(n), Accepted)
    desk.ok(d.WriteFinished(desk.at(), n, d.WriteResult.OK))
    for seen in (O.DRAFT, O.IDLE, O.DRAFT):  # the footer flickers on
        desk.at(desk.limits.write_settle_ms)
        assert due(desk.observe(seen)) == []
    assert desk.writes == [n] and desk.state(n) is S.DELIVERED


def test_regression_b_an_accepted_paste_that_looked_unconfirmed() -> None:
    """Claude's `pasted_content` envelope made the prompt look odd: uncertain, then the matching turn."""
    desk = Desk()
    n = desk.submit(1, kind=NoticeKind.INTRODUCTION)
    desk.observe(O.IDLE)
    desk.start(n)
    desk.ok(d.WriteFinished(desk.at(), n, d.WriteResult.UNCERTAIN))
    assert desk.state(n) is S.UNCONFIRMED
    desk.ok(d.TurnObserved(desk.at(), n))
    assert desk.state(n) is S.ACCEPTED
    desk.ok(d.Restart(desk.at()))
    desk.at(desk.limits.write_settle_ms)
    assert due(desk.observe(O.IDLE)) == []
    desk.fails(d.WriteStarted(desk.at(), n, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)
    assert desk.writes == [n] and desk.state(n) is S.ACCEPTED
    assert desk_violations(desk.desk) == []


def test_a_turn_while_writing_frees_the_session() -> None:
    desk = Desk()
    first, second = desk.submit(1), desk.submit(2)
    desk.observe(O.IDLE)
    desk.start(first)
    desk.ok(d.TurnObserved(desk.at(), first))
    desk.ok(d.WriteFinished(desk.at(), first, d.WriteResult.UNCERTAIN))
    assert desk.state(first) is S.ACCEPTED
    desk.write(second)
    assert desk.writes == [first, second]
