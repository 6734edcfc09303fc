# A watcher's pushed changes are deltas (core/team_delta.py): applied to the view a watcher holds, a delta
# gives exactly the view the daemon would send whole, and carries only the records a step changed. The daemon
# side, bytes on the wire, is tests/test_watch_delta.py.
from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import commands as c
from harness.core.codec import team_view
from harness.core.records import Team
from harness.core.team_delta import HEADER_FIELDS, apply_team_delta, team_delta
from tests.team_helpers import TEAM, Driver

# One step of a random history: who asks whom; a reply or a cancel of the k-th latest question, by the member
# who may (its addressee, its asker), so that most steps change a record the older view already holds; time.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.sampled_from(["reply", "cancel"]), st.integers(0, 3)),
        st.tuples(st.just("tick"), st.integers(1, 900_000)),
    ),
    max_size=30,
)


def history(steps: list[tuple[Any, ...]]) -> list[Team]:
    """The team after each step (a rejected step leaves the ledger as it was)."""
    driver = Driver().create()
    teams = [driver.team]
    for kind, *numbers in steps:
        order = driver.team.exchange_order
        if kind == "ask":
            driver.ask(f"q{len(order)}", numbers[0], numbers[1], text=f"question {len(order)}")
        elif kind == "tick":
            driver.tick(numbers[0])
            driver.run(c.Tick(driver.now, TEAM))
        elif numbers[0] < len(order):
            exchange = driver.exchange(order[-1 - numbers[0]])
            if kind == "reply":
                key = next(k for k, m in driver.team.keys.items() if m == exchange.to)
                driver.run(c.Reply(driver.tick(), TEAM, exchange.id, "an answer", member_key=key))
            else:
                key = next(k for k, m in driver.team.keys.items() if m == exchange.from_)
                driver.run(c.Cancel(driver.tick(), TEAM, exchange.id, member_key=key))
        teams.append(driver.team)
    return teams


@settings(max_examples=150, deadline=None)
@given(STEPS, st.data())
def test_a_delta_applied_to_an_older_view_gives_the_newer_view(steps: list[Any], data: st.DataObject) -> None:
    teams = history(steps)
    newer = data.draw(st.integers(0, len(teams) - 1))
    older = data.draw(st.integers(0, newer))
    delta = team_delta(teams[older], teams[newer])
    assert delta is not None  # a team's orders only grow
    assert apply_team_delta(team_view(teams[older]), json.loads(json.dumps(delta))) == team_view(teams[newer])


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_a_delta_carries_only_what_changed(steps: list[Any]) -> None:
    """Consecutive teams: the delta holds the records the step replaced or added, nothing it shared."""
    teams = history(steps)
    for old, new in itertools.pairwise(teams):
        delta = team_delta(old, new)
        assert delta is not None
        changed = {e for e in new.exchange_order if old.exchanges.get(e) != new.exchanges[e]}
        assert {view["id"] for view in delta["exchanges"]} == changed
        if old is new:
            assert delta["exchanges"] == [] and delta["members"] == []


def test_the_header_is_the_view_without_its_lists() -> None:
    team = Driver().create().team
    view = team_view(team)
    assert set(HEADER_FIELDS) == set(view) - {"members", "exchanges"}
    delta = team_delta(team, team)
    assert delta is not None
    assert {key: view[key] for key in HEADER_FIELDS} == {key: delta[key] for key in HEADER_FIELDS}


def test_orders_that_do_not_extend_have_no_delta() -> None:
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.ask("q2", 2, 3)
    team = driver.team
    reordered = attrs.evolve(team, exchange_order=tuple(reversed(team.exchange_order)))
    assert team_delta(team, reordered) is None
    fewer_members = attrs.evolve(team, member_order=team.member_order[1:])
    assert team_delta(team, fewer_members) is None


def test_a_changed_exchange_replaces_its_record_in_place() -> None:
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.ask("q2", 2, 3)
    old = driver.team
    driver.reply("q1", 2)
    delta = team_delta(old, driver.team)
    assert delta is not None and [view["id"] for view in delta["exchanges"]] == ["q1"]
    applied = apply_team_delta(team_view(old), delta)
    assert applied is not None
    assert [(view["id"], view["state"]) for view in applied["exchanges"]] == [
        ("q1", "answered"),
        ("q2", "open"),
    ]


def test_a_delta_is_refused_on_a_view_at_another_revision() -> None:
    driver = Driver().create()
    base = driver.team
    driver.ask("q1", 1, 2)
    middle = driver.team
    driver.ask("q2", 2, 3)
    delta = team_delta(middle, driver.team)
    assert delta is not None
    assert apply_team_delta(team_view(base), delta) is None


def test_a_malformed_delta_is_refused_not_a_crash() -> None:
    """A pushed frame is input: a delta not of the daemon's shape is refused (the watcher resubscribes)."""
    view = team_view(Driver().create().team)
    header = {key: view[key] for key in HEADER_FIELDS} | {"baseRevision": view["revision"]}
    good = {**header, "members": [], "exchanges": []}
    assert apply_team_delta(view, good) is not None
    nameless = {key: value for key, value in good.items() if key != "name"}
    for delta in (
        None,
        [],
        "delta",
        header,
        {**good, "members": "x"},
        {**good, "exchanges": [{"no": "id"}]},
        nameless,
    ):
        assert apply_team_delta(view, delta) is None, delta
