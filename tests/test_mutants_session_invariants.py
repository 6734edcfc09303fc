# Issue 19: behaviours of core/session_invariants.py that scripts/mutate_core.py found no test pinned (seed 0,
# sample 40): checks that could be deleted, or report under no code, and no session test failed. Each test
# takes a reachable session or step, breaks exactly one rule in it, and shows the check reports that rule.
from __future__ import annotations

import attrs
import pytest

from harness.core import errors
from harness.core import session as s
from harness.core.outcome import Accepted
from harness.core.session_invariants import Violation, check_step, session_violations, step_violations
from tests.test_session_examples import LIMITS, MIN, T0, Driver, effects_of


def facilitated() -> Driver:
    d = Driver()
    d.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    return d


def codes(found: list[Violation], code: str) -> list[str]:
    return [detail for invariant, detail in found if invariant == code]


def released() -> tuple[Driver, s.Session, Accepted[s.Session]]:
    """A session whose ask to alice went unanswered past its reminder and grace, the session before that
    tick and the tick's outcome: released, a violation."""
    d = facilitated()
    d.ask("chair", op="q1")
    d.ok(s.AskAnswered(T0 + MIN, "q1:bob"))
    d.tick(T0 + 5 * MIN)
    reminded = d.state
    return d, reminded, d.tick(T0 + 10 * MIN)


def test_s1_names_an_over_long_announcement_and_an_absent_summary_is_no_text() -> None:
    d = facilitated()
    d.ok(s.Announce(d.now, "chair", "a1", "four"))
    assert session_violations(d.state, attrs.evolve(LIMITS, announcement_chars=3)) == [
        ("S1", "an announcement exceeds announcement_chars")
    ]
    assert session_violations(facilitated().state, attrs.evolve(LIMITS, text_chars=0)) == []


def test_s5_an_rfc_by_a_role_without_that_tool() -> None:
    d = facilitated()
    d.ok(s.RequestForComment(d.now, "alice", "r1", "open a thread"))
    forged = attrs.evolve(d.state, rfcs=tuple(attrs.evolve(r, author="chair") for r in d.state.rfcs))
    (detail,) = codes(session_violations(forged), "S5")
    assert detail.startswith("'chair' made a ")


def test_s6_released_asks_must_be_the_violations_once_each() -> None:
    d, _, _ = released()
    assert session_violations(d.state) == []
    doubled = attrs.evolve(d.state, violations=("q1:alice", "q1:alice"))
    assert codes(session_violations(doubled), "S6") == [
        "released asks ['q1:alice'] are not the violations ('q1:alice', 'q1:alice')"
    ]


def test_s6_a_reminder_before_reminder_after_ms() -> None:
    d, _, _ = released()
    ask = d.state.asks["q1:alice"]
    early = attrs.evolve(ask, reminded_at=ask.created_at + LIMITS.reminder_after_ms - 1)
    found = session_violations(attrs.evolve(d.state, asks=d.state.asks.set(ask.id, early)))
    assert "ask 'q1:alice' was reminded early" in codes(found, "S6")


def test_s7_an_ask_listed_twice_and_a_member_missing_from_the_order() -> None:
    d = facilitated()
    d.ask("chair", to="alice", op="q1")
    twice = attrs.evolve(d.state, ask_order=(*d.state.ask_order, *d.state.ask_order))
    assert "the ask order does not list every ask once" in codes(session_violations(twice), "S7")
    missing = attrs.evolve(d.state, member_order=d.state.member_order[:-1])
    assert ("S7", "the member order does not list every member once") in session_violations(missing)


def test_s10_announcements_change_only_by_their_call() -> None:
    """S10: "no announcement without an explicit Announce"."""
    d = facilitated()
    before = d.state
    call = s.Announce(d.now, "chair", "a1", "hello")
    announced = d.ok(call)
    after = announced.state
    tick = s.Tick(d.now)
    assert ("S10", "a recorded announcement changed or vanished") in step_violations(
        after, tick, Accepted(before)
    )
    assert codes(step_violations(before, tick, Accepted(after)), "S10") == [
        f"Tick announced {after.announcements} []"
    ]
    silent = attrs.evolve(announced, effects=())
    assert codes(step_violations(before, call, silent), "S10") == [
        f"one Announce made announcements {after.announcements} and posts []"
    ]
    note = attrs.evolve(after.announcements[0], text="something else")
    forged = Accepted(attrs.evolve(after, announcements=(note,)), announced.result, announced.effects)
    assert "announcement 'a1' is not the call's" in codes(step_violations(before, call, forged), "S10")


