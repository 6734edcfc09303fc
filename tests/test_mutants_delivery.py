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
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from tests.team_helpers import TEAM, Driver
from tests.test_delivery_examples import MACHINE, Desk, O

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


# --- found by a full mutation run of core/delivery.py (680 mutants, 56 survived) ----------------------------


def _state_reasons(state: str) -> set[d.Reason]:
    """The reasons spec/delivery-v1.md's state table lists for `state` (its backquoted words)."""
    row = next(
        line for line in SPEC.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {state} |")
    )
    return {d.Reason(word) for word in re.findall(r"`([a-z_]+)`", row.split("|")[2])}


def test_the_reasons_of_a_waiting_and_a_withdrawn_notice_are_the_spec_words() -> None:
    """The owner's `status` shows a notice's reason as the spec's word: queued waits as the observation's
    reason, `pressure` (behind another notice) or `unobserved`; a withdrawal says why in the spec's words."""
    assert _state_reasons("queued") == {
        *d.OBSERVATION_REASON.values(),
        d.Reason.PRESSURE,
        d.Reason.UNOBSERVED,
    }
    assert {reason.value for reason in _state_reasons("withdrawn")} == {
        "cancelled", "answered", "expired", "removed", "archived", "inbox", "retrieved"
    }  # fmt: skip


