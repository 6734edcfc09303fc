# Issue 19: behaviours of core/team.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

from typing import Any

import attrs
import pytest

from harness.core import commands as c
from harness.core.effects import (
    HoldTeam,
    QuestionEnded,
    ReleaseTeam,
    WithdrawMember,
    WithdrawNotice,
    WithdrawTeam,
    notice_id,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import MINUTE_MS, Limits
from harness.core.outcome import Accepted
from harness.core.queries import reader, status
from harness.core.records import DeliveryView, MembershipState, NoticeKind, QuestionState
from harness.core.team import (
    ADMISSION_BOUNDS,
    REINTRODUCED,
    answer_notice,
    introduction_notice,
    owed_machines,
    owed_notices,
    question_notice,
    reintroductions,
    replay_limits,
    restatement,
    visible_exchange,
)
from tests.team_helpers import TEAM, Driver, member


def test_a_team_created_with_more_members_than_memberships_names_that_bound() -> None:
    """Seed: "Limit roster size"; exhaustion is an explicit bound_exceeded naming the bound."""
    d = Driver(limits=Limits(memberships=2))
    too_many = c.CreateTeam(d.tick(), TEAM, "T", tuple(member(n) for n in (1, 2, 3)))
    d.fails(too_many, ErrorCode.BOUND_EXCEEDED, "memberships")
    d.ok(c.CreateTeam(d.tick(), TEAM, "T", (member(1), member(2))))
    assert list(d.team.member_order) == ["mem1", "mem2"]


def test_an_introductions_repeated_delivery_report_changes_nothing() -> None:
    """Seed: "All clients reconstruct from daemon state and ignore older revisions": a desk repeating the
    state it already reported is no news, so the team's revision and the view's time stay as they were."""
    d = Driver().create(members=2)
    intro = notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)
    first = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "delivered"))
    assert first.changed
    revision, view = d.team.revision, d.team.members["mem2"].introduction
    again = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "delivered"))
    assert not again.changed
    assert d.team.revision == revision and d.team.members["mem2"].introduction == view
    moved = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "read", "inbox"))
    assert moved.changed and d.team.members["mem2"].introduction == DeliveryView("read", "inbox", d.now)


# --- the ledger edges issue 19 names: CreateTeam validation, a repeated removal, the rate window's edge,
# recording an answer's delivery, restatement, and the authority helpers, pinned at the core ----------------


@pytest.mark.parametrize(
    ("bad", "code", "bound", "detail"),
    [
        (attrs.evolve(member(2), id="mem 2"), ErrorCode.BAD_REQUEST, None, "membership id 'mem 2' must be"),
        (attrs.evolve(member(2), machine_id=" "), ErrorCode.BAD_REQUEST, None, "machineId is empty"),
        (attrs.evolve(member(2), agent_id=""), ErrorCode.BAD_REQUEST, None, "agentId is empty"),
        (attrs.evolve(member(2), name="n" * 201), ErrorCode.BOUND_EXCEEDED, "name_chars", "member name has"),
        (attrs.evolve(member(2), key="k" * 129), ErrorCode.BOUND_EXCEEDED, "id_chars", "member key has"),
        (attrs.evolve(member(2), role="r" * 201), ErrorCode.BOUND_EXCEEDED, "name_chars", "role is longer"),
        (
            attrs.evolve(member(2), id="mem1", key="key9", agent_id="agent9", name="n9"),
            ErrorCode.CONFLICT,
            None,
            "membership id 'mem1' is used twice",
        ),
        (attrs.evolve(member(2), key="key1"), ErrorCode.BAD_REQUEST, None, "member key is already in use"),
        (attrs.evolve(member(2), name="agent-1"), ErrorCode.BAD_REQUEST, None, "name 'agent-1' is already"),
        (attrs.evolve(member(2), name="mem1"), ErrorCode.BAD_REQUEST, None, "name 'mem1' is already"),
        (attrs.evolve(member(2), agent_id="agent1"), ErrorCode.BAD_REQUEST, None, "agent m-one/agent1 is"),
    ],
)
def test_a_team_created_with_one_invalid_member_is_refused_whole(
    bad: c.NewMember, code: ErrorCode, bound: str | None, detail: str
) -> None:
    """Issue 19, "CreateTeam validation (invalid member, duplicate member id, over-long role)": the create
    is refused with the member's own error, naming what is wrong, and no team is left behind."""
    d = Driver()
    refused = d.fails(c.CreateTeam(d.tick(), TEAM, "T", (member(1), bad)), code, bound)
    assert refused.detail.startswith(detail), refused
    assert TEAM not in d.ledger.teams


