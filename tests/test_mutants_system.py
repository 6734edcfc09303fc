# Issue 19: behaviours of core/system.py that scripts/mutate_core.py found no test pinned: what the owner
# records when a destination refuses a routed notice, and the desk command each withdrawal becomes.
from __future__ import annotations

from typing import Any

import attrs
import pytest

from harness.core import commands as c
from harness.core import delivery as d
from harness.core import effects as fx
from harness.core.effects import notice_id
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, DeliveryView, Ledger, NoticeKind
from harness.core.system import (
    AtDesk,
    NoticeContent,
    RouteRefused,
    System,
    Teammate,
    answer_retrieved_action,
    content_problem,
    desk_command,
    inbox_read_action,
    step_system,
)
from tests.team_helpers import TEAM, Driver, member


def test_a_notice_the_desk_refuses_is_recorded_rejected_with_the_bound_it_hit() -> None:
    """Seed: "Distinguish queued, delivered, started, rejected, and unknown." A full queue refuses the
    question's notice; the owner sees it rejected, naming the bound, never as silent loss."""
    limits = Limits(queued_per_agent=1)  # the introduction already fills agent2's queue
    created = step_system(System(), c.CreateTeam(1_000, TEAM, "T", (member(1), member(2))), limits)
    assert isinstance(created, Accepted)
    asked = step_system(created.state, c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="key1"), limits)
    assert isinstance(asked, Accepted)
    refused = [e for e in asked.events if isinstance(e, RouteRefused)]
    assert [(e.machine_id, e.rejected.bound) for e in refused] == [("m-one", "queued_per_agent")]
    exchange = asked.state.ledger.teams[TEAM].exchanges["q1"]
    assert exchange.delivery == DeliveryView("rejected", "queued_per_agent", 1_001)


def test_each_team_wide_effect_becomes_its_desk_command() -> None:
    at = 5
    for effect, command in (
        (fx.WithdrawTeam(TEAM), d.WithdrawTeam(at, TEAM)),
        (fx.WithdrawMember(TEAM, "mem2"), d.WithdrawMember(at, TEAM, "mem2")),
        (fx.HoldTeam(TEAM), d.Hold(at, TEAM)),
        (fx.ReleaseTeam(TEAM), d.Release(at, TEAM)),
    ):
        assert desk_command(EMPTY_LEDGER, effect, at, DEFAULT_LIMITS) == command


def test_a_withdrawal_says_why_the_question_ended_and_is_a_cancellation_when_unknown() -> None:
    w = Driver().create(members=3)
    w.ask("q1", 1, 2)
    w.reply("q1", 2)
    w.ask("q2", 1, 3, ttl_ms=10_000)
    w.ok(c.Tick(w.tick(20_000), TEAM))
    w.ask("q3", 1, 2)
    w.ok(c.Cancel(w.tick(), TEAM, "q3", member_key="key1"))

    def reason(ledger: Ledger, team_id: str, notice: str) -> d.Reason:
        command = desk_command(ledger, fx.WithdrawNotice(team_id, notice), 9, DEFAULT_LIMITS)
        assert isinstance(command, d.Withdraw) and command.notice_id == notice and command.at == 9
        return command.reason

    question = NoticeKind.QUESTION
    assert reason(w.ledger, TEAM, notice_id(TEAM, "q1", question)) is d.Reason.ANSWERED
    assert reason(w.ledger, TEAM, notice_id(TEAM, "q2", question)) is d.Reason.EXPIRED
    assert reason(w.ledger, TEAM, notice_id(TEAM, "q3", question)) is d.Reason.CANCELLED
    assert reason(w.ledger, TEAM, notice_id(TEAM, "q9", question)) is d.Reason.CANCELLED  # no such question
    assert reason(w.ledger, TEAM, "not a notice id") is d.Reason.CANCELLED
    assert reason(EMPTY_LEDGER, TEAM, notice_id(TEAM, "q1", question)) is d.Reason.CANCELLED  # no such team


