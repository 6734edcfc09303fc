# Example tests of the team ledger: one story per rule of spec/team-v1.md, and one per error code.
from __future__ import annotations

import pytest

from harness.core import commands as c
from harness.core.codec import team_view
from harness.core.effects import ArmTimer, HoldTeam, ReleaseTeam, SubmitNotice, WithdrawNotice, WithdrawTeam
from harness.core.errors import ErrorCode as E
from harness.core.limits import Limits
from harness.core.queries import WaitReason, decide_wait, inbox, status
from harness.core.records import USER, MembershipState, NoticeKind, QuestionState, TeamState
from tests.team_helpers import TEAM, Driver, member


@pytest.fixture
def d() -> Driver:
    return Driver().create()


def notices(effects: tuple[object, ...], kind: NoticeKind) -> list[SubmitNotice]:
    return [e for e in effects if isinstance(e, SubmitNotice) and e.kind is kind]


def test_create_introduces_every_member_and_is_idempotent_by_team_id() -> None:
    d = Driver()
    first = d.ok(c.CreateTeam(1, TEAM, "Build Harness", (member(1), member(2))))
    assert [n.membership_id for n in notices(first.effects, NoticeKind.INTRODUCTION)] == ["mem1", "mem2"]
    assert d.team.revision == 1 and d.team.state is TeamState.ACTIVE
    again = d.ok(c.CreateTeam(99, TEAM, "Build Harness", (member(1), member(2))))
    assert not again.changed and again.result == d.team
    d.fails(c.CreateTeam(99, TEAM, "Another name", ()), E.CONFLICT)


def test_snapshot_never_contains_member_keys(d: Driver) -> None:
    view = repr(team_view(d.team))
    assert "key1" not in view and "key2" not in view
    assert {m["id"] for m in team_view(d.team)["members"]} == {"mem1", "mem2", "mem3"}


def test_ask_by_name_or_id_and_question_id_is_the_operation_id(d: Driver) -> None:
    out = d.ask("q1", 1, "agent-2")
    assert out.result.id == "q1" and out.result.to == "mem2" and out.result.from_ == "mem1"
    assert out.result.deadline_at == out.result.created_at + 15 * 60_000
    (notice,) = notices(out.effects, NoticeKind.QUESTION)
    assert (notice.membership_id, notice.agent_id, notice.expires_at) == (
        "mem2",
        "agent2",
        out.result.deadline_at,
    )
    assert ArmTimer(TEAM, out.result.deadline_at) in out.effects
    assert d.ask("q2", 1, 3).result.to == "mem3"


def test_repeated_ask_returns_the_same_exchange_and_conflicting_reuse_fails(d: Driver) -> None:
    first = d.ask("q1", 1, 2, "same text")
    again = d.ask("q1", 1, "agent-2", "same text")
    assert not again.changed and again.result == first.result
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem2", "other text", member_key="key1"), E.CONFLICT)
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem3", "same text", member_key="key1"), E.CONFLICT)


def test_reply_by_the_addressee_answers_and_resumes_the_asker(d: Driver) -> None:
    d.ask("q1", 1, 2)
    out = d.reply("q1", 2, "GET /state", evidence=("src/api.ts:42",))
    exchange = out.result
    assert exchange.state is QuestionState.ANSWERED
    assert (exchange.answer.author, exchange.answer.text, exchange.answer.late) == (
        "mem2",
        "GET /state",
        False,
    )
    assert WithdrawNotice(TEAM, f"{TEAM}/q1/question") in out.effects
    (cont,) = notices(out.effects, NoticeKind.ANSWER)
    assert cont.membership_id == "mem1"


def test_no_notify_means_no_continuation_notice(d: Driver) -> None:
    d.ask("q1", 1, 2, notify=False)
    assert notices(d.reply("q1", 2).effects, NoticeKind.ANSWER) == []


