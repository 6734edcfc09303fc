# Issue 19: "no invariant check is ever seen to fire". The stateful machines, the model checker and the daemon
# only ever show the checks of core/invariants.py and core/delivery_invariants.py silent, so any one of them
# could be deleted unnoticed. Here every check gets the smallest state or step that breaks exactly its rule
# (records built directly with attrs.evolve: the checks exist to catch reducer bugs, so the reducer cannot
# build these) and must report that invariant, while its valid neighbour reports nothing. The ids covered
# must be the ids the specs list (team-v1 section 8, delivery-v1 section 6).
from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
from immutables import Map

from harness.core import commands as c
from harness.core import delivery as d
from harness.core import delivery_invariants as di
from harness.core import effects as fx
from harness.core import invariants as ti
from harness.core.errors import ErrorCode, ProtocolViolation, Rejected
from harness.core.limits import DEFAULT_LIMITS, MINUTE_MS, Limits
from harness.core.outcome import Accepted
from harness.core.queries import WaitDecision, decide_wait
from harness.core.records import (
    USER,
    Answer,
    Exchange,
    Ledger,
    MembershipState,
    NoticeKind,
    QuestionState,
    Team,
)
from harness.core.system import AtDesk, System, step_system
from harness.core.team import answer_notice, question_notice
from harness.core.team import step as team_step
from tests.spec_tables import read_table

Violation = tuple[str, str]
CORE = Path(__file__).resolve().parent.parent / "core"
S = d.DeliveryState
TEAM, MACHINE = "t1", "m-one"
INTRO1, INTRO2, INTRO3, INTRO4 = (f"t{1 + (n == 4)}/mem{n}/introduction" for n in (1, 2, 3, 4))
Q1N, Q2N, Q3N, Q4N, Q2A = (
    "t1/q1/question",
    "t1/q2/question",
    "t1/q3/question",
    "t1/q4/question",
    "t1/q2/answer",
)
# Invariants no state or step can break, so no check exists for them.
BY_CONSTRUCTION = {
    "T10": "a Rejected outcome carries no ledger, so it cannot differ from the one it was given"
}


# --- the valid world every case breaks one thing of -------------------------------------------------------


@attrs.frozen
class World:
    system: System
    now: int

    @property
    def ledger(self) -> Ledger:
        return self.system.ledger

    @property
    def team(self) -> Team:
        return self.ledger.teams[TEAM]

    @property
    def desk(self) -> d.Desk:
        return self.system.desks[MACHINE]


def _member(n: int) -> c.NewMember:
    return c.NewMember(f"mem{n}", MACHINE, f"agent{n}", f"agent-{n}", f"role {n}", f"key{n}")


@functools.cache
def world() -> World:
    """Team t1 (mem1-3) and paused t2 (mem4), all on one machine. q1 mem2->mem1 is open; q2 mem1->mem3 is
    answered; q3 mem3->mem2 expired and then got a late answer; q4 mem1->mem3 is an open follow-up of q1;
    q5 mem3->mem2 was cancelled.
    agent1 is writing its introduction with q1's notice and q2's answer queued behind it; agent2's
    introduction waits unobserved; agent3's introduction was delivered; agent4's is held."""
    system, now = System(), 1_000
    actions: list[c.TeamCommand | AtDesk] = [
        AtDesk(MACHINE, d.Restart(now + 100)),
        c.CreateTeam(now + 200, TEAM, "Build", tuple(_member(n) for n in (1, 2, 3))),
        c.CreateTeam(now + 300, "t2", "Other", (_member(4),)),
        c.PauseTeam(now + 400, "t2"),
        c.Ask(now + 500, TEAM, "q1", "mem1", "Which endpoint?", member_key="key2"),
        c.Ask(now + 600, TEAM, "q2", "mem3", "Which port?", member_key="key1"),
        c.Reply(now + 700, TEAM, "q2", "8080", evidence=("ref",), member_key="key3"),
        c.Ask(now + 800, TEAM, "q3", "mem2", "Which host?", ttl_ms=10_000, member_key="key3"),
        c.Tick(now + 10_900, TEAM),
        c.Reply(now + 11_000, TEAM, "q3", "localhost", member_key="key2"),
        c.Ask(now + 11_100, TEAM, "q4", "mem3", "Which port for q1?", parent_id="q1", member_key="key1"),
        c.Ask(now + 11_150, TEAM, "q5", "mem2", "Which shell?", member_key="key3"),
        c.Cancel(now + 11_160, TEAM, "q5", member_key="key3"),
        AtDesk(MACHINE, d.Observe(now + 11_200, "agent3", d.Observed.IDLE)),
        AtDesk(MACHINE, d.WriteStarted(now + 11_300, INTRO3, d.Observed.IDLE, now + 11_290)),
        AtDesk(MACHINE, d.WriteFinished(now + 11_400, INTRO3, d.WriteResult.OK)),
        AtDesk(MACHINE, d.Observe(now + 11_500, "agent1", d.Observed.IDLE)),
        AtDesk(MACHINE, d.WriteStarted(now + 11_600, INTRO1, d.Observed.IDLE, now + 11_590)),
    ]
    for action in actions:
        outcome = step_system(system, action)
        assert isinstance(outcome, Accepted), (action, outcome)
        system = outcome.state
    return World(system, now + 11_700)


# --- building broken neighbours -----------------------------------------------------------------------------


def _ledger(team: Team) -> Ledger:
    ledger = world().ledger
    return attrs.evolve(ledger, teams=ledger.teams.set(team.id, team))


def _exchange(team: Team, exchange_id: str, **changes: Any) -> Team:
    exchange = attrs.evolve(team.exchanges[exchange_id], **changes)
    return attrs.evolve(team, exchanges=team.exchanges.set(exchange_id, exchange))