def test_a_role_exactly_at_the_name_bound_and_an_agent_on_another_machine_are_admitted() -> None:
    """The neighbours of the refusals above: a role of `name_chars` characters fits, and the same agent id
    on another machine is another agent."""
    d = Driver()
    d.ok(c.CreateTeam(d.tick(), TEAM, "T", (member(1), attrs.evolve(member(2), role="r" * 200))))
    d.ok(c.AddMember(d.tick(), TEAM, attrs.evolve(member(3), agent_id="agent1", machine_id="m-two")))
    assert d.team.members["mem2"].role == "r" * 200
    assert list(d.team.member_order) == ["mem1", "mem2", "mem3"]


def test_a_name_freed_by_a_removal_can_be_taken_again() -> None:
    """Names (and agents) are unique among ACTIVE members only: a removed member's name is free again."""
    d = Driver().create(members=2)
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    d.ok(c.AddMember(d.tick(), TEAM, attrs.evolve(member(2), id="mem3", key="key3")))
    assert d.team.members["mem3"].name == d.team.members["mem2"].name


def test_removing_a_removed_member_again_changes_nothing() -> None:
    """Issue 19, "a repeated RemoveMember": the second removal returns the removal as it was (its time
    included), with no revision, no event and no second withdrawal."""
    d = Driver().create(members=2)
    first = d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    assert first.effects == (WithdrawMember(TEAM, "mem2"),)
    removed, revision = d.team.members["mem2"], d.team.revision
    assert removed.state is MembershipState.REMOVED and removed.removed_at == d.now
    assert dict(d.team.keys) == {"key1": "mem1"}
    again = d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    assert not again.changed and again.result == removed and again.effects == () and again.events == ()
    assert d.team.revision == revision and d.team.members["mem2"] == removed


def test_the_rate_window_is_sixty_seconds_and_forgets_what_falls_out() -> None:
    """Issue 19, "the 60 s rate-limit boundary": an ask exactly 60 s after the first no longer counts it
    (59.999 s after, it still does), and the asks that fell out are not kept."""
    d = Driver(limits=Limits(asks_per_minute=2)).create(members=3)
    start = d.now
    d.ok(c.Ask(start, TEAM, "q1", "mem2", "x", member_key="key1"))
    d.ok(c.Ask(start + 1, TEAM, "q2", "mem3", "x", member_key="key1"))
    d.fails(c.Ask(start + MINUTE_MS - 1, TEAM, "q3", "mem1", "x", member_key="key2"), ErrorCode.RATE_LIMITED)
    d.ok(c.Ask(start + MINUTE_MS, TEAM, "q3", "mem1", "x", member_key="key2"))
    assert d.team.recent_asks == (start + 1, start + MINUTE_MS)


def test_an_answers_delivery_is_recorded_apart_from_its_questions() -> None:
    """Issue 19, "recording answerDelivery": the desk's report on an answer notice moves the answer's view
    only; the same report again changes nothing, and an answer notice of a question never answered (or of
    another team) is not found."""
    d = Driver().create(members=2)
    d.ask("q1", 1, 2)
    question_view = d.exchange("q1").delivery
    d.reply("q1", 2)
    answer = notice_id(TEAM, "q1", NoticeKind.ANSWER)
    assert d.exchange("q1").answer_delivery == DeliveryView("queued", "unobserved", d.now)
    recorded = d.ok(c.RecordDelivery(d.tick(), TEAM, answer, "delivered"))
    assert recorded.changed and recorded.result == d.exchange("q1")
    assert d.exchange("q1").answer_delivery == DeliveryView("delivered", None, d.now)
    assert d.exchange("q1").delivery == question_view
    revision = d.team.revision
    assert not d.ok(c.RecordDelivery(d.tick(), TEAM, answer, "delivered")).changed
    assert d.team.revision == revision
    d.fails(
        c.RecordDelivery(d.tick(), TEAM, notice_id(TEAM, "q9", NoticeKind.ANSWER), "read"),
        ErrorCode.NOT_FOUND,
    )
    d.fails(
        c.RecordDelivery(d.tick(), TEAM, notice_id("t2", "q1", NoticeKind.ANSWER), "read"),
        ErrorCode.NOT_FOUND,
    )


