# The owner's ledger and two machines' desks, composed by core/system.py, driven by Hypothesis through
# interleavings of asks, replies, cancels, pauses, terminal observations, write reports, turns, restarts,
# inbox reads, answer retrievals and clock jumps across four agents. After every step the core invariants
# (D1-D11, spanning owner and destinations) must hold, and a model of the physical world kept here checks
# the two things no state can show: no notice was ever written twice, and no write happened while the
# terminal's latest screen was anything but idle.
from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.delivery_invariants import system_violations, transition_violations
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import QuestionState
from harness.core.system import (
    AtDesk,
    Routed,
    System,
    answer_retrieved_action,
    desk_command,
    inbox_read_action,
    step_system,
)
from harness.core.team import restatement

TEAM = "t1"
AGENTS = {"a1": "m1", "a2": "m1", "a3": "m2", "a4": "m2"}  # agent -> machine
MEMBERS = {agent: f"mem-{agent}" for agent in AGENTS}
KEYS = {agent: f"key-{agent}" for agent in AGENTS}
LIMITS = Limits(queued_per_agent=4, delivery_records=60, ttl_min_ms=1_000, notice_ttl_ms=120_000)
SCREENS = list(d.Observed)
agents = st.sampled_from(sorted(AGENTS))


class DeliverySystem(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.system = System()
        self.now = 1_000
        self.screen: dict[str, d.Observed] = dict.fromkeys(AGENTS, d.Observed.OFFLINE)  # the world
        self.written: dict[str, int] = {}  # notice id -> physical writes
        self.asks = 0

    # --- driving --------------------------------------------------------------------------------------------

    def apply(self, action: c.TeamCommand | AtDesk) -> Accepted[System] | Rejected:
        before = self.system
        outcome = step_system(before, action, LIMITS)
        if isinstance(outcome, Rejected):
            return outcome
        after = outcome.state
        for machine_id, desk in after.desks.items():
            old = before.desks.get(machine_id)
            if old is not None:
                assert transition_violations(old, desk) == []
        for effect in outcome.effects:
            if isinstance(effect, Routed) and isinstance(effect.effect, d.WriteNotice):
                write = effect.effect
                assert self.screen[write.agent_id] is d.Observed.IDLE, (
                    "wrote into a terminal that was not idle"
                )
                self.written[write.notice_id] = self.written.get(write.notice_id, 0) + 1
        refused = [e for e in outcome.events if type(e).__name__ == "RouteRefused"]
        for event in refused:  # only a full bound may refuse routed work, and it is reported, not lost
            assert event.rejected.bound is not None, event
        self.system = after
        return outcome

    def at(self, ms: int = 10) -> int:
        self.now += ms
        return self.now

    def desk(self, agent: str) -> d.Desk | None:
        return self.system.desks.get(AGENTS[agent])

    def session(self, agent: str) -> d.Session | None:
        desk = self.desk(agent)
        return desk.sessions.get(agent) if desk is not None else None

    def open_questions(self) -> list[Any]:
        team = self.system.ledger.teams[TEAM]
        return [team.exchanges[q] for _deadline, q in team.open_deadlines]

    # --- the owner's side -----------------------------------------------------------------------------------

    @initialize()
    def create(self) -> None:
        members = tuple(
            c.NewMember(MEMBERS[a], AGENTS[a], a, f"name-{a}", f"role {a}", KEYS[a]) for a in sorted(AGENTS)
        )
        assert isinstance(self.apply(c.CreateTeam(self.at(), TEAM, "Team", members)), Accepted)

    @rule(asker=agents, to=agents, ttl=st.sampled_from([2_000, 30_000, 100_000]))
    def ask(self, asker: str, to: str, ttl: int) -> None:
        self.asks += 1
        self.apply(
            c.Ask(
                self.at(),
                TEAM,
                f"q{self.asks}",
                MEMBERS[to],
                f"question {self.asks}?",
                ttl_ms=ttl,
                member_key=KEYS[asker],
            )
        )

    @rule(data=st.data())
    def reply(self, data: st.DataObject) -> None:
        team = self.system.ledger.teams[TEAM]
        if not team.exchange_order:
            return
        exchange = team.exchanges[data.draw(st.sampled_from(team.exchange_order))]
        addressee = next(a for a in AGENTS if MEMBERS[a] == exchange.to)
        self.apply(
            c.Reply(self.at(), TEAM, exchange.id, f"answer to {exchange.id}", member_key=KEYS[addressee])
        )

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        open_ = self.open_questions()
        if open_:
            self.apply(c.Cancel(self.at(), TEAM, data.draw(st.sampled_from(open_)).id))

    @rule(pause=st.sampled_from([True, False, False]))
    def pause_or_resume(self, pause: bool) -> None:
        self.apply(c.PauseTeam(self.at(), TEAM) if pause else c.ResumeTeam(self.at(), TEAM))

    @rule(jump=st.sampled_from([100, 2_500, 6_000, 40_000]))
    def clock(self, jump: int) -> None:
        now = self.at(jump)
        self.apply(c.Tick(now, TEAM))
        for machine in sorted(self.system.desks):
            self.apply(AtDesk(machine, d.Tick(now)))

    # --- the destinations' side -----------------------------------------------------------------------------

    @rule(agent=agents, screen=st.sampled_from(SCREENS))
    def observe(self, agent: str, screen: d.Observed) -> None:
        self.screen[agent] = screen
        if self.desk(agent) is not None:
            self.apply(AtDesk(AGENTS[agent], d.Observe(self.at(), agent, screen)))

    @rule(agent=agents, age=st.sampled_from([0, 0, 1_000, 6_000]), screen=st.sampled_from([None, *SCREENS]))
    def write_started(self, agent: str, age: int, screen: d.Observed | None) -> None:
        """The shell rechecks the terminal at the boundary (the screen may change just then) and asks."""
        session = self.session(agent)
        if session is None or not session.queue:
            return
        if screen is not None:
            self.screen[agent] = screen
        now = self.at()
        self.apply(
            AtDesk(AGENTS[agent], d.WriteStarted(now, session.queue[0], self.screen[agent], now - age))
        )

    @rule(agent=agents)
    def shell_writes_on_a_settled_idle(self, agent: str) -> None:
        """The common path: the terminal settles idle; the shell looks, rechecks at the boundary, writes."""
        session = self.session(agent)
        if session is None or not session.queue:
            return
        self.screen[agent] = d.Observed.IDLE
        self.apply(AtDesk(AGENTS[agent], d.Observe(self.at(LIMITS.write_settle_ms), agent, d.Observed.IDLE)))
        session = self.session(agent)
        assert session is not None
        if session.queue:
            now = self.at()
            self.apply(AtDesk(AGENTS[agent], d.WriteStarted(now, session.queue[0], d.Observed.IDLE, now - 5)))

    @rule(agent=agents, result=st.sampled_from(list(d.WriteResult)))
    def write_finished(self, agent: str, result: d.WriteResult) -> None:
        session = self.session(agent)
        if session is None or session.writing is None:
            return
        if result is d.WriteResult.OK:
            self.screen[agent] = d.Observed.BUSY  # the engine took the paste
        self.apply(AtDesk(AGENTS[agent], d.WriteFinished(self.at(), session.writing, result)))

    @rule(agent=agents, data=st.data())
    def turn_observed(self, agent: str, data: st.DataObject) -> None:
        desk = self.desk(agent)
        if desk is None:
            return
        candidates = sorted(
            n for n, notice in desk.notices.items() if notice.agent_id == agent and n in self.written
        )
        if candidates:
            self.screen[agent] = d.Observed.BUSY
            self.apply(
                AtDesk(AGENTS[agent], d.TurnObserved(self.at(), data.draw(st.sampled_from(candidates))))
            )

    @rule(machine=st.sampled_from(["m1", "m2"]))
    def restart(self, machine: str) -> None:
        if machine in self.system.desks:
            self.apply(AtDesk(machine, d.Restart(self.at())))

    @rule(agent=agents)
    def inbox_read(self, agent: str) -> None:
        action = inbox_read_action(self.system, TEAM, MEMBERS[agent], self.at())
        assert action is not None
        self.apply(action)

    @rule(data=st.data())
    def answer_retrieved(self, data: st.DataObject) -> None:
        team = self.system.ledger.teams[TEAM]
        answered = [q for q in team.exchange_order if team.exchanges[q].answer is not None]
        if answered:
            action = answer_retrieved_action(
                self.system, TEAM, data.draw(st.sampled_from(answered)), self.at()
            )
            assert action is not None
            self.apply(action)

    @precondition(lambda self: bool(self.written))
    @rule(data=st.data())
    def inspect(self, data: st.DataObject) -> None:
        """The owner's resolution of a written notice; a declared loss only where the owner's side allows it
        (`loss_moot`), and the desk then permits one more write, never a third."""
        notice_id = data.draw(st.sampled_from(sorted(self.written)))
        machine = next(m for m, desk in self.system.desks.items() if notice_id in desk.notices)
        landed = data.draw(st.booleans())
        notice = self.system.desks[machine].notices[notice_id]
        if not landed and d.loss_moot(self.system.ledger.teams[TEAM], notice) is not None:
            return
        outcome = self.apply(AtDesk(machine, d.Inspect(self.at(), notice_id, landed=landed)))
        if not landed and notice.state is d.DeliveryState.UNCONFIRMED and notice.lost_at is not None:
            assert isinstance(outcome, Rejected) and outcome.code is ErrorCode.CONFLICT, outcome

    # --- after every step -----------------------------------------------------------------------------------

    @invariant()
    def core_invariants_hold(self) -> None:
        assert system_violations(self.system, self.now, LIMITS) == []

    @invariant()
    def nothing_written_twice_without_a_declared_loss_between(self) -> None:
        for desk in self.system.desks.values():
            for notice_id, notice in desk.notices.items():
                writes = self.written.get(notice_id, 0)
                declared = notice.lost_at is not None
                assert writes == declared + (notice.started_at is not None), (notice, writes)

    @invariant()
    def no_continuation_for_ended_work(self) -> None:
        team = self.system.ledger.teams[TEAM]
        for notice_id in self.written:
            _team, subject, kind = notice_id.split("/")
            if kind == "answer":
                exchange = team.exchanges[subject]
                assert exchange.state is QuestionState.ANSWERED and exchange.answer is not None
                assert not exchange.answer.late


    @invariant()
    def restating_the_ledger_changes_no_desk(self) -> None:
        # What a daemon restates after a restart: every desk already has it, so nothing moves. (A notice no
        # desk holds, refused earlier, is offered again; that is the restatement's purpose, so it is skipped.)
        team = self.system.ledger.teams.get(TEAM)
        if team is None:
            return
        for effect in restatement(team, LIMITS):
            command = desk_command(self.system.ledger, effect, self.now, LIMITS)
            for machine_id, desk in self.system.desks.items():
                if isinstance(command, d.Submit) and (
                    command.machine_id != machine_id or command.notice_id not in desk.notices
                ):
                    continue
                outcome = d.step(desk, command, LIMITS)
                assert isinstance(outcome, Accepted) and not outcome.changed, (command, outcome)


DeliverySystem.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestDeliverySystem = DeliverySystem.TestCase