def _answer(team: Team, exchange_id: str, **changes: Any) -> Team:
    answer = team.exchanges[exchange_id].answer
    assert answer is not None
    return _exchange(team, exchange_id, answer=attrs.evolve(answer, **changes))


def _member_changed(team: Team, member_id: str, **changes: Any) -> Team:
    return attrs.evolve(
        team, members=team.members.set(member_id, attrs.evolve(team.members[member_id], **changes))
    )


def _edit(team: Team) -> Team:
    """One accepted change of `team`: a rename with the revision it earns."""
    return attrs.evolve(team, name=team.name + "!", revision=team.revision + 1)


def _notice(desk: d.Desk, notice_id: str, **changes: Any) -> d.Desk:
    notice = attrs.evolve(desk.notices[notice_id], **changes)
    return _reindexed(attrs.evolve(desk, notices=desk.notices.set(notice_id, notice)))


def _session(desk: d.Desk, agent_id: str, **changes: Any) -> d.Desk:
    session = attrs.evolve(desk.sessions.get(agent_id, d.Session(agent_id)), **changes)
    return attrs.evolve(desk, sessions=desk.sessions.set(agent_id, session))


def _reindexed(desk: d.Desk, limits: Limits = DEFAULT_LIMITS) -> d.Desk:
    """`desk` with every session's queue, held list, writing slot and timers rebuilt from its notices, so a
    case that moves a notice breaks only what it means to break."""
    sessions = {}
    for agent_id, session in desk.sessions.items():
        mine = sorted((n for n in desk.notices.values() if n.agent_id == agent_id), key=lambda n: n.seq)
        writing = [n for n in mine if n.state is S.WRITING]
        timers = [(n.expires_at, n.id) for n in mine if n.state in d.UNSENT]
        timers += [((n.started_at or 0) + limits.write_timeout_ms, n.id) for n in writing]
        sessions[agent_id] = attrs.evolve(
            session,
            queue=tuple(n.id for n in mine if n.state is S.QUEUED),
            held=tuple(n.id for n in mine if n.state is S.HELD),
            writing=writing[0].id if writing else None,
            timers=tuple(sorted(timers)),
        )
    return attrs.evolve(desk, sessions=Map(sessions))


def _system(desk: d.Desk) -> System:
    system = world().system
    return attrs.evolve(system, desks=system.desks.set(desk.machine_id, desk))


def _desk_step(command: d.DeskCommand, before: d.Desk | None = None) -> tuple[d.Desk, Accepted[d.Desk]]:
    before = world().desk if before is None else before
    outcome = d.step(before, command)
    assert isinstance(outcome, Accepted), outcome
    return before, outcome


def _write_step() -> tuple[d.Desk, d.WriteStarted, Accepted[d.Desk]]:
    """agent2 seen idle, then its introduction's write started: the one real step that emits a WriteNotice."""
    now = world().now
    _, observed = _desk_step(d.Observe(now, "agent2", d.Observed.IDLE))
    command = d.WriteStarted(now + 10, INTRO2, d.Observed.IDLE, now + 5)
    before, outcome = _desk_step(command, observed.state)
    assert any(isinstance(effect, d.WriteNotice) for effect in outcome.effects)
    return before, command, outcome


def _blind_wait(team: Team, waiter_id: str, exchange: Exchange, now: int, until: int) -> WaitDecision | None:
    """decide_wait with its second rule lost: a question addressed to the waiter no longer breaks the wait."""
    return decide_wait(attrs.evolve(team, open_deadlines=()), waiter_id, exchange, now, until)


@contextmanager
def _patched(module: object, name: str, value: object, apply: bool) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        if apply:
            patch.setattr(module, name, value)
        yield


# --- the cases: one function per check, (broken) -> what the check reports ----------------------------------


@attrs.frozen
class Case:
    invariant: str
    run: Callable[[bool], list[Violation]]
    also: frozenset[str]  # invariants the same breakage violates by its nature
    bug: str | None  # a check that cannot fire on main: why (the case is a strict xfail until fixed)

    @property
    def name(self) -> str:
        return f"{self.invariant}-{self.run.__name__.partition('_')[2]}"


CASES: list[Case] = []


def case(
    invariant: str, *, also: tuple[str, ...] = (), bug: str | None = None
) -> Callable[[Callable[[bool], list[Violation]]], Callable[[bool], list[Violation]]]:
    def register(run: Callable[[bool], list[Violation]]) -> Callable[[bool], list[Violation]]:
        CASES.append(Case(invariant, run, frozenset(also), bug))
        return run

    return register


