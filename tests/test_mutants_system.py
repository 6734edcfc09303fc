# Issue 19: behaviours of core/system.py that scripts/mutate_core.py found no test pinned: what the owner
# records when a destination refuses a routed notice, and the desk command each withdrawal becomes.
from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from harness.core import commands as c
from harness.core import delivery as d
from harness.core import effects as fx
from harness.core.effects import notice_id
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, DeliveryView, Ledger, MembershipState, NoticeKind, TeamState
from harness.core.system import (
    Arrived,
    AtDesk,
    NoticeContent,
    RouteRefused,
    System,
    Teammate,
    ToDesk,
    ToOwner,
    answer_retrieved_action,
    content_problem,
    desk_command,
    inbox_read_action,
    render_content,
    step_system,
)
from harness.core.team import step as team_step
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


def test_an_effect_without_a_desk_command_is_a_programming_error_not_a_silent_drop() -> None:
    with pytest.raises(AssertionError, match="unroutable team effect"):
        desk_command(EMPTY_LEDGER, fx.ArmTimer(TEAM, 5), 5, DEFAULT_LIMITS)


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


# --- the composed step's bookkeeping (issue 19's system.py themes) ------------------------------------------


def _stepped(system: System, action: Any, limits: Limits = DEFAULT_LIMITS) -> Accepted[System]:
    outcome = step_system(system, action, limits)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def _creation(members: int = 3, remote: frozenset[str] = frozenset()) -> Accepted[System]:
    """A team whose members 1.. live on m-one, except member 2 on m-two when m-two is remote."""
    machines = {2: "m-two"} if remote else {}
    new = tuple(member(n, machine=machines.get(n, "m-one")) for n in range(1, members + 1))
    return _stepped(System(remote=remote), c.CreateTeam(1_000, TEAM, "T", new))


def _created(members: int = 3, remote: frozenset[str] = frozenset()) -> System:
    return _creation(members, remote).state


def _notices(system: System, machine: str = "m-one") -> dict[str, tuple[d.DeliveryState, d.Reason | None]]:
    return {n.id: (n.state, n.reason) for n in system.desks[machine].notices.values()}


def test_the_composed_step_returns_the_asks_result_its_timer_and_its_events() -> None:
    """The primary command's result is the team's own; its ArmTimer leaves the system (the shell's clock
    sends the Tick); the team's and the desk's events are all reported."""
    system = _created()
    ask = c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="key1", ttl_ms=60_000)
    alone = team_step(system.ledger, ask)
    assert isinstance(alone, Accepted) and alone.result is not None
    stepped = _stepped(system, ask)
    assert stepped.result == alone.result
    assert [e for e in stepped.effects if isinstance(e, fx.ArmTimer)] == [fx.ArmTimer(TEAM, 61_001)]
    assert alone.events and set(alone.events) <= set(stepped.events)
    delivery = stepped.state.ledger.teams[TEAM].exchanges["q1"].delivery  # the desk's report, recorded
    assert delivery is not None and delivery.state == "queued"
    assert notice_id(TEAM, "q1", NoticeKind.QUESTION) in _notices(stepped.state)


def test_a_step_that_changes_nothing_hands_back_the_same_system() -> None:
    system = _created()
    for quiet_action in (c.Tick(1_001, TEAM), AtDesk("m-one", d.Observe(1_001, "agent9", d.Observed.IDLE))):
        quiet = _stepped(system, quiet_action)
        assert quiet.state is system and not quiet.changed
    assert _stepped(system, c.Ask(1_002, TEAM, "q1", "mem2", "hi", member_key="key1")).changed


def test_a_rejected_primary_command_is_returned_as_is() -> None:
    """The caller's own command, refused by the ledger or by a desk, is its rejection, not an event."""
    system = _created()
    refused = step_system(system, c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="nobody"))
    assert isinstance(refused, Rejected)
    at_desk = step_system(system, AtDesk("m-one", d.TurnObserved(1_001, "t1/q9/question")))
    assert isinstance(at_desk, Rejected) and at_desk.code is ErrorCode.NOT_FOUND


def test_a_report_the_owner_refuses_is_a_route_refused_event_for_the_ledger() -> None:
    """An arrived desk report about a notice the ledger does not know changes nothing and is an event
    naming the owner (machine None), never a rejection of the link's hand-over."""
    system = _created(remote=frozenset({"m-two"}))
    record = c.RecordDelivery(1_001, "t9", "t9/q1/question", "delivered", None)
    arrived = _stepped(system, Arrived("m-two", record))
    assert arrived.state is system and arrived.result is None
    assert [(e.machine_id, e.command) for e in arrived.events if isinstance(e, RouteRefused)] == [
        (None, record)
    ]


