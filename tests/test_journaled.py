# The stamping and checked stepping the ledger, desk and board runners share (io/journaled.py), on the real
# team reducer: a stamp never goes back when the clock does, a step that breaks an invariant says why the
# runner stops (and is not checked when invariants are off), and a replay refuses an entry of another team.
from __future__ import annotations

import attrs
import pytest

from harness.core.codec import command_from_json, command_to_json
from harness.core.commands import Ask, CreateTeam, NewMember, TeamCommand
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, Ledger, QuestionState
from harness.io.journal_files import Entry, Recovery
from harness.io.journaled import Reducer, ReplayError, Stepper, replay_entries
from harness.io.ledger_runner import TEAM_REDUCER

MEMBERS = (
    NewMember("m1", "host", "a1", "alice", "", "k1"),
    NewMember("m2", "host", "a2", "bob", "", "k2"),
)


def test_a_stamp_never_goes_back_when_the_clock_does() -> None:
    times = iter([500, 400, 600, 100, 700])
    stepper = Stepper(TEAM_REDUCER, DEFAULT_LIMITS, lambda: next(times), None)
    stamped = [stepper.stamped(CreateTeam(0, "t1", "x")).at for _ in range(4)]
    assert stamped == [500, 500, 600, 600]
    stepper.last_at = 900  # a replay saw a later command
    assert stepper.stamp() == 900


def test_a_broken_invariant_says_why_and_only_when_checked() -> None:
    def answering(ledger: Ledger, command: TeamCommand, limits: Limits) -> Accepted[Ledger] | Rejected:
        """The team reducer, but an ask's question is answered the moment it opens (T3 forbids it)."""
        outcome = TEAM_REDUCER.step(ledger, command, limits)
        if not isinstance(command, Ask) or not isinstance(outcome, Accepted):
            return outcome
        team = outcome.state.teams["t1"]
        broken = attrs.evolve(team.exchanges[command.id], state=QuestionState.ANSWERED)
        team = attrs.evolve(team, exchanges=team.exchanges.set(command.id, broken))
        return attrs.evolve(outcome, state=Ledger(outcome.state.teams.set("t1", team)))

    faulty = Reducer(answering, TEAM_REDUCER.violations)
    told: list[tuple[str, tuple[str, str]]] = []

    def violated(what: str, broken: tuple[str, str]) -> str:
        told.append((what, broken))
        return f"stop: {what}"

    created = TEAM_REDUCER.step(EMPTY_LEDGER, CreateTeam(1, "t1", "x", MEMBERS), DEFAULT_LIMITS)
    assert isinstance(created, Accepted)
    ask = Ask(2, "t1", "q1", "bob", "why?", member_key="k1")
    outcome, why = Stepper(faulty, DEFAULT_LIMITS, lambda: 2, violated).checked(created.state, ask, "here")
    assert why == "stop: Ask here" and [(what, code) for what, (code, _) in told] == [("Ask here", "T3")]
    assert isinstance(outcome, Accepted)
    unchecked, why = Stepper(faulty, DEFAULT_LIMITS, lambda: 2, None).checked(created.state, ask, "here")
    assert why is None and unchecked == outcome and len(told) == 1


def test_a_replay_refuses_an_entry_another_store_owns() -> None:
    create = CreateTeam(1, "t1", "x", MEMBERS)
    ask = Ask(2, "t1", "q1", "bob", "why?", member_key="k1")
    entries = [Entry(seq, command_to_json(command)) for seq, command in enumerate((create, ask), 1)]
    recovery = Recovery(0, None, tuple(entries))
    ledger, last_at = replay_entries(
        TEAM_REDUCER, EMPTY_LEDGER, recovery, command_from_json, limits=DEFAULT_LIMITS
    )
    assert last_at == 2 and "q1" in ledger.teams["t1"].exchanges
    with pytest.raises(ReplayError, match="journal entry 1 is not ours"):
        replay_entries(
            TEAM_REDUCER,
            EMPTY_LEDGER,
            recovery,
            command_from_json,
            limits=DEFAULT_LIMITS,
            stranger=lambda command: "is not ours",
        )
