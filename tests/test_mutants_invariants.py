# Issue 19: behaviours of core/invariants.py that scripts/mutate_core.py found no test pinned. Each check
# firing on its violation is tests/test_invariants_fire.py; here is T1's measure itself (bound_excess, which
# `harness doctor` lists) and how a step tells an excess it inherited from one it grew: a bound lowered at a
# restart (HARNESS_LIMITS) leaves a team over it, refusing new work of that kind, but not corrupt.
from __future__ import annotations

import attrs

from harness.core import commands as c
from harness.core import invariants as ti
from harness.core.limits import MINUTE_MS, Limits
from harness.core.outcome import Accepted
from harness.core.records import Ledger
from harness.core.team import step
from tests.team_helpers import TEAM, Driver, member

UNBOUNDED = Limits(teams=99, memberships=99, exchanges=99, pending_per_sender=99, asks_per_minute=99)


def _busy() -> Driver:
    """Team t1: mem1 asked mem2 and mem3 (both open); mem2 asked mem3 (open); another team t2 with one
    member."""
    d = Driver(UNBOUNDED).create(members=3)
    d.ask("q1", 1, 2)
    d.ask("q2", 1, 3)
    d.ask("q3", 2, 3)
    d.ok(c.CreateTeam(d.tick(), "t2", "Other", (member(4),)))
    return d


def test_bound_excess_names_each_bound_by_subject_with_how_far_it_reaches() -> None:
    """T1's measure: by subject, the count that is over its bound (1 for a record over a size bound), and
    nothing at a bound."""
    ledger = _busy().ledger
    at_bounds = Limits(teams=2, memberships=3, exchanges=3, pending_per_sender=2, asks_per_minute=3)
    assert ti.bound_excess(ledger, at_bounds) == {}
    over = Limits(teams=1, memberships=2, exchanges=2, pending_per_sender=1, asks_per_minute=2)
    assert {subject: amount for subject, (amount, _detail) in ti.bound_excess(ledger, over).items()} == {
        "teams": 2,
        "t1/memberships": 3,
        "t1/exchanges": 3,
        "t1/pending_per_sender/mem1": 2,
        "t1/asks_per_minute": 3,
    }
    assert ti.bound_excess(ledger, attrs.evolve(at_bounds, question_chars=1)).keys() == {
        "t1/text/q1",
        "t1/text/q2",
        "t1/text/q3",
    }
    assert ti.bound_excess(ledger, UNBOUNDED) == {}


def test_a_rate_window_spanning_a_minute_is_an_excess_and_one_just_short_of_it_is_not() -> None:
    team = _busy().team
    first = team.recent_asks[0]
    for last, over in ((first + MINUTE_MS - 1, False), (first + MINUTE_MS, True)):
        ledger = Ledger(_busy().ledger.teams.set(TEAM, attrs.evolve(team, recent_asks=(first, last))))
        assert ("t1/rate_window" in ti.bound_excess(ledger, UNBOUNDED)) is over, last


def _stepped(d: Driver, command: c.TeamCommand) -> tuple[Ledger, Accepted[Ledger]]:
    before = d.ledger
    outcome = step(before, command, UNBOUNDED)
    assert isinstance(outcome, Accepted), outcome
    return before, outcome


def test_a_step_that_keeps_an_inherited_excess_is_no_violation_and_one_that_grows_it_is() -> None:
    """Issue 16 item 12, "limits never corrupt a team": mem1 holds two open questions, over a
    `pending_per_sender` lowered to one. A step that leaves that excess as it was (mem3 asks its first)
    breaks nothing; one that grows it (mem1 asks a third, as a reducer that forgot the bound would take it)
    is T1, and so is one that takes a member at the bound over it (mem2 asks its second)."""
    lowered = Limits(pending_per_sender=1)
    d = _busy()
    assert {invariant for invariant, _ in ti.ledger_violations(d.ledger, lowered)} == {"T1"}
    ask = c.Ask(d.tick(), TEAM, "q4", "mem1", "x", member_key="key3")
    before, kept = _stepped(d, ask)
    assert ti.step_violations(before, ask, kept, lowered) == []
    ask = c.Ask(d.tick(), TEAM, "q5", "mem3", "x", member_key="key1")
    before, grown = _stepped(d, ask)
    assert ti.step_violations(before, ask, grown, lowered) == [("T1", "'mem1' has 3 open questions")]
    ask = c.Ask(d.tick(), TEAM, "q6", "mem1", "x", member_key="key2")
    before, reached = _stepped(d, ask)
    assert ti.step_violations(before, ask, reached, lowered) == [("T1", "'mem2' has 2 open questions")]


# Where each public check of core/invariants.py is seen firing on a state or step that breaks it.
FIRING_CASES = {
    "ledger_violations": "tests/test_invariants_fire.py (every T1-T9 case)",
    "team_violations": "test_team_violations_reports_a_team_broken_on_its_own below",
    "step_violations": "tests/test_invariants_fire.py (T7, T11-T13) and the excess cases above",
    "repeat_violations": "tests/test_invariants_fire.py (T14)",
    "check_step": "tests/test_invariants_fire.py::test_check_step_raises_the_first_violation",
    "bound_excess": "test_bound_excess_names_each_bound_by_subject_with_how_far_it_reaches above",
}


def test_every_public_check_has_a_place_where_it_is_seen_firing() -> None:
    """Issue 19: "for every invariant function, a test that builds a state violating exactly that
    invariant and shows the function reports it". A new public check needs a line above, and a test."""
    public = {
        name
        for name, value in vars(ti).items()
        if callable(value) and getattr(value, "__module__", "") == ti.__name__ and not name.startswith("_")
    }
    assert public == FIRING_CASES.keys()


def test_team_violations_reports_a_team_broken_on_its_own() -> None:
    """The per-team half of ledger_violations, as the daemon checks one team: an answered question without
    its answer is T3, and only T3; the team as the reducer left it reports nothing."""
    d = _busy()
    d.reply("q1", 2)
    assert ti.team_violations(d.team) == []
    broken = attrs.evolve(d.exchange("q1"), answer=None)
    team = attrs.evolve(d.team, exchanges=d.team.exchanges.set("q1", broken))
    assert [invariant for invariant, _ in ti.team_violations(team)] == ["T3"]