def test_only_the_addressee_answers(d: Driver) -> None:
    d.ask("q1", 1, 2)
    d.fails(c.Reply(d.tick(), TEAM, "q1", "me!", member_key="key3"), E.NOT_FOUND)  # not its question to see
    d.fails(c.Reply(d.tick(), TEAM, "q1", "me!", member_key="key1"), E.WRONG_MEMBER)
    d.fails(c.Reply(d.tick(), TEAM, "q1", "for 3", member_id="mem3"), E.WRONG_MEMBER)
    d.fails(c.Reply(d.tick(), TEAM, "q1", "who?"), E.BAD_REQUEST)
    d.fails(c.Reply(d.tick(), TEAM, "q1", "as 3", member_id="mem3", member_key="key2"), E.UNAUTHORIZED)


def test_owner_reply_is_attributed_to_the_user(d: Driver) -> None:
    d.ask("q1", 1, 2)
    out = d.ok(c.Reply(d.tick(), TEAM, "q1", "answered by the person", member_id="mem2"))
    assert out.result.answer.author == USER and out.result.answer.member_id == "mem2"


def test_duplicate_identical_reply_is_harmless_and_a_different_one_conflicts(d: Driver) -> None:
    d.ask("q1", 1, 2)
    first = d.reply("q1", 2, "A")
    again = d.reply("q1", 2, "A")
    assert not again.changed and again.result == first.result
    d.fails(c.Reply(d.tick(), TEAM, "q1", "B", member_key="key2"), E.CONFLICT)


def test_late_reply_after_expiry_is_kept_and_resumes_nothing(d: Driver) -> None:
    asked = d.ask("q1", 1, 2, ttl_ms=10_000).result
    expired = d.ok(c.Tick(asked.deadline_at, TEAM))
    assert d.exchange("q1").state is QuestionState.EXPIRED
    assert WithdrawNotice(TEAM, f"{TEAM}/q1/question") in expired.effects
    late = d.reply("q1", 2, "sorry, late")
    assert late.result.state is QuestionState.EXPIRED and late.result.answer.late is True
    assert late.effects == ()
    d.fails(c.Reply(d.tick(), TEAM, "q1", "another", member_key="key2"), E.CONFLICT)


def test_late_reply_after_cancel_is_kept_and_resumes_nothing(d: Driver) -> None:
    d.ask("q1", 1, 2)
    d.ok(c.Cancel(d.tick(), TEAM, "q1", member_key="key1"))
    late = d.reply("q1", 2)
    assert late.result.state is QuestionState.CANCELLED and late.result.answer.late
    assert notices(late.effects, NoticeKind.ANSWER) == []


def test_cancel_rules(d: Driver) -> None:
    d.ask("q1", 1, 2)
    d.fails(c.Cancel(d.tick(), TEAM, "q1", member_key="key2"), E.WRONG_MEMBER)
    out = d.ok(c.Cancel(d.tick(), TEAM, "q1"))
    assert out.result.state is QuestionState.CANCELLED
    assert not d.ok(c.Cancel(d.tick(), TEAM, "q1", member_key="key1")).changed
    d.ask("q2", 1, 2)
    d.reply("q2", 2)
    d.fails(c.Cancel(d.tick(), TEAM, "q2", member_key="key1"), E.CONFLICT)
    q3 = d.ask("q3", 1, 2, ttl_ms=10_000).result
    d.ok(c.Tick(q3.deadline_at + 5, TEAM))
    d.fails(c.Cancel(d.tick(), TEAM, "q3"), E.EXPIRED)