def test_s11_an_ending_has_its_summary_and_cancels_with_the_visible_reason() -> None:
    d = facilitated()
    d.ask("chair", to="alice", op="q1")
    before = d.state
    conclude = s.Conclude(d.now, "chair", "done")
    ended = d.ok(conclude)
    assert step_violations(before, conclude, ended) == []
    no_summary = [
        e for e in ended.effects if not (isinstance(e, s.TraceEvent) and e.kind is s.TraceKind.SUMMARY)
    ]
    found = step_violations(before, conclude, attrs.evolve(ended, effects=tuple(no_summary)))
    assert ("S11", "0 summaries for a step that ended the session: True") in found
    (cancel,) = effects_of(ended, s.CancelAsk)
    ask = ended.state.asks[cancel.question_id]
    other = attrs.evolve(
        ended.state, asks=ended.state.asks.set(ask.id, attrs.evolve(ask, reason="elsewhere"))
    )
    found = step_violations(before, conclude, attrs.evolve(ended, state=other))
    assert f"ask {ask.id!r} was cancelled without its visible reason" in codes(found, "S11")


def test_s12_reminders_stay_recorded_and_each_violation_releases_its_asker() -> None:
    d, reminded, release = released()
    forgotten = attrs.evolve(d.state, reminders=())
    assert ("S12", "a reminder vanished from the record") in step_violations(
        d.state, s.Tick(d.now), Accepted(forgotten)
    )
    assert step_violations(reminded, s.Tick(d.now), release) == []
    kept = tuple(e for e in release.effects if not isinstance(e, s.ReleaseAsker))
    found = step_violations(reminded, s.Tick(d.now), attrs.evolve(release, effects=kept))
    assert "violations [('alice', 'q1:alice')], releases [], recorded ['q1:alice']" in codes(found, "S12")


def test_s13_an_ended_session_never_changes() -> None:
    d = facilitated()
    d.ok(s.Conclude(d.now, "chair", "done"))
    changed = attrs.evolve(d.state, summary="rewritten")
    assert ("S13", "an ended session changed") in step_violations(d.state, s.Tick(d.now), Accepted(changed))


def test_s14_an_unchanged_outcome_is_the_same_session_and_a_repeat_gives_the_same_result() -> None:
    d = facilitated()
    before = d.state
    moved = attrs.evolve(before, lead_turns=before.lead_turns + 1)
    found = step_violations(before, s.Tick(d.now), Accepted(moved, changed=False))
    assert ("S14", "an unchanged outcome carries a different session") in found
    call = s.Announce(d.now, "chair", "a1", "hello")
    announced = d.ok(call)
    forged = attrs.evolve(announced, result="another result")
    (detail,) = codes(step_violations(before, call, forged), "S14")
    assert detail.startswith("repeating operation 'a1' gave ")


def asked() -> s.Session:
    d = facilitated()
    d.ask("chair", to="alice", op="q1")
    return d.state


def forge_ask(session: s.Session, **changes: object) -> s.Session:
    ask = session.asks["q1"]
    return attrs.evolve(session, asks=session.asks.set("q1", attrs.evolve(ask, **changes)))


def forge_role(session: s.Session) -> s.Session:
    chair = attrs.evolve(session.members["chair"], role=s.Role.FACILITATED_AGENT)
    return attrs.evolve(session, members=session.members.set("chair", chair))


