# Issue 19: behaviours of core/delivery.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import re
from pathlib import Path

import attrs

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.delivery import WriteResult
from harness.core.errors import ErrorCode
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind
from tests.team_helpers import TEAM, Driver
from tests.test_delivery_examples import Desk

SPEC = Path(__file__).resolve().parent.parent / "spec" / "delivery-v1.md"


def test_write_results_are_the_spec_words() -> None:
    """spec/delivery-v1.md's desk commands: `write_finished | noticeId, result ok / failed / uncertain`; the
    shell reports these words, so a result spelled otherwise in the code would not decode."""
    row = next(
        line for line in SPEC.read_text(encoding="utf-8").splitlines() if line.startswith("| write_finished")
    )
    assert {result.value for result in WriteResult} == set(re.findall(r"`([a-z_]+)`", row))


def test_a_loss_declared_at_the_expiry_instant_is_refused_and_a_moment_before_is_not() -> None:
    """Rule 5: an expired notice is never written again; a notice expires at `expires_at`, not after it."""
    for before_expiry, code in ((1, None), (0, ErrorCode.EXPIRED)):
        desk = Desk()
        late = desk.submit(1, expires_at=desk.now + 60_000)
        expires_at = desk.desk.notices[late].expires_at
        desk.write(late, d.WriteResult.UNCERTAIN)
        declared = d.Inspect(expires_at - before_expiry, late, landed=False)
        if code is None:
            desk.ok(declared)
        else:
            desk.fails(declared, code)


def test_the_desk_arms_its_timer_when_a_sessions_first_deadline_changes() -> None:
    """The shell sleeps until the desk's next deadline: a submit that brings a session's first deadline
    forward asks for the timer again (`ArmDeskTimer` at that deadline); one that expires later does not."""
    desk = Desk()
    first = desk.submit(1, expires_at=desk.now + 60_000)
    due = desk.desk.notices[first].expires_at
    assert [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)] == [d.ArmDeskTimer(due)]
    desk.submit(2, expires_at=due + 10_000)
    assert not [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)]
    sooner = desk.submit(3, expires_at=due - 10_000)
    assert [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)] == [
        d.ArmDeskTimer(desk.desk.notices[sooner].expires_at)
    ]


def test_a_reason_only_change_of_a_queued_notice_is_reported() -> None:
    """A queued notice whose reason changes (busy -> draft) is a new delivery view for the owner: the
    desk says so (`DeliveryChanged`), although its state stays `queued`."""
    desk = Desk()
    notice = desk.submit(1)
    desk.observe(d.Observed.BUSY)
    assert desk.desk.notices[notice].reason is d.Reason.BUSY
    effects = desk.observe(d.Observed.DRAFT)
    changed = [e for e in effects if isinstance(e, d.DeliveryChanged)]
    assert [(e.notice_id, e.state, e.reason) for e in changed] == [
        (notice, d.DeliveryState.QUEUED, d.Reason.DRAFT)
    ]


def test_rule3_a_turn_makes_every_earlier_idle_screen_stale() -> None:
    """spec/delivery-v1.md: an idle seen "before a matching turn ... is stale"; "A matching turn moves it
    [`idleAfter`] past the turn." An idle seen at the turn's instant is stale; one a moment later is not."""
    desk = Desk()
    first, second = desk.submit(1), desk.submit(2)
    desk.write(first, d.WriteResult.UNCERTAIN)
    desk.at(desk.limits.write_settle_ms)
    idle_at = desk.at()
    desk.ok(d.Observe(idle_at, "a1", d.Observed.IDLE))
    assert desk.reason(second) is d.Reason.READY
    turn_at = desk.at()
    desk.ok(d.TurnObserved(turn_at, first))
    assert desk.reason(second) is d.Reason.UNOBSERVED
    desk.fails(d.WriteStarted(turn_at, second, d.Observed.IDLE, idle_at), ErrorCode.CONFLICT)
    assert d.WriteDue("a1", second) not in desk.ok(d.Observe(turn_at, "a1", d.Observed.IDLE)).effects
    assert d.WriteDue("a1", second) in desk.ok(d.Observe(turn_at + 1, "a1", d.Observed.IDLE)).effects


def test_fresh_idle_is_a_settled_idle_no_older_than_observation_fresh_ms() -> None:
    """Rule 3's license to write (the desk runner and the model ask it): an idle look, seen at or after the
    last settling, at most `observation_fresh_ms` ago."""
    fresh = DEFAULT_LIMITS.observation_fresh_ms
    idle = d.Session("a1", observed=d.Observed.IDLE, observed_at=1_000, idle_after=1_000)
    assert d.fresh_idle(idle, 1_000 + fresh, DEFAULT_LIMITS)
    assert not d.fresh_idle(idle, 1_000 + fresh + 1, DEFAULT_LIMITS)
    assert not d.fresh_idle(attrs.evolve(idle, idle_after=1_001), 1_000, DEFAULT_LIMITS)
    for seen in (d.Observed.BUSY, d.Observed.DRAFT, None):
        assert not d.fresh_idle(attrs.evolve(idle, observed=seen), 1_000, DEFAULT_LIMITS)