def test_pause_resume_archive(d: Driver) -> None:
    d.ask("q1", 1, 2)
    assert d.ok(c.PauseTeam(d.tick(), TEAM)).effects == (HoldTeam(TEAM),)
    paused_ask = d.ok(c.Ask(d.tick(), TEAM, "q2", "mem2", "x", member_key="key1"))
    held = notices(paused_ask.effects, NoticeKind.QUESTION)
    assert len(held) == 1, "pause holds new sends; it does not refuse them"
    assert not d.ask("q1", 1, 2).changed, "a repeat of an accepted ask still answers while paused"
    d.reply("q1", 2)
    assert not d.ok(c.PauseTeam(d.tick(), TEAM)).changed
    assert d.ok(c.ResumeTeam(d.tick(), TEAM)).effects == (ReleaseTeam(TEAM),)
    d.ask("q3", 1, 3)
    out = d.ok(c.ArchiveTeam(d.tick(), TEAM))
    assert WithdrawTeam(TEAM) in out.effects
    assert d.exchange("q3").state is QuestionState.CANCELLED
    assert d.exchange("q1").state is QuestionState.ANSWERED, "archive retains history"
    d.fails(c.Ask(d.tick(), TEAM, "q4", "mem2", "x", member_key="key1"), E.TEAM_ARCHIVED)
    d.fails(c.ResumeTeam(d.tick(), TEAM), E.TEAM_ARCHIVED)
    d.fails(c.PauseTeam(d.tick(), TEAM), E.TEAM_ARCHIVED)
    d.fails(c.AddMember(d.tick(), TEAM, member(9)), E.TEAM_ARCHIVED)
    assert not d.ok(c.ArchiveTeam(d.tick(), TEAM)).changed


def test_removal_revokes_the_key_and_rejoin_makes_a_new_membership(d: Driver) -> None:
    d.ask("q1", 1, 2)
    d.reply("q1", 2)
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    assert d.team.members["mem2"].state is MembershipState.REMOVED
    d.fails(c.Ask(d.tick(), TEAM, "q2", "mem1", "x", member_key="key2"), E.UNAUTHORIZED)
    d.fails(c.Ask(d.tick(), TEAM, "q2", "mem2", "x", member_key="key1"), E.NOT_FOUND)
    rejoin = c.NewMember("mem2b", "m-one", "agent2", "agent-2", "again", "key2b")
    d.ok(c.AddMember(d.tick(), TEAM, rejoin))
    assert d.exchange("q1").answer.author == "mem2", "old exchanges stay attributable"
    assert d.ask("q3", 1, "agent-2").result.to == "mem2b"
    d.fails(c.AddMember(d.tick(), TEAM, c.NewMember("mem5", "m-one", "agent2", "x", "", "k5")), E.BAD_REQUEST)
    d.fails(
        c.AddMember(d.tick(), TEAM, c.NewMember("mem5", "m-one", "agentX", "agent-1", "", "k5")),
        E.BAD_REQUEST,
    )


def test_same_agent_in_two_teams() -> None:
    d = Driver().create()
    d.ok(
        c.CreateTeam(d.tick(), "t2", "Other", (c.NewMember("x1", "m-one", "agent1", "agent-1", "", "other"),))
    )
    assert d.ledger.teams["t2"].members["x1"].agent_id == d.team.members["mem1"].agent_id
    d.fails(c.Ask(d.tick(), "t2", "q1", "mem2", "x", member_key="key1"), E.UNAUTHORIZED)


def test_management_is_owner_only(d: Driver) -> None:
    for command in (
        c.PauseTeam(d.tick(), TEAM, member_key="key1"),
        c.AddMember(d.tick(), TEAM, member(7), member_key="key1"),
        c.RemoveMember(d.tick(), TEAM, "mem2", member_key="key1"),
        c.CreateTeam(d.tick(), "t9", "x", (), member_key="key1"),
        c.Tick(d.tick(), TEAM, member_key="key1"),
    ):
        d.fails(command, E.UNAUTHORIZED)
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem2", "x", from_="mem3", member_key="key1"), E.UNAUTHORIZED)


def test_owner_asks_for_a_member_without_resuming_it(d: Driver) -> None:
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem2", "x"), E.BAD_REQUEST)
    asked = d.ok(c.Ask(d.tick(), TEAM, "q1", "mem2", "x", from_="agent-1"))
    assert asked.result.by_user and asked.result.from_ == "mem1"
    assert notices(d.reply("q1", 2).effects, NoticeKind.ANSWER) == []