def _team_state(team: Team, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    return ti.ledger_violations(_ledger(team), limits)


# T1: every bound holds. Each bound is broken one past its limit; the neighbour sits exactly at it.


@case("T1")
def t1_teams(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(teams=2 - broken))


@case("T1")
def t1_memberships(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(memberships=3 - broken))


@case("T1")
def t1_exchanges(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(exchanges=len(world().team.exchanges) - broken))


@case("T1")
def t1_open_per_sender(broken: bool) -> list[Violation]:
    # mem1 and mem2 have one open question each; mem3 has two that ended, which do not count.
    return ti.ledger_violations(world().ledger, Limits(pending_per_sender=1 - broken))


@case("T1")
def t1_question_chars(broken: bool) -> list[Violation]:
    longest = max(len(exchange.text) for exchange in world().team.exchanges.values())
    return ti.ledger_violations(world().ledger, Limits(question_chars=longest - broken))


@case("T1")
def t1_context_chars(broken: bool) -> list[Violation]:
    return _team_state(_exchange(world().team, "q1", context="ctx"), Limits(context_chars=3 - broken))


@case("T1")
def t1_ttl_below_minimum(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(ttl_min_ms=10_000 + broken))


@case("T1")
def t1_ttl_above_maximum(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(ttl_max_ms=DEFAULT_LIMITS.ttl_default_ms - broken))


@case("T1")
def t1_answer_chars(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(answer_chars=len("localhost") - broken))


@case("T1")
def t1_evidence_refs(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(evidence_refs=1 - broken))


@case("T1")
def t1_evidence_ref_chars(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(evidence_ref_chars=len("ref") - broken))


@case("T1")
def t1_asks_per_minute(broken: bool) -> list[Violation]:
    return ti.ledger_violations(
        world().ledger, Limits(asks_per_minute=len(world().team.recent_asks) - broken)
    )


@case("T1")
def t1_asks_outside_the_rate_window(broken: bool) -> list[Violation]:
    first = world().team.recent_asks[0]
    return _team_state(attrs.evolve(world().team, recent_asks=(first, first + MINUTE_MS - 1 + broken)))


# T2-T4: answers and parents.


@case("T2")
def t2_answered_by_another_member(broken: bool) -> list[Violation]:
    return _team_state(_answer(world().team, "q2", author="mem2" if broken else USER))


@case("T2")
def t2_answer_for_another_addressee(broken: bool) -> list[Violation]:
    return _team_state(_answer(world().team, "q2", member_id="mem2" if broken else "mem3"))


@case("T3")
def t3_answered_without_an_answer(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(_exchange(team, "q2", answer=None) if broken else team)


@case("T3")
def t3_answered_with_a_late_answer(broken: bool) -> list[Violation]:
    return _team_state(_answer(world().team, "q2", late=broken))


@case("T3")
def t3_ended_with_an_on_time_answer(broken: bool) -> list[Violation]:
    return _team_state(_answer(world().team, "q3", late=not broken))


@case("T3")
def t3_open_with_an_answer(broken: bool) -> list[Violation]:
    answer = Answer("mem1", "mem1", world().now, "GET /state", (), late=True)
    return _team_state(_exchange(world().team, "q1", answer=answer if broken else None))


@case("T4")
def t4_root_deeper_than_one(broken: bool) -> list[Violation]:
    return _team_state(_exchange(world().team, "q2", depth=1 + broken))  # q2 is nobody's parent


@case("T4")
def t4_parent_unknown(broken: bool) -> list[Violation]:
    return _team_state(_exchange(world().team, "q4", parent_id="q9" if broken else "q1"))


@case("T4")
def t4_parent_not_involving_the_asker(broken: bool) -> list[Violation]:
    # q3 (mem3 -> mem2) has nothing to do with q4's asker mem1; q2 (mem1 -> mem3) was asked by it.
    return _team_state(_exchange(world().team, "q4", parent_id="q3" if broken else "q2"))


@case("T4")
def t4_depth_not_its_parents_plus_one(broken: bool) -> list[Violation]:
    return _team_state(_exchange(world().team, "q4", depth=2 + broken))


@case("T4")
def t4_chain_longer_than_the_bound(broken: bool) -> list[Violation]:
    return ti.ledger_violations(world().ledger, Limits(parent_chain=2 - broken))


# T5, T6, T9: keys and derived indexes.


@case("T5")
def t5_active_member_without_a_key(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, keys=team.keys.delete("key3")) if broken else team)


@case("T5")
def t5_active_member_with_two_keys(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, keys=team.keys.set("key3b", "mem3")) if broken else team)


@case("T5")
def t5_removed_member_keeps_its_key(broken: bool) -> list[Violation]:
    state = MembershipState.REMOVED if broken else MembershipState.ACTIVE
    return _team_state(_member_changed(world().team, "mem3", state=state))


@case("T6")
def t6_member_key_in_the_public_snapshot(broken: bool) -> list[Violation]:
    return _team_state(_member_changed(world().team, "mem2", role="holds key1" if broken else "holds keys"))


@case("T9")
def t9_team_filed_under_another_id(broken: bool) -> list[Violation]:
    ledger = world().ledger
    if broken:
        ledger = attrs.evolve(ledger, teams=ledger.teams.delete(TEAM).set("t9", world().team))
    return ti.ledger_violations(ledger)


@case("T9")
def t9_exchange_missing_from_its_order(broken: bool) -> list[Violation]:
    team = world().team
    order = tuple(exchange_id for exchange_id in team.exchange_order if not broken or exchange_id != "q2")
    return _team_state(attrs.evolve(team, exchange_order=order))


@case("T9")
def t9_exchange_twice_in_its_order(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, exchange_order=team.exchange_order + ("q2",) * broken))


@case("T9")
def t9_member_missing_from_its_order(broken: bool) -> list[Violation]:
    team = world().team
    order = tuple(member_id for member_id in team.member_order if not broken or member_id != "mem2")
    return _team_state(attrs.evolve(team, member_order=order))


@case("T9")
def t9_member_twice_in_its_order(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, member_order=team.member_order + ("mem2",) * broken))


@case("T9")
def t9_deadline_index_misses_an_open_exchange(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, open_deadlines=team.open_deadlines[broken:]))


@case("T9")
def t9_pending_count_wrong(broken: bool) -> list[Violation]:
    team = world().team
    return _team_state(attrs.evolve(team, pending_by_sender=team.pending_by_sender.set("mem2", 1 + broken)))


@case("T8")
def t8_wait_blocks_while_asked_with_a_stand_in_decide_wait(broken: bool) -> list[Violation]:
    """No ledger makes the real decide_wait block while a question to the waiter is open; T8 guards it."""
    with _patched(ti, "decide_wait", _blind_wait, broken):
        return ti.ledger_violations(world().ledger)


# T7, T11-T13: one step of the ledger (the outcome built by hand where the reducer would not build it).


def _ledger_step(
    after_team: Team, *, changed: bool = True, command: c.TeamCommand | None = None
) -> list[Violation]:
    command = c.Tick(world().now, TEAM) if command is None else command
    return ti.step_violations(world().ledger, command, Accepted(_ledger(after_team), changed=changed))


