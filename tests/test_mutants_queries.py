# Issue 19: behaviours of core/queries.py that scripts/mutate_core.py found no test pinned: the words a wait
# returns, whose answers an inbox shows and in which order, whose incoming questions break an owner's wait,
# and which delivery view a notice id names.
from __future__ import annotations

import attrs

from harness.core import commands as c
from harness.core.effects import notice_id
from harness.core.limits import Limits
from harness.core.queries import WaitReason, decide_wait, delivery_view, inbox, waiter_for
from harness.core.records import NoticeKind
from tests.team_helpers import TEAM, Driver

Q, A, INTRO = NoticeKind.QUESTION, NoticeKind.ANSWER, NoticeKind.INTRODUCTION


def test_a_wait_returns_one_of_five_contract_words() -> None:
    """spec/team-v1.md: `answered`, `incoming`, `cancelled`, `expired` or `timeout`: what a shell reads."""
    assert [reason.value for reason in WaitReason] == [
        "answered",
        "incoming",
        "timeout",
        "cancelled",
        "expired",
    ]


def test_a_wait_on_a_cancelled_or_expired_question_says_so() -> None:
    """Seed: "Offline, unpaired, busy, draft, expired, cancelled, and uncertain states are visible"."""
    d = Driver().create(members=2)
    d.ask("q1", 1, 2, ttl_ms=10_000)
    d.ask("q2", 1, 2)
    d.ok(c.Cancel(d.tick(), TEAM, "q2", member_key="key1"))
    d.ok(c.Tick(d.tick(20_000), TEAM))
    until = d.now + 30_000
    for qid, reason in (("q1", WaitReason.EXPIRED), ("q2", WaitReason.CANCELLED)):
        decision = decide_wait(d.team, "mem1", d.exchange(qid), d.now, until, since=d.now)
        assert decision is not None and decision.reason is reason and decision.exchange == d.exchange(qid)


def test_an_inbox_shows_answers_to_the_members_own_questions_newest_answer_first() -> None:
    """Seed: "`inbox` reads pending questions and recent answers". Recent is by answer time, not by the order
    the questions were asked; another member's answers and one's own open questions are not shown."""
    d = Driver(limits=Limits(recent_answers=2)).create(members=3)
    d.ask("q1", 1, 2)
    d.ask("q2", 1, 3)
    d.ask("q3", 1, 2)
    d.ask("q4", 2, 3)  # another member's question, answered
    d.ask("q5", 1, 3)  # mem1's own, never answered
    d.reply("q2", 3)
    d.reply("q4", 3)
    d.reply("q1", 2)
    d.reply("q3", 2)
    mem1 = d.team.members["mem1"]
    assert [e.id for e in inbox(d.team, mem1, Limits()).answers] == ["q3", "q1", "q2"]
    assert [e.id for e in inbox(d.team, mem1, d.limits).answers] == ["q3", "q1"]
    d2 = Driver().create(members=3)
    d2.ask("q1", 1, 2)
    d2.ask("q2", 1, 3)
    d2.reply("q2", 3)
    d2.reply("q1", 2)  # asked first, answered last: it is the newest answer
    assert [e.id for e in inbox(d2.team, d2.team.members["mem1"]).answers] == ["q1", "q2"]


def test_the_owners_wait_is_broken_by_the_askers_incoming_questions() -> None:
    d = Driver().create(members=3)
    d.ask("q1", 1, 2)
    assert waiter_for(d.team, None, d.exchange("q1")) == "mem1"
    assert waiter_for(d.team, d.team.members["mem3"], d.exchange("q1")) == "mem3"


def test_a_notice_id_names_its_delivery_view_and_nothing_else() -> None:
    d = Driver().create(members=2)
    d.ask("q1", 1, 2)
    d.reply("q1", 2)
    for subject, kind, state in (("mem2", INTRO, "delivered"), ("q1", Q, "read"), ("q1", A, "queued")):
        d.ok(c.RecordDelivery(d.tick(), TEAM, notice_id(TEAM, subject, kind), state))
    team = d.team
    assert delivery_view(team, notice_id(TEAM, "mem2", INTRO)) == team.members["mem2"].introduction
    assert team.members["mem2"].introduction is not None
    assert team.members["mem2"].introduction.state == "delivered"
    question, answer = (
        delivery_view(team, notice_id(TEAM, "q1", Q)),
        delivery_view(team, notice_id(TEAM, "q1", A)),
    )
    assert question == team.exchanges["q1"].delivery and question is not None and question.state == "read"
    assert answer == team.exchanges["q1"].answer_delivery and answer is not None and answer.state == "queued"
    assert delivery_view(team, notice_id(TEAM, "mem1", INTRO)) is None  # introduced, nothing recorded yet
    for unknown in (
        notice_id("t2", "q1", Q),  # another team's
        notice_id(TEAM, "nobody", INTRO),
        notice_id(TEAM, "q9", Q),
        notice_id(TEAM, "q9", A),
        "t1/q1",
        "garbage",
    ):
        assert delivery_view(team, unknown) is None, unknown
    other = attrs.evolve(team, id="t2")
    assert delivery_view(other, notice_id(TEAM, "q1", Q)) is None