def test_restatement_withdraws_what_ended_and_owes_only_what_is_live() -> None:
    """Issue 19, "restatement skipping withdrawals": after a restart a desk is told the team is released,
    each removed membership and ended question is withdrawn, and only live notices are owed again (no
    introduction of a removed member, no question to one, an answer's continuation only for an on-time
    answer its asker wanted)."""
    d = Driver().create(members=3)
    d.ask("q1", 1, 2)  # answered: its continuation is owed to mem1
    d.ask("q2", 1, 3, notify=False)  # answered, no continuation wanted
    d.ask("q3", 2, 3)  # to mem3, who is removed below: owed to nobody
    d.ask("q4", 2, 1)  # open: owed to mem1
    d.ask("q5", 3, 1)  # cancelled
    d.reply("q1", 2)
    d.reply("q2", 3)
    d.ok(c.Cancel(d.tick(), TEAM, "q5", member_key="key3"))
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem3"))
    team, limits = d.team, d.limits
    members = team.members
    assert restatement(team, limits) == (
        ReleaseTeam(TEAM),
        WithdrawMember(TEAM, "mem3"),
        *(WithdrawNotice(TEAM, notice_id(TEAM, q, NoticeKind.QUESTION)) for q in ("q1", "q2", "q5")),
        introduction_notice(team, members["mem1"], limits),
        introduction_notice(team, members["mem2"], limits),
        answer_notice(team, team.exchanges["q1"], limits),
        question_notice(team, team.exchanges["q4"]),
    )
    d.ok(c.PauseTeam(d.tick(), TEAM))
    assert restatement(d.team, limits)[0] == HoldTeam(TEAM)
    d.ok(c.ArchiveTeam(d.tick(), TEAM))
    assert restatement(d.team, limits) == (WithdrawTeam(TEAM),)
    assert owed_notices(d.team, limits) == ()


def test_the_reader_is_a_member_by_its_key_the_owner_without_one_and_nobody_with_another_teams() -> None:
    """Issue 19, "authority helpers (`reader()`...)" at the core: a key names its member, no key is the
    owner, and a key of a removed member or another team is unauthorized."""
    d = Driver().create(members=2)
    assert reader(d.team, "key2") == d.team.members["mem2"]
    assert reader(d.team, None) is None
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    for key in ("key2", "key9"):
        refused = reader(d.team, key)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.UNAUTHORIZED, key


def test_a_member_reads_only_its_own_questions_and_anothers_reads_as_unknown() -> None:
    """Issue 19, "reading others' questions": a member sees the questions it asked or was asked; another
    pair's question answers exactly as one that does not exist; the owner reads all of them."""
    d = Driver().create(members=3)
    d.ask("q1", 1, 2)
    d.ask("q2", 2, 3)
    d.ask("q3", 3, 1)
    mem1, mem2 = d.team.members["mem1"], d.team.members["mem2"]
    assert [e.id for e in status(d.team, mem1)] == ["q1", "q3"]
    assert [e.id for e in status(d.team, mem2)] == ["q1", "q2"]
    assert [e.id for e in status(d.team, None)] == ["q1", "q2", "q3"]
    assert visible_exchange(d.team, mem1, "q3") == d.exchange("q3")
    assert visible_exchange(d.team, None, "q2") == d.exchange("q2")
    hidden, unknown = visible_exchange(d.team, mem1, "q2"), visible_exchange(d.team, mem1, "q9")
    assert isinstance(hidden, Rejected) and isinstance(unknown, Rejected)
    assert hidden.code is unknown.code is ErrorCode.NOT_FOUND
    assert hidden.detail == unknown.detail.replace("q9", "q2")


# Limits a replay keeps: they decide what happens to admitted work (its default ttl, expiry, write timing)
# rather than whether work is admitted, so lifting them would rebuild another state.
_DECIDING = {
    "ttl_min_ms",
    "ttl_default_ms",
    "recent_answers",
    "notice_ttl_ms",
    "observation_fresh_ms",
    "write_settle_ms",
    "write_timeout_ms",
}