FORGED = {
    "S2": (lambda st: attrs.evolve(st, reminders=("q1", "q1")), "an ask was reminded twice"),
    "S4 marks": (lambda st: attrs.evolve(st, termination=s.Termination.CONCLUDED), "state running with"),
    "S4 flying": (
        lambda st: attrs.evolve(
            st, state=s.SessionState.ENDED, termination=s.Termination.CONCLUDED, reason="r", ended_at=T0
        ),
        "the session concluded with asks ['q1'] in flight",
    ),
    "S5 order": (
        lambda st: attrs.evolve(st, member_order=st.member_order[::-1]),
        "the lead is not the first",
    ),
    "S5 role": (forge_role, "'chair' is a facilitated_agent in a facilitate session"),
    "S5 self": (lambda st: forge_ask(st, asker="alice"), "ask 'q1' from 'alice' to 'alice'"),
    "S7 filed": (lambda st: forge_ask(st, id="other"), "ask 'other' is filed under 'q1'"),
    "S7 end": (
        lambda st: forge_ask(st, state=s.AskState.ANSWERED),
        "ask 'q1' is answered with end",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_each_state_invariant_reports_its_own_forgery(case: str) -> None:
    forge, detail = FORGED[case]
    assert session_violations(asked()) == []
    found = session_violations(forge(asked()))
    assert any(code == case.split(maxsplit=1)[0] and text.startswith(detail) for code, text in found), found


def test_s1_counts_against_each_bound_and_check_step_raises() -> None:
    session = asked()
    assert ("S1", "2 participants; bound 1") in session_violations(
        session, attrs.evolve(LIMITS, participants=1)
    )
    with pytest.raises(errors.ProtocolViolation) as raised:
        check_step(session, s.Tick(T0), Accepted(forge_role(session), changed=False))
    assert raised.value.invariant == "S5"


def test_step_invariants_report_their_forgeries() -> None:
    """S15, S1 (texts), S11, S12, S13, each from one reachable step with one thing taken away or added."""
    d = Driver()
    start = s.Start(T0, "sess", s.Mode.FACILITATE, "chair", ("alice", "bob"))
    started = d.ok(start)
    untraced = attrs.evolve(started, effects=())
    assert codes(step_violations(None, start, untraced), "S15") == ["a session began from Start traced []"]
    (detail,) = codes(step_violations(None, s.Tick(T0), started), "S15")
    assert detail.startswith("a session began from Tick traced ")
    d.ok(s.RequestForComment(d.now, "alice", "r1", "open a thread"))
    short = attrs.evolve(LIMITS, text_chars=3)
    assert ("S1", "a recorded text exceeds text_chars") in session_violations(d.state, short)
    d.ask("chair", to="alice", op="q1")
    before, tick = d.state, s.Tick(d.now)
    cancelled = Accepted(before, effects=(s.CancelAsk("q1", "why"),), changed=False)
    assert codes(step_violations(before, tick, cancelled), "S11")[0].startswith("asks cancelled while")
    ended = d.ok(s.Conclude(d.now, "chair", "done"))
    assert "Tick ended the session concluded" in codes(step_violations(before, tick, ended), "S11")
    gone = attrs.evolve(before, asks=before.asks.delete("q1"), ask_order=())
    assert "ask 'q1' vanished" in codes(step_violations(before, tick, Accepted(gone)), "S13")
    r = Driver()
    r.start(s.Mode.FACILITATE, "chair", "alice", "bob")
    r.ask("chair", to="alice", op="q1")
    asked_state = r.state
    reminding = r.tick(T0 + 5 * MIN)
    unsent = attrs.evolve(reminding, effects=())
    found = step_violations(asked_state, s.Tick(r.now), unsent)
    assert "reminders [] are not the new reminders ('q1',)" in codes(found, "S12")


def test_s9_a_tool_the_callers_role_lacks_is_reported() -> None:
    session = asked()
    found = step_violations(session, s.Conclude(T0, "alice", "done"), Accepted(session, changed=False))
    assert codes(found, "S9") == ["'alice' was allowed conclude as a facilitated_agent"]


def test_an_order_naming_a_missing_ask_is_reported_not_a_crash() -> None:
    """Found by the mutation work: S2 indexed `asks` by every id of `ask_order` and raised KeyError."""
    session = asked()
    broken = attrs.evolve(session, ask_order=(*session.ask_order, "q-missing"))
    assert "the ask order does not list every ask once" in codes(session_violations(broken), "S7")


def test_s6_a_release_not_for_no_answer() -> None:
    d, _, _ = released()
    ask = d.state.asks["q1:alice"]
    other = attrs.evolve(ask, reason="concluded")
    found = session_violations(attrs.evolve(d.state, asks=d.state.asks.set(ask.id, other)))
    assert "ask 'q1:alice' was released without its reminder and grace, or not for no_answer" in codes(
        found, "S6"
    )


def test_s13_an_ended_ask_never_changes() -> None:
    d, reminded, _ = released()
    answered = reminded.asks["q1:bob"]
    rewritten = attrs.evolve(answered, reason="rewritten")
    changed = attrs.evolve(reminded, asks=reminded.asks.set(answered.id, rewritten))
    found = step_violations(reminded, s.Tick(d.now), Accepted(changed))
    assert ("S13", "ended ask 'q1:bob' changed") in found


def test_s7_an_operation_filed_under_another_id() -> None:
    session = asked()
    op, command = next(iter(session.operations.items()))
    misfiled = attrs.evolve(session, operations=session.operations.delete(op).set("elsewhere", command))
    assert f"operation {op!r} is filed under 'elsewhere'" in codes(session_violations(misfiled), "S7")


def test_s11_a_conclusion_that_leaves_an_ask_uncancelled() -> None:
    d = facilitated()
    d.ask("chair", to="alice", op="q1")
    before = d.state
    concluded = d.ok(s.Conclude(d.now, "chair", "done"))
    kept = tuple(e for e in concluded.effects if not isinstance(e, s.CancelAsk))
    found = step_violations(before, s.Conclude(d.now, "chair", "done"), attrs.evolve(concluded, effects=kept))
    assert any(why.startswith("in flight ['q1']") for why in codes(found, "S11")), found


def test_s12_a_reminder_sent_to_someone_else() -> None:
    d = facilitated()
    d.ask("chair", to="alice", op="q1")
    before = d.state
    reminded = d.tick(T0 + 5 * MIN)
    moved = tuple(
        attrs.evolve(e, participant="bob") if isinstance(e, s.SubmitReminder) else e for e in reminded.effects
    )
    found = step_violations(before, s.Tick(d.now), attrs.evolve(reminded, effects=moved))
    assert "the reminder for 'q1' went to 'bob', not its addressee" in codes(found, "S12")