@case("T11")
def t11_team_vanished(broken: bool) -> list[Violation]:
    ledger = world().ledger
    after = attrs.evolve(ledger, teams=ledger.teams.delete("t2")) if broken else ledger
    return ti.step_violations(ledger, c.Tick(world().now, TEAM), Accepted(after, changed=broken))


@case("T11")
def t11_revision_went_back(broken: bool) -> list[Violation]:
    team = _edit(world().team)
    return _ledger_step(attrs.evolve(team, revision=team.revision - 2 * broken))


@case("T11")
def t11_revision_rose_by_two(broken: bool) -> list[Violation]:
    team = _edit(world().team)
    return _ledger_step(attrs.evolve(team, revision=team.revision + broken))


@case("T11")
def t11_change_kept_the_revision(broken: bool) -> list[Violation]:
    team = _edit(world().team)
    return _ledger_step(attrs.evolve(team, revision=team.revision - broken))


@case("T11")
def t11_revision_bumped_without_a_change(broken: bool) -> list[Violation]:
    team = world().team
    return _ledger_step(attrs.evolve(team, revision=team.revision + 1) if broken else team, changed=broken)


@case("T11")
def t11_unchanged_outcome_with_another_ledger(broken: bool) -> list[Violation]:
    return _ledger_step(_edit(world().team), changed=not broken)


@case("T12")
def t12_exchange_lost(broken: bool) -> list[Violation]:
    team = _edit(world().team)
    if broken:
        order = tuple(exchange_id for exchange_id in team.exchange_order if exchange_id != "q2")
        team = attrs.evolve(team, exchanges=team.exchanges.delete("q2"), exchange_order=order)
    return _ledger_step(team)


@case("T12")
def t12_membership_lost(broken: bool) -> list[Violation]:
    team = _edit(world().ledger.teams["t2"])
    if broken:
        team = attrs.evolve(team, members=Map(), member_order=(), keys=Map())
    return _ledger_step(team)


@case("T12")
def t12_ended_question_changed_state(broken: bool) -> list[Violation]:
    state = QuestionState.CANCELLED if broken else QuestionState.EXPIRED
    return _ledger_step(_exchange(_edit(world().team), "q3", state=state))


@case("T12")
def t12_answer_changed(broken: bool) -> list[Violation]:
    return _ledger_step(_answer(_edit(world().team), "q2", text="8081" if broken else "8080"))


def _ask(question_id: str) -> c.Ask:
    return c.Ask(world().now, TEAM, question_id, "mem2", "Which branch?", member_key="key1")


@case("T13")
def t13_accepted_ask_left_no_exchange(broken: bool) -> list[Violation]:
    outcome = team_step(world().ledger, _ask("q9"))
    assert isinstance(outcome, Accepted)
    return ti.step_violations(world().ledger, _ask("q9"), Accepted(world().ledger) if broken else outcome)


@case("T13")
def t13_accepted_ask_left_an_ended_exchange(broken: bool) -> list[Violation]:
    outcome = team_step(world().ledger, _ask("q9"))
    assert isinstance(outcome, Accepted)
    if broken:  # accepted as new, yet the question under its id is q2, answered long ago
        return ti.step_violations(world().ledger, _ask("q2"), Accepted(world().ledger))
    return ti.step_violations(world().ledger, _ask("q9"), outcome)


@case("T7")
def t7_late_reply_resumes_the_asker(broken: bool) -> list[Violation]:
    before = _ledger(_exchange(world().team, "q3", answer=None))  # q3 expired unanswered
    late = c.Reply(world().now, TEAM, "q3", "localhost", member_key="key2")
    outcome = team_step(before, late)
    assert isinstance(outcome, Accepted)
    if broken:
        after = outcome.state.teams[TEAM]
        resume = answer_notice(after, after.exchanges["q3"], DEFAULT_LIMITS)
        return ti.step_violations(before, late, attrs.evolve(outcome, effects=(*outcome.effects, resume)))
    # Neither another kind of notice in the late reply's step nor an on-time reply's continuation is one.
    question = question_notice(world().team, world().team.exchanges["q1"])
    on_time = c.Reply(world().now, TEAM, "q1", "GET /state", member_key="key1")
    return ti.step_violations(
        before, late, attrs.evolve(outcome, effects=(*outcome.effects, question))
    ) + ti.step_violations(world().ledger, on_time, team_step(world().ledger, on_time))


# T14: repeating an accepted operation.


def _asked() -> tuple[Ledger, Accepted[Ledger]]:
    outcome = team_step(world().ledger, _ask("q9"))
    assert isinstance(outcome, Accepted)
    return outcome.state, outcome


@case("T14")
def t14_repeat_changes_the_ledger(broken: bool) -> list[Violation]:
    after, outcome = _asked()
    return ti.repeat_violations(world().ledger if broken else after, _ask("q9"), outcome)


@case("T14")
def t14_repeat_is_rejected(broken: bool) -> list[Violation]:
    after, outcome = _asked()
    if broken:  # the recorded question no longer matches the ask that made it: the repeat is a conflict
        after = _ledger(_exchange(after.teams[TEAM], "q9", text="Which tag?"))
    return ti.repeat_violations(after, _ask("q9"), outcome)


@case("T14")
def t14_repeat_returns_another_record(broken: bool) -> list[Violation]:
    after, outcome = _asked()
    other = world().team.exchanges["q1"]
    return ti.repeat_violations(after, _ask("q9"), attrs.evolve(outcome, result=other) if broken else outcome)


# D1-D11 on one desk's state.