def test_a_remote_desks_refusal_of_a_submit_travels_back_to_the_owner() -> None:
    """Seed: "Distinguish queued, delivered, started, rejected, and unknown." A paired machine's full queue
    refuses the question's notice; its refusal leaves for the owner through the link (ToOwner), and once it
    arrives the owner records the question's delivery rejected with the bound."""
    limits = Limits(queued_per_agent=1)
    remote = frozenset({"m-two"})
    created = _creation(remote=remote)
    intro = next(o.command for o in created.effects if isinstance(o, ToDesk))
    assert isinstance(intro, d.Submit) and intro.notice_id == notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)
    system = _stepped(created.state, Arrived("m-two", intro), limits).state
    asked = _stepped(system, c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="key1"), limits)
    submit = next(o.command for o in asked.effects if isinstance(o, ToDesk))
    assert isinstance(submit, d.Submit) and submit.machine_id == "m-two"
    assert "m-two" not in asked.state.desks or submit.notice_id not in asked.state.desks["m-two"].notices
    landed = _stepped(asked.state, Arrived("m-two", submit), limits)
    refused = [e for e in landed.events if isinstance(e, RouteRefused)]
    assert [(e.machine_id, e.rejected.bound) for e in refused] == [("m-two", "queued_per_agent")]
    back = [o for o in landed.effects if isinstance(o, ToOwner)]
    assert [(o.machine_id, o.command.state, o.command.reason) for o in back] == [
        ("m-two", "rejected", "queued_per_agent")
    ]
    recorded = _stepped(landed.state, Arrived("m-two", back[0].command), limits)
    assert recorded.state.ledger.teams[TEAM].exchanges["q1"].delivery == DeliveryView(
        "rejected", "queued_per_agent", 1_001
    )


def test_removing_a_member_withdraws_its_unsent_notices_and_no_one_elses() -> None:
    """A removed member is owed nothing more: its unsent notices are withdrawn at its desk, stepped in the
    composed system where the ledger's effects reach the desk (before, only a daemon test went this way)."""
    system = _created()
    system = _stepped(system, c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="key1")).state
    removed = _stepped(system, c.RemoveMember(1_002, TEAM, "mem2")).state
    withdrawn = d.DeliveryState.WITHDRAWN
    notices = _notices(removed)
    assert notices[notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)] == (withdrawn, d.Reason.REMOVED)
    assert notices[notice_id(TEAM, "q1", NoticeKind.QUESTION)][0] is withdrawn
    assert notices[notice_id(TEAM, "mem3", NoticeKind.INTRODUCTION)][0] is d.DeliveryState.QUEUED
    assert removed.ledger.teams[TEAM].members["mem2"].state is MembershipState.REMOVED


def test_archiving_a_team_withdraws_every_unsent_notice_of_it() -> None:
    """An archived team owes nobody anything: every unsent notice of it is withdrawn as archived."""
    system = _created()
    system = _stepped(system, c.Ask(1_001, TEAM, "q1", "mem2", "hi", member_key="key1")).state
    archived = _stepped(system, c.ArchiveTeam(1_002, TEAM))
    assert archived.state.ledger.teams[TEAM].state is TeamState.ARCHIVED
    states = set(_notices(archived.state).values())
    assert {state for state, _reason in states} == {d.DeliveryState.WITHDRAWN}, states
    intro = _notices(archived.state)[notice_id(TEAM, "mem3", NoticeKind.INTRODUCTION)]
    assert intro == (d.DeliveryState.WITHDRAWN, d.Reason.ARCHIVED)


@pytest.mark.parametrize("late", [False, True])
def test_each_introduction_carries_its_own_members_key_and_no_other(late: bool) -> None:
    """An introduction teaches the member its command prefix with its key; another member's key in it
    would let one agent speak as another. Also for a member added after the team was made."""
    system = _created(members=3 if not late else 2)
    if late:
        system = _stepped(system, c.AddMember(1_001, TEAM, member(3))).state
    texts = {n.membership_id: n.text for n in system.desks["m-one"].notices.values()}
    assert set(texts) == {"mem1", "mem2", "mem3"}
    for n in (1, 2, 3):
        keys = set(re.findall(r"--key (\S+)", texts[f"mem{n}"]))
        assert keys == {f"key{n}"}, texts[f"mem{n}"]


def test_an_answers_evidence_is_listed_after_its_text() -> None:
    answer = NoticeContent(
        NoticeKind.ANSWER, TEAM, "T", "q1", "agent-2", text="GET /state", evidence=("a", "b")
    )
    text = render_content(answer)
    assert "> GET /state\nEvidence:\n> a; b\n" in text
    assert "Evidence" not in render_content(attrs.evolve(answer, evidence=()))


@pytest.mark.parametrize("field", ["team_name", "speaker"])
def test_a_name_cannot_break_the_notices_framing_across_lines(field: str) -> None:
    """A peer-chosen name is one line in the frame `[team …] Question q1 from …:`; a line break in it is
    shown, never sent, so it cannot start a line that looks like the desk's own."""
    question = NoticeContent(NoticeKind.QUESTION, TEAM, "T", "q1", "agent-1", text="Which port?")
    plain: dict[str, Any] = {field: "ab"}
    broken: dict[str, Any] = {field: "a\nb"}
    lines = [render_content(attrs.evolve(question, **name)).count("\n") for name in (plain, broken)]
    assert lines[0] == lines[1]
