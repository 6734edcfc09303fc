# Issue 19: behaviours of core/queries.py that scripts/mutate_core.py found no test pinned: the words a wait
# returns, whose answers an inbox shows and in which order, whose incoming questions break an owner's wait,
# which delivery view a notice id names, and what `usage` and `desk_usage` report of each bound.
from __future__ import annotations

import attrs

from harness.core import commands as c
from harness.core.delivery import Submit, empty_desk
from harness.core.delivery import step as desk_step
from harness.core.effects import notice_id
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import MINUTE_MS, Limits
from harness.core.outcome import Accepted
from harness.core.queries import (
    ADVICE,
    BoundUse,
    WaitReason,
    decide_wait,
    delivery_view,
    desk_usage,
    inbox,
    usage,
    waiter_for,
)
from harness.core.records import NoticeKind
from tests.team_helpers import TEAM, Driver, member

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


def test_a_wait_without_a_beginning_counts_every_open_question_as_news() -> None:
    """decide_wait: "`since` 0 makes every open question news", even one asked at time 0 and already shown
    to the waiter."""
    d = Driver(now=0)
    d.ok(c.CreateTeam(0, TEAM, "T", (member(1), member(2))))
    d.ok(c.Ask(0, TEAM, "q1", "mem2", "Which endpoint?", member_key="key1"))
    d.ok(c.Ask(0, TEAM, "q2", "mem1", "Which port?", member_key="key2"))
    decision = decide_wait(d.team, "mem2", d.exchange("q2"), 0, 30_000, seen=frozenset({"q1"}))
    assert decision is not None and decision.reason is WaitReason.INCOMING and decision.news == ("q1",)


# --- usage: every bound by name, with its use, whose it is, and the advice for it ---------------------------

SMALL = Limits(teams=5, memberships=5, exchanges=10, pending_per_sender=5, asks_per_minute=5, parent_chain=5)


def test_usage_names_each_bound_with_its_use_and_whose_it_is_for_the_owner_and_for_a_member() -> None:
    """Issue 16, item 13: bounds are visible before they bite. The owner sees its teams and every member's
    open questions; a member only its own, and the chains it may read; nobody's count of zero names anyone."""
    d = Driver(SMALL).create(members=3)
    start = d.now + 1
    d.ok(c.Ask(start, TEAM, "q1", "mem2", "x", member_key="key1"))
    d.ok(c.Ask(start + 1, TEAM, "q2", "mem3", "x", member_key="key1"))
    owner = usage(d.ledger, TEAM, SMALL, start + 1)
    assert owner == (
        BoundUse("teams", 1, 5),
        BoundUse("memberships", 3, 5),
        BoundUse("exchanges", 2, 10),
        BoundUse("pending_per_sender", 2, 5, "mem1"),
        BoundUse("asks_per_minute", 2, 5),
        BoundUse("parent_chain", 1, 5, "q1"),
    )
    assert all(row.advice == ADVICE[row.bound] for row in owner)
    member2 = usage(d.ledger, TEAM, SMALL, start + 1, d.team.members["mem2"])
    assert member2 == (
        BoundUse("memberships", 3, 5),
        BoundUse("exchanges", 2, 10),
        BoundUse("pending_per_sender", 0, 5, None),
        BoundUse("asks_per_minute", 2, 5),
        BoundUse("parent_chain", 1, 5, "q1"),
    )
    missing = usage(d.ledger, "nope", SMALL, start)
    assert isinstance(missing, Rejected) and missing.code is ErrorCode.NOT_FOUND


def test_usage_counts_the_asks_of_the_last_sixty_seconds_only() -> None:
    """The same rolling minute as the ask's rate limit: an ask exactly 60 s old no longer counts."""
    d = Driver(SMALL).create(members=3)
    start = d.now + 1
    d.ok(c.Ask(start, TEAM, "q1", "mem2", "x", member_key="key1"))
    d.ok(c.Ask(start + 1, TEAM, "q2", "mem3", "x", member_key="key1"))

    def recent(now: int) -> int:
        found = usage(d.ledger, TEAM, SMALL, now)
        assert not isinstance(found, Rejected)
        return {row.bound: row.use for row in found}["asks_per_minute"]

    assert [recent(start + MINUTE_MS - 1), recent(start + MINUTE_MS), recent(start + MINUTE_MS + 1)] == [
        2,
        1,
        0,
    ]


def test_a_bound_warns_from_80_percent_and_a_zero_limit_is_full() -> None:
    assert [BoundUse("exchanges", use, 5).warning for use in (3, 4)] == [False, True]
    assert BoundUse("exchanges", 3, 4).ratio == 0.75
    assert BoundUse("exchanges", 3, 0).ratio == 1.0
    assert BoundUse("exchanges", 2, 1).ratio == 2.0  # a limit lowered below the use shows the overrun
    assert BoundUse("queued_per_agent", 1, 2).advice == ADVICE["queued_per_agent"]


def test_the_desk_counts_only_the_active_local_members_sessions() -> None:
    """desk_usage: the busiest session among the team's ACTIVE members on THIS machine. A removed member's
    session, a session of another machine's member that happens to share an agent id, and a member with no
    session here are not the team's use."""
    d = Driver(SMALL).create(members=2)
    d.ok(c.AddMember(d.tick(), TEAM, attrs.evolve(member(3), agent_id="agent9", machine_id="m-two")))
    d.ok(c.AddMember(d.tick(), TEAM, member(4)))
    desk = empty_desk("m-one")
    for n, (agent, membership) in enumerate(
        [("agent1", "mem1"), *[("agent2", "mem2")] * 2, *[("agent9", "x")] * 3]
    ):
        submit = Submit(d.now, TEAM, f"{TEAM}/q{n}/question", Q, f"q{n}", membership, "m-one", agent,
                        d.now + MINUTE_MS, "notice")  # fmt: skip
        outcome = desk_step(desk, submit)
        assert isinstance(outcome, Accepted), outcome
        desk = outcome.state
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    rows = desk_usage(desk, d.team, SMALL)
    assert rows == (
        BoundUse("delivery_records", 6, SMALL.delivery_records),
        BoundUse("queued_per_agent", 1, SMALL.queued_per_agent, "mem1"),
    )
    assert [row.advice for row in rows] == [ADVICE["delivery_records"], ADVICE["queued_per_agent"]]
    owner = usage(d.ledger, TEAM, SMALL, d.now)
    assert not isinstance(owner, Rejected)
    assert list(ADVICE) == [row.bound for row in (*owner, *rows)]  # advice for every bound reported, in order
    # A member sees no count of every team's records: it rose with other teams' questions (an adversarial
    # review watched team B's asks from team A's `usage`).
    assert desk_usage(desk, d.team, SMALL, d.team.members["mem4"]) == (
        BoundUse("queued_per_agent", 0, SMALL.queued_per_agent),
    )


def test_an_inbox_lists_only_the_open_questions_addressed_to_the_member() -> None:
    """Seed: "`inbox` reads pending questions": not another member's open question, nor an answered one."""
    d = Driver().create(members=3)
    d.ask("q1", 1, 2)
    d.ask("q2", 1, 3)
    d.ask("q3", 3, 2)
    d.reply("q3", 2)
    assert [e.id for e in inbox(d.team, d.team.members["mem2"]).questions] == ["q1"]