def _desk_state(desk: d.Desk, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    return di.desk_violations(desk, limits)


@case("D9")
def d9_delivery_records(broken: bool) -> list[Violation]:
    return _desk_state(world().desk, Limits(delivery_records=len(world().desk.notices) - broken))


@case("D9")
def d9_notice_bytes(broken: bool) -> list[Violation]:
    size = max(len(notice.text.encode()) for notice in world().desk.notices.values())
    return _desk_state(world().desk, Limits(notice_bytes=size - broken))


@case("D9")
def d9_unsent_per_agent(broken: bool) -> list[Violation]:
    return _desk_state(world().desk, Limits(queued_per_agent=3 - broken))  # agent1: one writing, two queued


@case("D9")
def d9_step_takes_the_desk_further_over_a_lowered_bound(broken: bool) -> list[Violation]:
    """Issue 16 item 12, "limits never corrupt a team", for the desk: agent1 holds three unsent notices, over
    a `queued_per_agent` lowered to two at a restart. A step that leaves that excess as it was is no violation
    (one more notice for agent2, within the bound); one that grows it (a fourth for agent1, as a reducer that
    forgot the bound would take it) is."""
    agent, membership = ("agent1", "mem1") if broken else ("agent2", "mem2")
    now = world().now
    submit = d.Submit(
        now,
        TEAM,
        "t1/q9/question",
        NoticeKind.QUESTION,
        "q9",
        membership,
        MACHINE,
        agent,
        now + MINUTE_MS,
        "Which branch?",
    )
    outcome = d.step(world().desk, submit)
    assert isinstance(outcome, Accepted), outcome
    return di.step_violations(world().desk, submit, outcome, Limits(queued_per_agent=2))


@case("D2")
def d2_two_notices_writing(broken: bool) -> list[Violation]:
    intro = world().desk.notices[INTRO1]
    if not broken:
        return _desk_state(world().desk)
    return _desk_state(
        _notice(
            world().desk,
            Q1N,
            state=S.WRITING,
            reason=None,
            started_at=intro.started_at,
            seen_at=intro.seen_at,
        )
    )


@case("D2", also=("D11",))
def d2_two_notices_writing_for_an_agent_without_a_session(broken: bool) -> list[Violation]:
    intro = world().desk.notices[INTRO1]
    desk = _notice(
        world().desk, Q1N, state=S.WRITING, reason=None, started_at=intro.started_at, seen_at=intro.seen_at
    )
    if not broken:
        return _desk_state(world().desk)
    return _desk_state(attrs.evolve(desk, sessions=desk.sessions.delete("agent1")))


@case("D2")
def d2_writing_slot_empty(broken: bool) -> list[Violation]:
    return _desk_state(_session(world().desk, "agent1", writing=None if broken else INTRO1))


@case("D2")
def d2_writing_slot_names_a_queued_notice(broken: bool) -> list[Violation]:
    return _desk_state(_session(world().desk, "agent1", writing=Q1N if broken else INTRO1))


@case("D2")
def d2_notice_behind_the_head_not_waiting_as_pressure(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, Q2A, reason=d.Reason.READY if broken else d.Reason.PRESSURE))


@case("D2")
def d2_head_not_waiting_while_another_is_written(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, Q1N, reason=d.Reason.READY if broken else d.Reason.PRESSURE))


@case("D11")
def d11_notices_without_a_session(broken: bool) -> list[Violation]:
    desk = world().desk
    return _desk_state(attrs.evolve(desk, sessions=desk.sessions.delete("agent2")) if broken else desk)


@case("D11")
def d11_session_filed_under_another_agent(broken: bool) -> list[Violation]:
    desk = world().desk
    return _desk_state(
        attrs.evolve(desk, sessions=desk.sessions.set("agent9", d.Session("agent8" if broken else "agent9")))
    )


@case("D11")
def d11_session_indexes_unknown_notices(broken: bool) -> list[Violation]:
    return _desk_state(_session(world().desk, "agent9", writing="t1/q9/question" if broken else None))


@case("D11")
def d11_notice_filed_under_another_id(broken: bool) -> list[Violation]:
    desk = world().desk
    if broken:
        desk = attrs.evolve(
            desk, notices=desk.notices.delete(INTRO3).set("t1/mem9/introduction", desk.notices[INTRO3])
        )
    return _desk_state(desk)


@case("D11")
def d11_seq_not_below_the_next(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, INTRO3, seq=world().desk.next_seq - 1 + broken))


@case("D11")
def d11_seq_below_one(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, INTRO3, seq=1 - broken))


@case("D11")
def d11_queued_without_a_reason(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, INTRO2, reason=None if broken else d.Reason.UNOBSERVED))


@case("D11")
def d11_queue_out_of_submission_order(broken: bool) -> list[Violation]:
    queue = world().desk.sessions["agent1"].queue
    return _desk_state(_session(world().desk, "agent1", queue=queue[::-1] if broken else queue))


@case("D11")
def d11_held_index_misses_a_held_notice(broken: bool) -> list[Violation]:
    held = world().desk.sessions["agent4"].held
    return _desk_state(_session(world().desk, "agent4", held=() if broken else held))


@case("D11")
def d11_timers_disagree(broken: bool) -> list[Violation]:
    timers = world().desk.sessions["agent1"].timers
    return _desk_state(_session(world().desk, "agent1", timers=timers[broken:]))


@case("D1")
def d1_written_state_without_a_write(broken: bool) -> list[Violation]:
    notice = world().desk.notices[INTRO3]
    return _desk_state(_notice(world().desk, INTRO3, started_at=None if broken else notice.started_at))


@case("D1")
def d1_writing_without_a_recorded_start(broken: bool) -> list[Violation]:
    notice = world().desk.notices[INTRO1]
    started, seen = (None, None) if broken else (notice.started_at, notice.seen_at)
    return _desk_state(_notice(world().desk, INTRO1, started_at=started, seen_at=seen))


@case("D1")
def d1_unsent_state_with_a_write(broken: bool) -> list[Violation]:
    at = world().now if broken else None
    return _desk_state(_notice(world().desk, Q2N, started_at=at, seen_at=at))


@case("D3")
def d3_write_without_an_idle_seen(broken: bool) -> list[Violation]:
    notice = world().desk.notices[INTRO3]
    return _desk_state(_notice(world().desk, INTRO3, seen_at=None if broken else notice.seen_at))