def test_two_looks_at_the_same_instant_the_later_reported_wins_and_a_repeat_changes_nothing() -> None:
    """The desk keeps its latest look: a busy screen reported at the same millisecond as an idle one
    replaces it, and the very same look reported again leaves the desk as it was."""
    desk = Desk()
    n = desk.submit(1)
    at = desk.at()
    desk.ok(d.Observe(at, "a1", d.Observed.IDLE))
    again = desk.ok(d.Observe(at, "a1", d.Observed.IDLE))
    assert not again.changed and again.state is desk.desk
    desk.ok(d.Observe(at, "a1", d.Observed.BUSY))
    assert desk.desk.sessions["a1"].observed is d.Observed.BUSY and desk.reason(n) is d.Reason.BUSY


def test_the_write_boundary_look_is_the_desks_latest_look() -> None:
    """spec/delivery-v1.md: "the session's observation becomes `idle` at `seenAt`" when a write starts, so a
    report of an older look arriving afterwards is superseded and ignored."""
    desk = Desk()
    n = desk.submit(1)
    first_look = desk.at()
    desk.ok(d.Observe(first_look, "a1", d.Observed.IDLE))
    seen_at = desk.at()
    desk.ok(d.WriteStarted(desk.at(), n, d.Observed.IDLE, seen_at))
    assert desk.desk.sessions["a1"].observed_at == seen_at
    late = desk.ok(d.Observe(seen_at - 1, "a1", d.Observed.BUSY))
    assert not late.changed and desk.desk.sessions["a1"].observed is d.Observed.IDLE


def test_a_write_start_or_declared_loss_refused_for_an_unknown_notice_or_from_before_the_restart() -> None:
    """Reports that cannot be about this desk's notices as they are now: a notice it never had, or a look
    or a declaration made before its restart."""
    desk = Desk()
    uncertain, queued = desk.submit(1), desk.submit(2)
    desk.fails(d.WriteStarted(desk.at(), "t1/q9/question", d.Observed.IDLE, desk.now), ErrorCode.NOT_FOUND)
    desk.write(uncertain, d.WriteResult.UNCERTAIN)
    restart = desk.at()
    desk.ok(d.Restart(restart))
    early = (
        d.WriteStarted(desk.at(), queued, d.Observed.IDLE, restart - 1),
        d.Inspect(restart - 1, uncertain, landed=False),
    )
    for command in early:  # the refusal says why: the report is older than the desk's restart
        assert "before the restart" in desk.fails(command, ErrorCode.CONFLICT).detail
    desk.ok(d.Inspect(desk.at(), uncertain, landed=False))  # the same declaration, made after the restart


def test_loss_moot_says_why_a_notice_is_no_longer_owed_and_none_while_it_is() -> None:
    """The owner refuses to declare a write lost (one more write) for a notice nobody is owed any more."""
    w = Driver().create(members=2)
    w.ask("q1", 1, 2)
    notice = d.Notice(
        id="t1/q1/question",
        team_id=TEAM,
        kind=NoticeKind.QUESTION,
        subject_id="q1",
        membership_id="mem2",
        agent_id="agent2",
        expires_at=99,
        text="hi",
        seq=1,
        submitted_at=5,
        state=d.DeliveryState.UNCONFIRMED,
        reason=d.Reason.UNCERTAIN,
        updated_at=5,
    )
    assert d.loss_moot(w.team, notice) is None
    w.reply("q1", 2)
    assert d.loss_moot(w.team, notice) == "question 'q1' is no longer open"
    intro = attrs.evolve(notice, kind=NoticeKind.INTRODUCTION, subject_id="mem2")
    assert d.loss_moot(w.team, intro) is None
    w.ok(c.RemoveMember(w.tick(), TEAM, "mem2"))
    assert d.loss_moot(w.team, intro) == "member 'mem2' is no longer active"
    w.ok(c.ArchiveTeam(w.tick(), TEAM))
    assert d.loss_moot(w.team, intro) == "team 't1' is archived"


def test_a_tick_expires_exactly_the_notices_due_by_then() -> None:
    """Rule 5: a notice expires at `expires_at`; a session's later notice stays queued past the earlier's."""
    desk = Desk()
    first = desk.submit(1, expires_at=desk.now + 60_000)
    second = desk.submit(2, expires_at=desk.now + 120_000)
    due = desk.desk.notices[first].expires_at
    desk.ok(d.Tick(due - 1))
    assert (desk.state(first), desk.state(second)) == (d.DeliveryState.QUEUED, d.DeliveryState.QUEUED)
    desk.ok(d.Tick(due))
    assert (desk.state(first), desk.state(second)) == (d.DeliveryState.EXPIRED, d.DeliveryState.QUEUED)