def test_not_found(d: Driver) -> None:
    d.fails(c.PauseTeam(d.tick(), "nope"), E.NOT_FOUND)
    d.fails(c.Reply(d.tick(), TEAM, "nope", "x", member_key="key2"), E.NOT_FOUND)
    d.fails(c.Ask(d.tick(), TEAM, "q1", "nobody", "x", member_key="key1"), E.NOT_FOUND)
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem2", "x", parent_id="nope", member_key="key1"), E.NOT_FOUND)
    d.fails(c.RemoveMember(d.tick(), TEAM, "nope"), E.NOT_FOUND)
    d.fails(c.RecordDelivery(d.tick(), TEAM, "garbage", "queued"), E.NOT_FOUND)


def test_bad_requests(d: Driver) -> None:
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem1", "x", member_key="key1"), E.BAD_REQUEST)
    d.fails(c.Ask(d.tick(), TEAM, "q 1", "mem2", "x", member_key="key1"), E.BAD_REQUEST)
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem2", "   ", member_key="key1"), E.BAD_REQUEST)
    d.ask("q1", 2, 3)
    d.fails(c.Ask(d.tick(), TEAM, "q2", "mem2", "x", parent_id="q1", from_="mem1"), E.BAD_REQUEST)
    d.fails(c.Ask(d.tick(), TEAM, "q2", "mem2", "x", parent_id="q1", member_key="key1"), E.NOT_FOUND)


def test_parent_chain_is_bounded(d: Driver) -> None:
    d.ask("p1", 1, 2)
    d.ask("p2", 2, 3, parent_id="p1")
    d.ask("p3", 3, 1, parent_id="p2")
    assert d.ask("p4", 1, 2, parent_id="p3").result.depth == 4
    d.fails(
        c.Ask(d.tick(), TEAM, "p5", "mem3", "x", parent_id="p4", member_key="key2"),
        E.BOUND_EXCEEDED,
        "parent_chain",
    )


SMALL = Limits(teams=2, memberships=3, exchanges=4, pending_per_sender=2, asks_per_minute=3)


def test_team_count_bound() -> None:
    d = Driver(limits=SMALL)
    d.ok(c.CreateTeam(1, "a", "A"))
    d.ok(c.CreateTeam(2, "b", "B"))
    d.ok(c.ArchiveTeam(3, "b"))
    d.fails(c.CreateTeam(4, "c", "C"), E.BOUND_EXCEEDED, "teams")


def test_membership_bound_counts_removed_members() -> None:
    d = Driver(limits=SMALL).create(members=3)
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem3"))
    d.fails(c.AddMember(d.tick(), TEAM, member(4)), E.BOUND_EXCEEDED, "memberships")


def test_pending_exchange_and_rate_bounds() -> None:
    d = Driver(limits=SMALL).create(members=3)
    d.ask("q1", 1, 2)
    d.ask("q2", 1, 3)
    d.fails(
        c.Ask(d.tick(), TEAM, "q3", "mem2", "x", member_key="key1"), E.BOUND_EXCEEDED, "pending_per_sender"
    )
    d.ask("q3", 2, 3)
    d.fails(c.Ask(d.tick(), TEAM, "q4", "mem1", "x", member_key="key3"), E.RATE_LIMITED)
    d.tick(60_000)
    d.ask("q4", 3, 1)
    d.reply("q1", 2)
    d.fails(c.Ask(d.tick(), TEAM, "q5", "mem2", "x", member_key="key1"), E.BOUND_EXCEEDED, "exchanges")


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("text", "x" * 8_001, "question_chars"),
        ("context", "x" * 8_001, "context_chars"),
        ("ttl_ms", 9_999, "ttl"),
        ("ttl_ms", 24 * 3_600_000 + 1, "ttl"),
        ("id", "q" * 129, "id_chars"),
    ],
)
def test_ask_size_bounds(d: Driver, field: str, value: object, bound: str) -> None:
    fields: dict[str, object] = {"at": d.tick(), "team_id": TEAM, "id": "q1", "to": "mem2", "text": "x"}
    fields[field] = value
    d.fails(c.Ask(**fields, member_key="key1"), E.BOUND_EXCEEDED, bound)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "evidence", "bound"),
    [
        ("x" * 16_001, (), "answer_chars"),
        ("x", tuple(str(n) for n in range(17)), "evidence_refs"),
        ("x", ("e" * 1_025,), "evidence_ref_chars"),
    ],
)
def test_reply_size_bounds(d: Driver, text: str, evidence: tuple[str, ...], bound: str) -> None:
    d.ask("q1", 1, 2)
    d.fails(c.Reply(d.tick(), TEAM, "q1", text, evidence, member_key="key2"), E.BOUND_EXCEEDED, bound)
    assert d.reply("q1", 2, "x" * 16_000, evidence=tuple("e" * 1_024 for _ in range(16))).changed