@case("D3")
def d3_idle_seen_after_the_write_began(broken: bool) -> list[Violation]:
    started = world().desk.notices[INTRO3].started_at
    assert started is not None
    return _desk_state(_notice(world().desk, INTRO3, seen_at=started + broken))


@case("D3")
def d3_idle_seen_too_long_before_the_write(broken: bool) -> list[Violation]:
    started = world().desk.notices[INTRO3].started_at
    assert started is not None
    seen = started - DEFAULT_LIMITS.observation_fresh_ms - broken
    return _desk_state(_notice(world().desk, INTRO3, seen_at=seen))


@case("D5")
def d5_write_from_before_the_restart(broken: bool) -> list[Violation]:
    started = world().desk.restarted_at - broken
    return _desk_state(_notice(world().desk, INTRO1, started_at=started, seen_at=started - 10))


@case("D5")
def d5_observation_from_before_the_restart(broken: bool) -> list[Violation]:
    return _desk_state(_session(world().desk, "agent1", observed_at=world().desk.restarted_at - broken))


@case("D7")
def d7_queued_while_its_team_is_held(broken: bool) -> list[Violation]:
    desk = world().desk
    return _desk_state(attrs.evolve(desk, held_teams=desk.held_teams | ({TEAM} if broken else set())))


@case("D7")
def d7_held_while_its_team_is_not(broken: bool) -> list[Violation]:
    desk = world().desk
    return _desk_state(attrs.evolve(desk, held_teams=desk.held_teams - ({"t2"} if broken else set())))


@case("D8")
def d8_withdrawn_without_a_reason(broken: bool) -> list[Violation]:
    return _desk_state(_notice(world().desk, Q2N, reason=None if broken else d.Reason.ANSWERED))


# D1-D7, D9, D11 on one desk's step.


def _desk_moved(after: d.Desk, command: d.DeskCommand | None = None) -> list[Violation]:
    command = d.Tick(world().now) if command is None else command
    return di.step_violations(world().desk, command, Accepted(after))


@case("D5")
def d5_restart_time_went_back(broken: bool) -> list[Violation]:
    desk = world().desk
    return _desk_moved(attrs.evolve(desk, restarted_at=desk.restarted_at - broken))


@case("D9")
def d9_delivery_record_disappeared(broken: bool) -> list[Violation]:
    """Reported, not a crash, even by the step that read the record (its D6 check has nothing to look at)."""
    desk = world().desk
    after = attrs.evolve(desk, notices=desk.notices.delete(INTRO3)) if broken else desk
    return _desk_moved(after, d.InboxRead(world().now, (INTRO3,)))


@case("D1")
def d1_new_notice_begins_past_queued(broken: bool) -> list[Violation]:
    desk = world().desk
    new = attrs.evolve(
        desk.notices[INTRO4],
        id="t2/q9/question",
        seq=desk.next_seq,
        state=S.WITHDRAWN if broken else S.HELD,
        reason=d.Reason.CANCELLED if broken else d.Reason.PAUSED,
    )
    grown = attrs.evolve(desk, notices=desk.notices.set(new.id, new), next_seq=desk.next_seq + 1)
    return _desk_moved(_reindexed(grown))


@case("D1")
def d1_move_outside_the_table(broken: bool) -> list[Violation]:
    if broken:  # withdrawn -> expired: both unsent and final, but no event leads from one to the other
        return _desk_moved(_notice(world().desk, Q2N, state=S.EXPIRED))
    return _desk_moved(_notice(world().desk, INTRO3, state=S.ACCEPTED))  # delivered -> accepted: a turn


@case("D1")
def d1_written_again(broken: bool) -> list[Violation]:
    notice = world().desk.notices[INTRO3]
    assert notice.started_at is not None and notice.seen_at is not None
    return _desk_moved(
        _notice(world().desk, INTRO3, started_at=notice.started_at + broken, seen_at=notice.seen_at + broken)
    )


def _rewritten(**changes: Any) -> d.Desk:
    """agent3's delivered introduction as after an owner's declared loss and its one rewrite: the lost write
    began at T-2 and was declared lost at T-1; the rewrite began at T (its recorded start)."""
    notice = world().desk.notices[INTRO3]
    assert notice.started_at is not None
    lost = {"lost_at": notice.started_at - 1, "lost_started_at": notice.started_at - 2}
    return _notice(world().desk, INTRO3, **{**lost, **changes})


@case("D1")
def d1_a_lost_write_nobody_declared(broken: bool) -> list[Violation]:
    return _desk_state(_rewritten(lost_at=None) if broken else _rewritten())


@case("D1")
def d1_declared_lost_without_an_earlier_write(broken: bool) -> list[Violation]:
    return _desk_state(_rewritten(lost_started_at=None) if broken else _rewritten())


@case("D1")
def d1_written_again_before_the_loss_was_declared(broken: bool) -> list[Violation]:
    started = world().desk.notices[INTRO3].started_at
    assert started is not None
    if not broken:
        return _desk_state(_rewritten())
    return _desk_state(_rewritten(lost_at=started + 1, lost_started_at=started - 2))


@case("D1")
def d1_the_record_of_a_lost_write_changed(broken: bool) -> list[Violation]:
    before = _rewritten()
    started = before.notices[INTRO3].lost_started_at
    assert started is not None
    after = _notice(before, INTRO3, lost_started_at=started - 1) if broken else before
    return di.step_violations(before, d.Tick(world().now), Accepted(after))


@case("D1")
def d1_writable_again_without_a_declared_loss(broken: bool) -> list[Violation]:
    """The real step of a declared loss, valid for the owner's Inspect(landed=False); the same change
    reported for any other command is a rewrite nobody allowed."""
    before = _notice(world().desk, INTRO3, state=S.UNCONFIRMED, reason=None)
    declared = d.Inspect(world().now, INTRO3, landed=False)
    outcome = d.step(before, declared, DEFAULT_LIMITS)
    assert isinstance(outcome, Accepted) and outcome.state.notices[INTRO3].lost_at is not None, outcome
    return di.step_violations(before, d.Tick(world().now) if broken else declared, outcome)