def test_a_retrieved_answer_tells_the_askers_desk_and_nothing_else_does() -> None:
    """Seed: "A retrieved answer suppresses an unsent continuation notice." The asker's machine is told;
    an unanswered, unknown or other team's question tells no one."""
    w = Driver().create(members=2)
    w.ok(c.AddMember(w.tick(), TEAM, member(3, machine="m-two")))
    w.ask("q1", 3, 1)
    w.reply("q1", 1)
    w.ask("q2", 3, 2)
    system = System(ledger=w.ledger)
    retrieved = answer_retrieved_action(system, TEAM, "q1", 77)
    assert retrieved == AtDesk("m-two", d.AnswerRetrieved(77, notice_id(TEAM, "q1", NoticeKind.ANSWER)))
    assert answer_retrieved_action(system, TEAM, "q2", 77) is None
    assert answer_retrieved_action(system, TEAM, "q9", 77) is None
    assert answer_retrieved_action(system, "t9", "q1", 77) is None


def test_an_inbox_read_tells_the_readers_desk_every_notice_it_made_moot() -> None:
    """Seed: "Reading/claiming an inbox item suppresses an unsent terminal notice." The member's
    introduction, its open questions and its recent answers; nothing for an unknown team or member."""
    w = Driver().create(members=3)
    w.ask("q1", 2, 1)
    w.reply("q1", 1)
    w.ask("q2", 3, 2)
    system = System(ledger=w.ledger)
    ids = (
        notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION),
        notice_id(TEAM, "q2", NoticeKind.QUESTION),
        notice_id(TEAM, "q1", NoticeKind.ANSWER),
    )
    assert inbox_read_action(system, TEAM, "mem2", 88) == AtDesk("m-one", d.InboxRead(88, ids))
    assert inbox_read_action(system, TEAM, "mem9", 88) is None
    assert inbox_read_action(system, "t9", "mem2", 88) is None


def test_a_paired_machines_notice_text_is_bounded_by_its_kind() -> None:
    """An answer may be twice a question's length (answer_chars, question_chars); content from a paired
    machine beyond its kind's bound could not have come from a ledger."""
    limits = Limits(question_chars=10, answer_chars=20)
    answer = NoticeContent(NoticeKind.ANSWER, TEAM, "T", "q1", "agent-2", text="a" * 20)
    question = NoticeContent(NoticeKind.QUESTION, TEAM, "T", "q1", "agent-1", text="q" * 11)
    assert content_problem(answer, limits) is None
    assert content_problem(attrs.evolve(answer, text="a" * 21), limits) == "the text is longer than its bound"
    assert content_problem(question, limits) == "the text is longer than its bound"
    assert content_problem(attrs.evolve(question, text="q" * 10), limits) is None


SMALL = Limits(
    name_chars=3, memberships=3, id_chars=4, context_chars=5, evidence_refs=2, evidence_ref_chars=3
)
MATE = Teammate("m", "r")


@pytest.mark.parametrize(
    ("field", "at_bound", "beyond", "why"),
    [
        ("team_name", "abc", "abcd", "a name is longer than name_chars"),
        ("speaker", "abc", "abcd", "a name is longer than name_chars"),
        ("teammates", (MATE, MATE), (MATE, MATE, MATE), "more teammates than memberships"),
        ("team_id", "t123", "t1234", "an id is too long or not an id"),
        ("subject_id", "q123", "q 1", "an id is too long or not an id"),
        ("member_key", "kkkk", "kkkkk", "the member key is too long"),
        ("context", "ccccc", "cccccc", "the context is longer than context_chars"),
        ("evidence", ("e", "e"), ("e", "e", "e"), "more evidence than evidence_refs"),
        ("evidence", ("eee",), ("eeee",), "an evidence item is too long"),
    ],
)
def test_content_from_a_paired_machine_is_held_to_each_ledger_bound_at_its_edge(
    field: str, at_bound: Any, beyond: Any, why: str
) -> None:
    """Teammates are the other members, so a team at `memberships` has one fewer of them."""
    content = NoticeContent(NoticeKind.ANSWER, TEAM, "T", "q1", "ab", text="x")
    assert content_problem(attrs.evolve(content, **{field: at_bound}), SMALL) is None
    assert content_problem(attrs.evolve(content, **{field: beyond}), SMALL) == why