def test_an_excerpt_keeps_a_text_that_fits_exactly_and_never_splits_a_character() -> None:
    """spec/delivery-v1.md: `excerpt_notice` gives "the longest prefix that fits with a pointer"; the result
    always fits the limit and never splits a character, in the text or in the pointer."""
    assert d.excerpt_notice("é" * 10, "p", 20) == "é" * 10  # 20 bytes: fits exactly
    mark = d.EXCERPT_MARK.format(pointer="p")
    cut = d.excerpt_notice("a" + "é" * 100, "p", 60)  # the cut falls inside an é: it is dropped whole
    assert cut == "a" + "é" * ((60 - len(mark.encode()) - 1) // 2) + mark
    assert len(cut.encode()) <= 60
    tiny = d.excerpt_notice("x" * 100, "é" * 20, 29)  # even the mark does not fit, and its cut splits an é
    assert tiny == "\n[... excerpt; full text: é" and len(tiny.encode()) <= 29


def test_the_queue_bound_counts_queued_held_and_writing_notices() -> None:
    """spec/delivery-v1.md: "`queued_per_agent` counts a session's queued, held and writing notices"."""
    session = d.Session("a1", queue=("q",), held=("h1", "h2"), writing="w")
    assert d.unsent_count(session) == 4
    assert d.unsent_count(attrs.evolve(session, writing=None)) == 3


def test_an_idle_look_exactly_observation_fresh_ms_old_still_makes_the_head_ready() -> None:
    """spec/delivery-v1.md: an idle counts "only when fresh: seen at most `observation_fresh_ms` before the
    command's `at`"; a millisecond more and the head waits as `unobserved`."""
    for extra, reason in ((0, d.Reason.READY), (1, d.Reason.UNOBSERVED)):
        desk = Desk()
        looked = desk.at(desk.limits.write_settle_ms)
        first = desk.submit(1)
        desk.ok(d.Observe(looked + 1, "a1", d.Observed.IDLE))
        desk.now = looked + 1 + desk.limits.observation_fresh_ms + extra - 100  # submit() steps 100 ms on
        second = desk.submit(2)
        assert desk.reason(first) is reason, extra
        assert desk.reason(second) is d.Reason.PRESSURE


def test_a_write_is_offered_when_the_head_becomes_ready_and_on_each_fresh_idle_look_only() -> None:
    """spec/delivery-v1.md: "When the head becomes `ready`, and on every fresh idle observation while it
    stays so, the desk offers `WriteDue`": a notice submitted to a freshly idle session is offered at once
    (and the submit's result is the notice as the desk keeps it, ready); a notice queued behind it offers
    nothing again; another idle look does; a busy one does not."""
    desk = Desk()
    desk.write(desk.submit(1))
    desk.at(desk.limits.write_settle_ms)
    desk.observe(O.IDLE)
    first = "t1/q2/question"
    submitted = desk.ok(
        d.Submit(desk.at(), "t1", first, NoticeKind.QUESTION, "q2", "mem-a1", MACHINE, "a1",
                 desk.now + 60_000, "notice 2")
    )  # fmt: skip
    assert submitted.result == desk.desk.notices[first] and desk.reason(first) is d.Reason.READY
    assert [e for e in submitted.effects if isinstance(e, d.WriteDue)] == [d.WriteDue("a1", first)]
    desk.submit(3)
    assert not [e for e in desk.effects if isinstance(e, d.WriteDue)]
    assert [e for e in desk.observe(O.IDLE) if isinstance(e, d.WriteDue)] == [d.WriteDue("a1", first)]
    assert not [e for e in desk.observe(O.BUSY) if isinstance(e, d.WriteDue)]


def test_a_turn_after_a_delivered_write_reports_accepted() -> None:
    """The owner learns every state change of a notice (`DeliveryChanged`), also one whose reason stays
    the same: delivered -> accepted on the matching turn."""
    desk = Desk()
    n = desk.submit(1)
    desk.write(n)
    at = desk.at()
    desk.ok(d.TurnObserved(at, n))
    changed = [e for e in desk.effects if isinstance(e, d.DeliveryChanged)]
    assert changed == [d.DeliveryChanged("t1", n, d.DeliveryState.ACCEPTED, None, at)]


def test_notices_are_numbered_from_one_in_submission_order() -> None:
    """D11's submission counter: the first notice of a desk is 1, each next one the next number."""
    desk = Desk()
    ids = [desk.submit(n) for n in range(1, 4)]
    assert [desk.desk.notices[i].seq for i in ids] == [1, 2, 3] and desk.desk.next_seq == 4


def test_a_desk_whose_clock_starts_at_zero_takes_a_look_at_zero() -> None:
    """A host embedding the reducer may start its clock at 0: a first look at 0 is neither stale nor
    before the session's settling, and makes the head ready."""
    desk = Desk(now=0)
    n = desk.ok(
        d.Submit(0, "t1", "t1/q1/question", NoticeKind.QUESTION, "q1", "mem-a1", MACHINE, "a1", 60_000, "hi")
    ).result
    assert isinstance(n, d.Notice)
    seen = desk.ok(d.Observe(0, "a1", d.Observed.IDLE))
    assert desk.reason(n.id) is d.Reason.READY and d.WriteDue("a1", n.id) in seen.effects


def test_reports_and_looks_at_the_restart_instant_are_not_from_before_it() -> None:
    """spec/delivery-v1.md: stale reports are those "with `at` before the restart"; a restart at the same
    instant as the last one is not before it either. A look at the restart instant counts, and a write's end
    reported at that instant settles the write the restart made unconfirmed."""
    desk = Desk()
    n, later = desk.submit(1), desk.submit(2)
    desk.observe(O.IDLE)
    assert isinstance(desk.start(n), Accepted)
    restart = desk.at()
    desk.ok(d.Restart(restart))
    session = desk.desk.sessions["a1"]
    assert (session.observed, session.observed_at) == (None, restart) and session.idle_after >= restart
    assert desk.state(n) is d.DeliveryState.UNCONFIRMED
    desk.ok(d.Restart(restart))
    desk.ok(d.WriteFinished(restart, n, d.WriteResult.OK))
    assert desk.state(n) is d.DeliveryState.DELIVERED
    desk.ok(d.Observe(restart, "a1", d.Observed.BUSY))
    assert desk.desk.sessions["a1"].observed is d.Observed.BUSY and desk.reason(later) is d.Reason.BUSY


def test_a_start_of_a_notice_behind_the_head_names_the_head() -> None:
    desk = Desk()
    head, behind = desk.submit(1), desk.submit(2)
    desk.observe(O.IDLE)
    refused = desk.fails(d.WriteStarted(desk.at(), behind, O.IDLE, desk.now - 1), ErrorCode.CONFLICT)
    assert refused.detail == f"notice {head!r} is next for agent 'a1'"


def test_the_write_boundary_checks_admit_their_exact_limits() -> None:
    """spec/delivery-v1.md's boundary check: "`seenAt <= at` and `at - seenAt <= observation_fresh_ms`";
    `seenAt` "no older than the desk's latest observation of the session, and not before `idleAfter`";
    "`at < expiresAt`". Each limit is admitted exactly at it and refused a millisecond past it, on a clock of
    real epoch milliseconds; the write's look becomes the session's latest, idle, even over a busy one."""
    fresh = DEFAULT_LIMITS.observation_fresh_ms
    epoch = 1_764_000_000_000

    def ready(expires_in: int = 60_000) -> tuple[Desk, str, int]:
        desk = Desk(now=epoch)
        n = desk.submit(1, expires_at=desk.now + expires_in)
        desk.observe(O.BUSY)
        return desk, n, desk.now

    desk, n, busy_at = ready()
    desk.ok(d.WriteStarted(busy_at, n, O.IDLE, busy_at))  # seen at the start, at the busy look's instant
    assert desk.desk.sessions["a1"].observed is O.IDLE
    desk, n, busy_at = ready()
    desk.ok(d.WriteStarted(busy_at + fresh, n, O.IDLE, busy_at))
    desk, n, busy_at = ready()
    old = desk.fails(d.WriteStarted(busy_at + fresh + 1, n, O.IDLE, busy_at), ErrorCode.CONFLICT)
    assert old.detail == f"the idle screen is {fresh + 1} ms old; look again"
    desk, n, busy_at = ready()
    desk.fails(d.WriteStarted(busy_at, n, O.IDLE, busy_at + 1), ErrorCode.BAD_REQUEST)
    desk, n, _ = ready(expires_in=1_000)
    expires_at = desk.desk.notices[n].expires_at
    desk.fails(d.WriteStarted(expires_at, n, O.IDLE, expires_at - 1), ErrorCode.EXPIRED)
    desk, n, _ = ready(expires_in=1_000)
    desk.ok(d.WriteStarted(expires_at - 1, n, O.IDLE, expires_at - 2))
    # Exactly at idleAfter: the settling of the last write ends there.
    desk = Desk(now=epoch)
    first, second = desk.submit(1), desk.submit(2)
    desk.write(first)
    settled = desk.desk.sessions["a1"].idle_after
    desk.ok(d.Observe(settled - 5, "a1", O.IDLE))
    unsettled = d.WriteStarted(settled, second, O.IDLE, settled - 1)  # after the look, before the settling
    assert "predates the settling" in desk.fails(unsettled, ErrorCode.CONFLICT).detail
    desk.ok(d.Observe(settled, "a1", O.IDLE))
    stale = d.WriteStarted(settled, second, O.IDLE, settled - 1)  # now older than the desk's latest look
    assert "older than the desk's latest observation" in desk.fails(stale, ErrorCode.CONFLICT).detail
    desk.ok(d.WriteStarted(settled, second, O.IDLE, settled))


def test_releasing_one_paused_team_leaves_another_paused_teams_notices_held() -> None:
    """D7: while a team is held none of its notices is queued; a release is of its own team only."""
    desk = Desk()
    mine, theirs = desk.submit(1, team="t1"), desk.submit(2, team="t2")
    desk.ok(d.Hold(desk.at(), "t1"))
    desk.ok(d.Hold(desk.at(), "t2"))
    desk.ok(d.Release(desk.at(), "t1"))
    assert (desk.state(mine), desk.state(theirs)) == (d.DeliveryState.QUEUED, d.DeliveryState.HELD)


def test_a_tick_over_a_session_with_nothing_due_changes_nothing() -> None:
    """A session whose notices are all written has no timer; a tick passes it by (`step` never raises)."""
    desk = Desk()
    n = desk.submit(1)
    desk.write(n)
    desk.ok(d.TurnObserved(desk.at(), n))
    assert desk.desk.sessions["a1"].timers == ()
    ticked = desk.ok(d.Tick(desk.at()))
    assert not ticked.changed and ticked.state is desk.desk


def test_an_inbox_read_answers_with_the_notices_it_read() -> None:
    desk = Desk()
    n = desk.submit(1)
    read = desk.ok(d.InboxRead(desk.at(), (n, "t1/q9/question")))
    assert read.result == (desk.desk.notices[n],) and desk.state(n) is d.DeliveryState.WITHDRAWN