@case("D11")
def d11_notice_changed_what_it_is(broken: bool) -> list[Violation]:
    if broken:
        return _desk_moved(_notice(world().desk, INTRO3, text="another text"))
    return _desk_moved(_notice(world().desk, INTRO3, updated_at=world().now))


def _write(
    broken: bool, *, effects: tuple[object, ...] | None = None, command: d.DeskCommand | None = None
) -> list[Violation]:
    """The real write step; broken, the same step with other effects or reported for another command."""
    before, write_started, outcome = _write_step()
    if broken and effects is not None:
        outcome = attrs.evolve(outcome, effects=effects)
    return di.step_violations(before, command if broken and command is not None else write_started, outcome)


def _the_write() -> d.WriteNotice:
    return next(e for e in _write_step()[2].effects if isinstance(e, d.WriteNotice))


@case("D4")
def d4_effect_that_is_not_the_desks(broken: bool) -> list[Violation]:
    return _write(broken, effects=(_the_write(), fx.WithdrawNotice(TEAM, INTRO2)))


@case("D1")
def d1_one_step_writes_twice(broken: bool) -> list[Violation]:
    return _write(broken, effects=(_the_write(), _the_write()))


@case("D1")
def d1_write_without_the_queued_to_writing_move(broken: bool) -> list[Violation]:
    return _write(broken, effects=(attrs.evolve(_the_write(), notice_id=INTRO3),))


@case("D4")
def d4_write_of_another_text(broken: bool) -> list[Violation]:
    return _write(broken, effects=(attrs.evolve(_the_write(), text="rm -rf ~\n"),))


@case("D4")
def d4_write_into_another_session(broken: bool) -> list[Violation]:
    return _write(broken, effects=(attrs.evolve(_the_write(), agent_id="agent1"),))


@case("D3")
def d3_write_after_a_busy_recheck(broken: bool) -> list[Violation]:
    return _write(broken, command=attrs.evolve(_write_step()[1], seen=d.Observed.BUSY))


@case("D3")
def d3_write_without_a_recheck(broken: bool) -> list[Violation]:
    return _write(broken, command=d.Tick(world().now + 10))


def _offer(broken: bool, offer: d.WriteDue) -> list[Violation]:
    now = world().now
    before, outcome = _desk_step(d.Observe(now, "agent2", d.Observed.IDLE))  # offers agent2's head, ready
    assert d.WriteDue("agent2", INTRO2) in outcome.effects
    if broken:
        outcome = attrs.evolve(outcome, effects=(*outcome.effects, offer))
    return di.step_violations(before, d.Observe(now, "agent2", d.Observed.IDLE), outcome)


@case("D2")
def d2_write_offered_behind_the_head(broken: bool) -> list[Violation]:
    return _offer(broken, d.WriteDue("agent1", Q2A))


@case("D2")
def d2_write_offered_while_another_is_written(broken: bool) -> list[Violation]:
    return _offer(broken, d.WriteDue("agent1", Q1N))


@case("D2")
def d2_write_offered_to_an_unknown_session(broken: bool) -> list[Violation]:
    return _offer(broken, d.WriteDue("agent9", "t1/q9/question"))


@case("D3")
def d3_write_offered_on_a_session_not_fresh_idle(broken: bool) -> list[Violation]:
    return _offer(broken, d.WriteDue("agent3", Q4N))  # agent3's idle predates its last write's settling


@case("D5")
def d5_write_survives_the_restart(broken: bool) -> list[Violation]:
    before, outcome = _desk_step(d.Restart(world().now))
    return di.step_violations(before, d.Restart(world().now), Accepted(before) if broken else outcome)


@case("D6")
def d6_read_notice_not_withdrawn(broken: bool) -> list[Violation]:
    read = d.InboxRead(world().now, (Q1N, "t1/q9/question"))  # an id the desk never had is no notice to check
    before, outcome = _desk_step(read)
    return di.step_violations(before, read, Accepted(before) if broken else outcome)


@case("D6")
def d6_retrieved_answer_notice_not_withdrawn(broken: bool) -> list[Violation]:
    retrieved = d.AnswerRetrieved(world().now, Q2A)
    before, outcome = _desk_step(retrieved)
    return di.step_violations(before, retrieved, Accepted(before) if broken else outcome)


@case("D6", also=("D1",))
def d6_written_notice_withdrawn(broken: bool) -> list[Violation]:
    read = d.InboxRead(world().now, (INTRO3,))
    before, outcome = _desk_step(read)  # delivered stays delivered (a read marks it read)
    if broken:
        outcome = Accepted(_notice(before, INTRO3, state=S.WITHDRAWN, reason=d.Reason.INBOX))
    return di.step_violations(before, read, outcome)


@case("D7", also=("D1",))
def d7_release_queues_a_notice_that_was_not_held(broken: bool) -> list[Violation]:
    release = d.Release(world().now, "t2")
    before, outcome = _desk_step(release)
    if broken:  # agent2's withdrawn q3 notice comes back with the release
        state = _notice(outcome.state, Q3N, state=S.QUEUED, reason=d.Reason.PRESSURE)
        outcome = attrs.evolve(outcome, state=state)
    return di.step_violations(before, release, outcome)


# D8, D10, D11 across owner and destinations.


def _spanning(desk: d.Desk) -> list[Violation]:
    return di.system_violations(_system(desk), world().now)


@case("D11")
def d11_desk_filed_under_another_machine(broken: bool) -> list[Violation]:
    system = world().system
    if broken:
        system = attrs.evolve(system, desks=Map({"m-two": world().desk}))
    return di.system_violations(system, world().now)


