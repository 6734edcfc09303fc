# Issue 19: core/routing.py's behaviours pinned by pure tests (tests/test_routing.py adds a daemon and the
# model checker, too slow to run against every mutant): who hears a team-wide request when this machine is
# also a holder or is absent (the model), a request that names no team, and a machine new to a paused team.
from __future__ import annotations

from collections.abc import Collection
from functools import partial

import pytest

from harness.core import delivery as d
from harness.core import effects as fx
from harness.core.commands import PauseTeam
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import Ledger, NoticeKind
from harness.core.routing import Known, Route, restatement_routes, route, team_wide
from harness.core.system import desk_command
from tests.team_helpers import TEAM, Driver

HERE = "m-one"


def _ledger(paused: bool) -> Ledger:
    w = Driver().create(members=2)
    if paused:
        w.ok(PauseTeam(w.tick(), TEAM))
    return w.ledger


def _known(here: str | None, holders: Collection[str] = ()) -> Known:
    return Known(here, lambda team_id: holders if team_id == TEAM else ())


def _routed(ledger: Ledger, effect: object, known: Known) -> list[tuple[str, type[object]]]:
    translate = partial(desk_command, ledger, at=5, limits=DEFAULT_LIMITS)
    return [(r.machine_id, type(r.request)) for r in route(ledger, [effect], known, translate)]


def _introduction(machine: str, team_id: str = TEAM) -> fx.SubmitNotice:
    notice = fx.notice_id(team_id, "mem2", NoticeKind.INTRODUCTION)
    return fx.SubmitNotice(team_id, notice, NoticeKind.INTRODUCTION, "mem2", "mem2", machine, "agent2", 99)


def test_a_notice_goes_only_to_its_agents_machine() -> None:
    """Seed: "Local delivery is the default": a notice is submitted where its agent runs, never copied to
    this machine or the team's other holders."""
    assert _routed(_ledger(False), _introduction("m-two"), _known(HERE, {"m-three"})) == [("m-two", d.Submit)]


@pytest.mark.parametrize(
    ("paused", "here", "holders", "expected"),
    [
        (True, HERE, (), [("m-two", d.Hold), ("m-two", d.Submit)]),  # new to the pause: held first
        (True, None, (), [("m-two", d.Hold), ("m-two", d.Submit)]),  # the model has no `here`
        (True, "m-two", (), [("m-two", d.Submit)]),  # this machine's desk heard the pause itself
        (True, HERE, ("m-two",), [("m-two", d.Submit)]),  # a holder heard it
        (False, HERE, (), [("m-two", d.Submit)]),  # nothing to hold
    ],
)
def test_a_machine_is_held_first_only_when_new_to_a_paused_team(
    paused: bool, here: str | None, holders: tuple[str, ...], expected: list[tuple[str, type[object]]]
) -> None:
    assert _routed(_ledger(paused), _introduction("m-two"), _known(here, holders)) == expected


def test_a_notice_of_a_team_the_ledger_does_not_know_is_not_held() -> None:
    effect = _introduction("m-two", "t9")
    submit = d.Submit(5, "t9", effect.notice_id, effect.kind, "mem2", "mem2", "m-two", "agent2", 99, "hi")
    assert route(_ledger(True), [effect], _known(HERE), lambda _effect: submit) == (Route("m-two", submit),)


def test_a_team_wide_request_reaches_this_machine_once_and_first_then_the_holders_in_order() -> None:
    hold = d.Hold(5, TEAM)
    assert team_wide(_known(HERE, {"m-three", HERE, "m-two"}), hold) == [HERE, "m-three", "m-two"]
    assert team_wide(_known(None, {"m-three", "m-two"}), hold) == ["m-three", "m-two"]
    assert team_wide(_known(None), hold) == []
    assert team_wide(_known(HERE, {"m-two"}), d.Hold(5, "t9")) == [HERE]  # another team's holders


def test_a_withdrawal_goes_to_the_holders_of_the_team_its_notice_id_names() -> None:
    """A Withdraw names its notice, not its team: the team is the id's first part. An id that is no notice
    id names no team, so only this machine hears it."""
    known = _known(HERE, {"m-two"})
    named = d.Withdraw(5, fx.notice_id(TEAM, "q1", NoticeKind.QUESTION), d.Reason.CANCELLED)
    assert team_wide(known, named) == [HERE, "m-two"]
    assert team_wide(known, d.Withdraw(5, "not-a-notice-id", d.Reason.CANCELLED)) == [HERE]


def test_routes_keep_the_order_of_the_effects() -> None:
    ledger = _ledger(False)
    effects = [fx.HoldTeam(TEAM), _introduction("m-two"), fx.ReleaseTeam(TEAM)]
    translate = partial(desk_command, ledger, at=5, limits=DEFAULT_LIMITS)
    routes = route(ledger, effects, _known(HERE), translate)
    assert routes == (
        Route(HERE, d.Hold(5, TEAM)),
        Route("m-two", translate(effects[1])),
        Route(HERE, d.Release(5, TEAM)),
    )


def test_a_restatement_tells_every_owed_machine_the_team_wide_part_too() -> None:
    """A crash can fall between a ledger change and a destination's receipt: a machine owed a notice also
    hears the restated release, before its notice; a machine owed nothing and holding nothing hears
    nothing."""
    ledger = _ledger(False)
    team = ledger.teams[TEAM]
    translate = partial(desk_command, ledger, at=5, limits=DEFAULT_LIMITS)
    routes = restatement_routes(ledger, team, _known(None), translate, DEFAULT_LIMITS)
    assert [(r.machine_id, type(r.request)) for r in routes] == [
        (HERE, d.Release),
        (HERE, d.Submit),
        (HERE, d.Submit),
    ]
