# Issue 19: behaviours of core/session.py that scripts/mutate_core.py found no test pinned (seed 0,
# sample 40).
from __future__ import annotations

import attrs

from harness.core import session as s
from harness.core.errors import ErrorCode as E
from tests.test_session_examples import LIMITS, T0, Driver


def test_an_over_long_id_names_the_bound_it_exceeds() -> None:
    """The refusal of a too-long id says which bound (`id_chars`), as every bound_exceeded does."""
    long = "x" * (LIMITS.id_chars + 1)
    refused = Driver().fails(E.BOUND_EXCEEDED, s.Start(T0, long, s.Mode.DISCUSS, "lead", ("a",)))
    assert refused.bound == "id_chars"


def test_a_turn_of_a_stranger_is_not_found() -> None:
    d = Driver()
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    refused = d.fails(E.NOT_FOUND, s.TurnStarted(T0, "stranger"))
    assert refused.detail == "no member 'stranger' in session 'sess'"


# --- branches coverage showed no core test taking (scripts/coverage_core.sh) -------------------------------


def _discuss(limits: s.SessionLimits = LIMITS) -> Driver:
    d = Driver(limits)
    d.start(s.Mode.DISCUSS, "lead", "ann", "ben")
    return d


def test_an_over_long_summary_text_or_comment_is_refused_naming_text_chars() -> None:
    long = "x" * (LIMITS.text_chars + 1)
    d = _discuss()
    assert d.fails(E.BOUND_EXCEEDED, s.Recess(d.now, "lead", long)).bound == "text_chars"
    assert d.fails(E.BOUND_EXCEEDED, s.RequestForComment(d.now, "ann", "r1", long)).bound == "text_chars"
    assert d.fails(E.BOUND_EXCEEDED, s.Acknowledge(d.now, "ben", "k1", long)).bound == "text_chars"


def test_a_full_thread_refuses_an_acknowledgement_and_keeps_answers_in_the_ledger_only() -> None:
    d = _discuss(attrs.evolve(LIMITS, thread_posts=1))
    d.ask("lead", op="q1")
    d.ok(s.Acknowledge(d.now, "ann", "k1", "on it"))
    assert d.fails(E.BOUND_EXCEEDED, s.Acknowledge(d.now, "ben", "k2", "me too")).bound == "thread_posts"
    answered = d.ok(s.AskAnswered(d.now, "q1:ann"))
    assert answered.effects == () and d.state.asks["q1:ann"].state is s.AskState.ANSWERED
    assert [post.id for post in d.state.thread] == ["k1"]


def test_an_answer_to_no_session_ask_changes_nothing() -> None:
    d = _discuss()
    before = d.state
    outcome = d.ok(s.AskAnswered(d.now, "not-ours"))
    assert not outcome.changed and d.state is before