def test_a_replay_lifts_every_admission_bound_and_keeps_what_decides_admitted_work() -> None:
    """A journal entry was admitted under the limits of its day: replaying it under a bound lowered since
    (HARNESS_LIMITS at a restart) must not refuse it. Every admission bound is lifted (and the ttl floor
    dropped); the limits that decide what admitted work does stay as configured."""
    fields = {field.name for field in attrs.fields(Limits)}
    assert set(ADMISSION_BOUNDS) == fields - _DECIDING and len(ADMISSION_BOUNDS) == len(set(ADMISSION_BOUNDS))
    lowered = Limits(**{name: 1 for name in fields})
    lifted = replay_limits(lowered)
    assert all(getattr(lifted, name) == 2**62 for name in ADMISSION_BOUNDS)
    assert lifted.ttl_min_ms == 0
    assert {name: getattr(lifted, name) for name in _DECIDING - {"ttl_min_ms"}} == {
        name: 1 for name in _DECIDING - {"ttl_min_ms"}
    }


def test_ids_of_exactly_the_id_bound_are_admitted_and_one_more_is_not() -> None:
    """spec/team-v1.md section 5: ids are at most `id_chars` characters."""
    d = Driver(limits=Limits(id_chars=8))
    d.fails(c.CreateTeam(d.tick(), "t" * 9, "T"), ErrorCode.BOUND_EXCEEDED, "id_chars")
    d.ok(c.CreateTeam(d.tick(), "t" * 8, "T"))
    assert "t" * 8 in d.ledger.teams


@pytest.mark.parametrize("reason", ["", "No answer", "x" * 33])
def test_a_cancel_or_expire_with_a_malformed_reason_is_refused_and_ends_nothing(reason: str) -> None:
    """records.REASON_PATTERN: a reason is 1 to 32 of a-z and '_'; anything else is a bad request, and the
    question stays open."""
    d = Driver().create(members=2)
    d.ask("q1", 1, 2)
    d.fails(c.Cancel(d.tick(), TEAM, "q1", member_key="key1", reason=reason), ErrorCode.BAD_REQUEST)
    d.fails(c.Expire(d.tick(), TEAM, "q1", reason), ErrorCode.BAD_REQUEST)
    assert d.exchange("q1").state is QuestionState.OPEN


def test_the_owners_expire_ends_an_open_question_with_its_reason_and_keeps_an_ended_one() -> None:
    """Seed: a session releases the asker of a question that got no answer (`no_answer`): the owner's
    expire ends it `expired` with that reason and withdraws its notice; expiring it again changes nothing,
    an unknown question is not found, and a member cannot expire at all."""
    d = Driver().create(members=2)
    d.ask("q1", 1, 2)
    ended = d.ok(c.Expire(d.tick(), TEAM, "q1", "no_answer"))
    exchange = d.exchange("q1")
    assert (exchange.state, exchange.reason, exchange.ended_at) == (QuestionState.EXPIRED, "no_answer", d.now)
    assert ended.result == exchange
    assert ended.effects == (WithdrawNotice(TEAM, notice_id(TEAM, "q1", NoticeKind.QUESTION)),)
    again = d.ok(c.Expire(d.tick(), TEAM, "q1", "other_reason"))
    assert not again.changed and again.result == exchange
    d.fails(c.Expire(d.tick(), TEAM, "q9", "no_answer"), ErrorCode.NOT_FOUND)
    d.fails(c.Expire(d.tick(), TEAM, "q1", "no_answer", member_key="key1"), ErrorCode.UNAUTHORIZED)


def test_a_delivery_report_on_the_introduction_of_an_unknown_membership_is_not_found() -> None:
    """A desk's report names a notice; one about a membership the team never had changes nothing."""
    d = Driver().create(members=2)
    intro = notice_id(TEAM, "mem9", NoticeKind.INTRODUCTION)
    refused = d.fails(c.RecordDelivery(d.tick(), TEAM, intro, "delivered"), ErrorCode.NOT_FOUND)
    assert "mem9" in refused.detail