@case("D8")
def d8_notice_of_an_unknown_team(broken: bool) -> list[Violation]:
    return _spanning(_notice(world().desk, INTRO3, team_id="t9" if broken else TEAM))


@case("D8")
def d8_notice_about_an_unknown_exchange(broken: bool) -> list[Violation]:
    return _spanning(_notice(world().desk, Q2N, subject_id="q9" if broken else "q2"))


@case("D8")
def d8_continuation_without_an_answer(broken: bool) -> list[Violation]:
    return _spanning(_notice(world().desk, Q2A, subject_id="q1" if broken else "q2"))


@case("D8")
def d8_continuation_of_a_late_answer(broken: bool) -> list[Violation]:
    return _spanning(_notice(world().desk, Q2A, subject_id="q3" if broken else "q2"))


@case("D8")
def d8_question_notice_unsent_after_its_question_ended(broken: bool) -> list[Violation]:
    return _spanning(_notice(world().desk, Q1N, subject_id="q2" if broken else "q4"))


@case("D10")
def d10_wait_blocks_while_asked_with_a_stand_in_decide_wait(broken: bool) -> list[Violation]:
    """No ledger makes the real decide_wait block while a question to the waiter is open; D10 guards it."""
    with _patched(di, "decide_wait", _blind_wait, broken):
        return di.system_violations(world().system, world().now)


# --- the tests ---------------------------------------------------------------------------------------------


def _param(case: Case) -> object:
    return pytest.param(
        case, id=case.name, marks=[pytest.mark.xfail(strict=True, reason=case.bug or "")] * bool(case.bug)
    )


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_each_check_fires_on_its_violation_and_not_on_the_valid_neighbour(case: Case) -> None:
    assert case.run(False) == []
    fired = case.run(True)
    assert {invariant for invariant, _detail in fired} == {case.invariant, *case.also}, fired


def _spec_ids() -> set[str]:
    rows = read_table("team-v1.md", "invariants") + read_table("delivery-v1.md", "invariants")
    return {row["id"] for row in rows}


def test_every_invariant_the_specs_list_has_a_check_seen_firing() -> None:
    """A new invariant in a spec needs a firing case here (or a reason it holds by construction)."""
    assert {case.invariant for case in CASES} | BY_CONSTRUCTION.keys() == _spec_ids()
    assert not BY_CONSTRUCTION.keys() & {case.invariant for case in CASES}


def _report_sites() -> Counter[str]:
    """How many places in the two modules report each invariant id: a new check adds one."""
    sites: Counter[str] = Counter()
    for module in ("invariants.py", "delivery_invariants.py"):
        for node in ast.walk(ast.parse((CORE / module).read_text(encoding="utf-8"))):
            first = node.elts[0] if isinstance(node, ast.Tuple) and node.elts else None
            invariant = str(first.value) if isinstance(first, ast.Constant) else ""
            if re.fullmatch(r"[TD]\d+", invariant):
                sites[invariant] += 1
    return sites


def test_every_reporting_check_has_at_least_one_case() -> None:
    """Each place that reports an invariant is one check; a check added without a case here fails this."""
    cases = Counter(case.invariant for case in CASES)
    sites = _report_sites()
    assert {
        invariant: (sites[invariant], cases[invariant])
        for invariant in sites
        if cases[invariant] < sites[invariant]
    } == {}


def test_t10_holds_by_construction() -> None:
    """T10 needs no check: a rejection is only a code, a detail and a bound, with no ledger (or desk) to
    differ, so a rejected step has nothing to check."""
    assert [field.name for field in attrs.fields(Rejected)] == ["code", "detail", "bound"]
    refused = Rejected(ErrorCode.NOT_FOUND, "no such question")
    assert ti.step_violations(world().ledger, _ask("q1"), refused) == []
    assert di.step_violations(world().desk, d.Tick(world().now), refused) == []


def test_t14_leaves_operations_without_an_id_alone() -> None:
    """Idempotence by id is for create, add, ask and reply; the others report nothing (a list, not None)."""
    tick = c.Tick(world().now, TEAM)
    outcome = team_step(world().ledger, tick)
    assert isinstance(outcome, Accepted)
    assert ti.repeat_violations(outcome.state, tick, outcome) == []


def test_check_step_raises_the_first_violation() -> None:
    """The debug-build form of the checks (the daemon's and the test drivers') raises what they report."""
    team = world().team
    broken_team = Accepted(_ledger(attrs.evolve(_edit(team), revision=team.revision + 3)))
    with pytest.raises(ProtocolViolation, match=r"^T11: "):
        ti.check_step(world().ledger, c.Tick(world().now, TEAM), broken_team)
    ti.check_step(world().ledger, c.Tick(world().now, TEAM), Accepted(_ledger(_edit(team))))
    desk = world().desk
    broken_desk = Accepted(attrs.evolve(desk, restarted_at=desk.restarted_at - 1))
    with pytest.raises(ProtocolViolation, match=r"^D5: "):
        di.check_step(desk, d.Tick(world().now), broken_desk)
    di.check_step(desk, d.Tick(world().now), Accepted(desk))


def test_a_step_checks_every_state_invariant_of_its_result() -> None:
    """step_violations and system_violations include the state invariants, not only the transition's."""
    team = _edit(world().team)
    miscounted = attrs.evolve(team, pending_by_sender=team.pending_by_sender.set("mem2", 2))
    tick = c.Tick(world().now, TEAM)
    assert {i for i, _ in ti.step_violations(world().ledger, tick, Accepted(_ledger(miscounted)))} == {"T9"}
    desk = _notice(world().desk, Q2N, reason=None)
    assert {i for i, _ in di.step_violations(world().desk, d.Tick(world().now), Accepted(desk))} == {"D8"}
    assert {i for i, _ in di.system_violations(_system(desk), world().now)} == {"D8"}
    assert di.system_violations(world().system, world().now) == []
    assert ti.ledger_violations(world().ledger) == []