def test_tick_expires_due_questions_and_arms_the_next_timer(d: Driver) -> None:
    a = d.ask("qa", 1, 2, ttl_ms=10_000).result
    b = d.ask("qb", 1, 3, ttl_ms=20_000).result
    assert not d.ok(c.Tick(a.deadline_at - 1, TEAM)).changed
    out = d.ok(c.Tick(a.deadline_at, TEAM))
    assert d.exchange("qa").state is QuestionState.EXPIRED and d.exchange("qb").state is QuestionState.OPEN
    assert ArmTimer(TEAM, b.deadline_at) in out.effects


def test_inbox_and_status(d: Driver) -> None:
    d.ask("q1", 1, 2)
    d.ask("q2", 3, 2)
    d.ask("q3", 2, 1)
    d.reply("q3", 1)
    me = d.team.members["mem2"]
    box = inbox(d.team, me)
    assert [e.id for e in box.questions] == ["q1", "q2"]
    assert [e.id for e in box.answers] == ["q3"]
    assert [e.id for e in status(d.team, me)] == ["q1", "q2", "q3"]
    assert [e.id for e in status(d.team, d.team.members["mem3"])] == ["q2"]
    assert len(status(d.team, None)) == 3


def test_two_members_waiting_on_each_other_both_wake(d: Driver) -> None:
    a = d.ask("qa", 1, 2).result
    b = d.ask("qb", 2, 1).result
    now = d.tick()
    wake_1 = decide_wait(d.team, "mem1", a, now, now + 30_000, since=now)
    wake_2 = decide_wait(d.team, "mem2", b, now, now + 30_000, since=now)
    assert wake_1 is not None and wake_1.reason is WaitReason.INCOMING and wake_1.news == ("qb",)
    assert wake_2 is not None and wake_2.reason is WaitReason.INCOMING and wake_2.news == ("qa",)


def test_wait_outcomes_and_timeout_never_cancels(d: Driver) -> None:
    a = d.ask("qa", 1, 2).result
    now = d.tick()
    assert decide_wait(d.team, "mem1", a, now, now + 1) is None
    timeout = decide_wait(d.team, "mem1", a, now + 1, now + 1)
    assert timeout is not None and timeout.reason is WaitReason.TIMEOUT
    assert d.exchange("qa").state is QuestionState.OPEN
    d.reply("qa", 2)
    done = decide_wait(d.team, "mem1", a, now, now + 1)
    assert done is not None and done.reason is WaitReason.ANSWERED and done.exchange.answer is not None


def test_record_delivery_updates_the_owner_view(d: Driver) -> None:
    d.ask("q1", 1, 2)
    revision = d.team.revision
    d.ok(c.RecordDelivery(d.tick(), TEAM, f"{TEAM}/q1/question", "queued", "busy"))
    assert d.exchange("q1").delivery is not None and d.exchange("q1").delivery.reason == "busy"
    assert d.team.revision == revision + 1
    assert not d.ok(c.RecordDelivery(d.tick(), TEAM, f"{TEAM}/q1/question", "queued", "busy")).changed
    d.ok(c.RecordDelivery(d.tick(), TEAM, f"{TEAM}/mem1/introduction", "accepted"))
    assert d.team.members["mem1"].introduction is not None