def test_a_member_attaching_again_gets_a_fresh_introduction_under_a_new_id() -> None:
    """reintroductions: an agent that attaches (again) is told its membership anew, under an id holding the
    membership and the time (so no desk takes it for the first, perhaps expired, one), expiring
    `notice_ttl_ms` from then; a removed membership of the same agent, another agent, or an archived team
    get none."""
    d = Driver().create(members=2)
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem1"))
    d.ok(c.AddMember(d.tick(), TEAM, attrs.evolve(member(1), id="mem3", key="key3")))
    at, limits = d.tick(), d.limits
    fresh = reintroductions(d.team, "m-one", "agent1", at, limits)
    first = introduction_notice(d.team, d.team.members["mem3"], limits)
    assert fresh == (
        attrs.evolve(
            first,
            notice_id=notice_id(TEAM, f"mem3{REINTRODUCED}{at}", NoticeKind.INTRODUCTION),
            expires_at=at + limits.notice_ttl_ms,
        ),
    )
    assert reintroductions(d.team, "m-two", "agent1", at, limits) == ()
    d.ok(c.ArchiveTeam(d.tick(), TEAM))
    assert reintroductions(d.team, "m-one", "agent1", at, limits) == ()


def test_a_repeated_add_returns_the_member_and_a_different_one_under_its_id_conflicts() -> None:
    """The membership id is the add's operation id: a retried add is recognised, a reused id is not."""
    d = Driver().create(members=1)
    added = d.ok(c.AddMember(d.tick(), TEAM, member(2)))
    revision = d.team.revision
    again = d.ok(c.AddMember(d.tick(), TEAM, member(2)))
    assert not again.changed and again.result == added.result and d.team.revision == revision
    d.fails(c.AddMember(d.tick(), TEAM, attrs.evolve(member(2), role="another role")), ErrorCode.CONFLICT)


def test_an_owner_asking_for_no_active_member_and_cancelling_an_unknown_question_are_not_found() -> None:
    d = Driver().create(members=2)
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem2"))
    d.fails(c.Ask(d.tick(), TEAM, "q1", "mem1", "x", from_="mem2"), ErrorCode.NOT_FOUND)
    d.fails(c.Cancel(d.tick(), TEAM, "q9"), ErrorCode.NOT_FOUND)


# --- found by a full mutation run of core/team.py (638 mutants, 33 survived) ----------------------------


def _intro_report(d: Driver, membership: str, at: int | None, state: str, reason: str | None = None) -> Any:
    subject = membership if at is None else f"{membership}{REINTRODUCED}{at}"
    return d.run(
        c.RecordDelivery(d.tick(), TEAM, notice_id(TEAM, subject, NoticeKind.INTRODUCTION), state, reason)
    )


def test_a_reintroduction_report_is_recorded_and_never_hidden_by_an_earlier_introductions() -> None:
    """What became of an earlier introduction never hides what became of a later one (`_earlier`): after a
    report of the re-introduction at T, a report of the first introduction or of one before T changes
    nothing; a new view of the one at T, or one of a later re-introduction, is recorded. A subject whose mark
    is not a time is no membership (never an `int()` that raises)."""
    d = Driver().create(members=2)
    assert isinstance(_intro_report(d, "mem1", 500, "delivered"), Accepted)
    shown = d.team.members["mem1"]
    assert (shown.introduction_of, shown.introduction.state) == (500, "delivered")
    for earlier in (None, 499):
        outcome = _intro_report(d, "mem1", earlier, "expired")
        assert isinstance(outcome, Accepted) and not outcome.changed
    assert isinstance(_intro_report(d, "mem1", 500, "accepted"), Accepted)
    assert d.team.members["mem1"].introduction.state == "accepted"
    assert isinstance(_intro_report(d, "mem1", 501, "queued", "unobserved"), Accepted)
    assert d.team.members["mem1"].introduction_of == 501
    refused = _intro_report(d, "mem1~abc", None, "read")
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND


def test_the_result_of_a_team_command_is_the_team_at_its_new_revision() -> None:
    d = Driver().create(members=2)
    paused = d.ok(c.PauseTeam(d.tick(), TEAM))
    assert paused.result == d.team and paused.result.revision == d.team.revision


def test_a_question_asked_in_a_paused_team_is_owed_held() -> None:
    """Contract: `delivery` is set from the moment the ask is accepted; while the team is paused its notice
    waits `held` (`paused`), not queued."""
    d = Driver().create(members=2)
    d.ok(c.PauseTeam(d.tick(), TEAM))
    assert isinstance(d.ask("q1", 1, 2), Accepted)
    assert (d.exchange("q1").delivery.state, d.exchange("q1").delivery.reason) == ("held", "paused")


def test_owed_machines_are_the_active_members_machines_and_none_once_archived() -> None:
    driver = Driver()
    driver.ok(c.CreateTeam(1, TEAM, "t", (member(1, machine="m-a"), member(2, machine="m-b"))))
    assert owed_machines(driver.team) == {"m-a", "m-b"}
    driver.ok(c.RemoveMember(driver.tick(), TEAM, "mem2"))
    assert owed_machines(driver.team) == {"m-a"}
    driver.ok(c.ArchiveTeam(driver.tick(), TEAM))
    assert owed_machines(driver.team) == frozenset()


def test_a_retried_ask_with_another_ttl_is_another_question() -> None:
    """An operation id names one ask: the same id with a different ttl is a conflict, not its retry."""
    d = Driver().create(members=2)
    assert isinstance(d.ask("q1", 1, 2, ttl_ms=60_000), Accepted)
    again = d.ask("q1", 1, 2, ttl_ms=120_000)
    assert isinstance(again, Rejected) and again.code is ErrorCode.CONFLICT


def test_a_repeated_create_must_name_every_member_it_named_the_same() -> None:
    d = Driver().create(members=2)
    other = attrs.evolve(member(2), id="mem9")
    d.fails(c.CreateTeam(d.tick(), TEAM, "Build Harness", (member(1), other)), ErrorCode.CONFLICT)


def test_each_bound_of_a_create_or_a_member_is_named() -> None:
    """`bound_exceeded` names the bound that was hit (contract), here for the team's name, its memberships,
    and a member's machine, agent and key."""
    small = Limits(memberships=2, name_chars=10, id_chars=12)
    Driver(small).fails(c.CreateTeam(1, TEAM, "n" * 11, ()), ErrorCode.BOUND_EXCEEDED, "name_chars")
    three = tuple(member(n) for n in range(1, 4))
    crowded = Driver(small).fails(c.CreateTeam(1, TEAM, "t", three), ErrorCode.BOUND_EXCEEDED, "memberships")
    assert crowded.detail == "a team holds at most 2 memberships"  # said before any member is looked at
    for field in ("machine_id", "agent_id", "key"):
        long = attrs.evolve(member(1), **{field: "x" * 13})
        Driver(small).fails(c.CreateTeam(1, TEAM, "t", (long,)), ErrorCode.BOUND_EXCEEDED, "id_chars")


def test_archiving_and_expiry_report_each_question_they_end() -> None:
    d = Driver().create(members=2)
    d.ask("q1", 1, 2, ttl_ms=60_000)
    d.ask("q2", 2, 1, ttl_ms=600_000)
    expired = d.ok(c.Tick(d.now + 60_000, TEAM))
    assert [e for e in expired.events if isinstance(e, QuestionEnded)] == [
        QuestionEnded(TEAM, "q1", QuestionState.EXPIRED)
    ]
    archived = d.ok(c.ArchiveTeam(d.tick(60_001), TEAM))
    assert [e for e in archived.events if isinstance(e, QuestionEnded)] == [
        QuestionEnded(TEAM, "q2", QuestionState.CANCELLED)
    ]


def test_a_context_and_a_ttl_exactly_at_their_bounds_are_taken() -> None:
    limits = Limits(context_chars=20)
    d = Driver(limits).create(members=2)
    assert isinstance(d.ask("q1", 1, 2, context="c" * 20, ttl_ms=limits.ttl_min_ms), Accepted)
    d.fails(
        c.Ask(d.tick(), TEAM, "q2", "mem2", "x", context="c" * 21, member_key="key1"),
        ErrorCode.BOUND_EXCEEDED,
    )
    assert isinstance(d.ask("q4", 2, 1, ttl_ms=limits.ttl_max_ms), Accepted)
    short = c.Ask(d.tick(), TEAM, "q3", "mem2", "x", ttl_ms=limits.ttl_min_ms - 1, member_key="key1")
    d.fails(short, ErrorCode.BOUND_EXCEEDED, "ttl")
