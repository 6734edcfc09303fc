# The one routing function (core/routing.py): where each of the owner's desk commands goes, read from the
# spec's table, checked on small ledgers, caught by the model checker when broken, and run by a real daemon
# for a paired machine new to a paused team.
from __future__ import annotations

from collections.abc import Collection
from functools import partial
from pathlib import Path

import pytest
import trio

from harness.core import delivery as d
from harness.core import effects as fx
from harness.core.codec import DESK_COMMAND_NAMES
from harness.core.commands import AddMember, CreateTeam, NewMember, PauseTeam
from harness.core.limits import DEFAULT_LIMITS
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, Ledger, NoticeKind
from harness.core.routing import ROUTES, Known, RestatementPart, Route, restatement_routes, route
from harness.core.system import desk_command
from harness.core.team import step
from harness.models.checker import explore
from harness.models.mutants import CAUGHT_BY, MUTANTS
from harness.models.scenarios import SCENARIOS
from tests.spec_tables import read_table
from tests.test_relay_restate import TEAM_ID, call, machines, notice_states

TEAM = "t1"
HERE = "owner"


def member(name: str, machine: str) -> NewMember:
    return NewMember(f"m-{name}", machine, f"a-{name}", name, "peer", f"k-{name}")


def ledger_of(*commands: object) -> Ledger:
    ledger = EMPTY_LEDGER
    for command in commands:
        outcome = step(ledger, command)  # type: ignore[arg-type]
        assert isinstance(outcome, Accepted), outcome
        ledger = outcome.state
    return ledger


def known(holders: Collection[str] = ()) -> Known:
    return Known(HERE, lambda team_id: holders if team_id == TEAM else ())


def routed(ledger: Ledger, effect: object, holders: Collection[str] = ()) -> list[tuple[str, str]]:
    translate = partial(desk_command, ledger, at=5, limits=DEFAULT_LIMITS)
    routes = route(ledger, [effect], known(holders), translate)
    return [(r.machine_id, DESK_COMMAND_NAMES[type(r.request)]) for r in routes]


def introduction(ledger: Ledger, name: str, machine: str) -> fx.SubmitNotice:
    member_id = f"m-{name}"
    notice = fx.notice_id(TEAM, member_id, NoticeKind.INTRODUCTION)
    kind = NoticeKind.INTRODUCTION
    return fx.SubmitNotice(TEAM, notice, kind, member_id, member_id, machine, f"a-{name}", 99)


CREATED = CreateTeam(1, TEAM, "team", (member("alice", HERE), member("bob", "b")))
ACTIVE = ledger_of(CREATED, AddMember(2, TEAM, member("carol", "c")))
PAUSED = ledger_of(CREATED, PauseTeam(2, TEAM), AddMember(3, TEAM, member("carol", "c")))


def test_the_spec_routing_table_is_the_codes() -> None:
    rows = read_table("remote-v1.md", "routing")
    spec = {row["command"]: (row["goes to"], row["before it, at that machine"]) for row in rows}
    code = {DESK_COMMAND_NAMES[cls]: (goes.value, first.value) for cls, (goes, first) in ROUTES.items()}
    assert spec == code


def test_a_machine_new_to_a_paused_team_is_held_before_its_first_notice() -> None:
    """Seed: "Pause holds new sends": the pause never reached a machine new to the team, so its hold goes
    first; a holder heard the pause, and this machine's desk hears every team-wide request."""
    carol = introduction(PAUSED, "carol", "c")
    assert routed(PAUSED, carol) == [("c", "hold"), ("c", "submit")]
    assert routed(PAUSED, carol, holders={"c"}) == [("c", "submit")]
    assert routed(PAUSED, introduction(PAUSED, "alice", HERE)) == [(HERE, "submit")]
    assert routed(ACTIVE, introduction(ACTIVE, "carol", "c")) == [("c", "submit")]


@pytest.mark.parametrize(
    "effect",
    [
        fx.HoldTeam(TEAM),
        fx.ReleaseTeam(TEAM),
        fx.WithdrawTeam(TEAM),
        fx.WithdrawMember(TEAM, "m-bob"),
        fx.WithdrawNotice(TEAM, fx.notice_id(TEAM, "q1", NoticeKind.QUESTION)),
    ],
)
def test_a_team_wide_request_goes_here_then_to_every_holder_of_its_team(effect: object) -> None:
    name = DESK_COMMAND_NAMES[type(desk_command(ACTIVE, effect, 5, DEFAULT_LIMITS))]
    assert routed(ACTIVE, effect, holders={"c", "b"}) == [(HERE, name), ("b", name), ("c", name)]
    assert routed(ACTIVE, effect) == [(HERE, name)]


def test_a_restatement_holds_a_paused_team_first_at_every_machine_owed_a_notice() -> None:
    team = PAUSED.teams[TEAM]
    translate = partial(desk_command, PAUSED, at=5, limits=DEFAULT_LIMITS)
    routes = restatement_routes(PAUSED, team, known(holders={"b"}), translate, DEFAULT_LIMITS)
    by_machine: dict[str, list[str]] = {}
    for r in routes:
        by_machine.setdefault(r.machine_id, []).append(DESK_COMMAND_NAMES[type(r.request)])
    # Alice's, bob's and carol's introductions are owed on their machines; each hears the pause first.
    assert by_machine == {HERE: ["hold", "submit"], "b": ["hold", "submit"], "c": ["hold", "submit"]}
    assert routes[0] == Route(HERE, d.Hold(5, TEAM))


def test_a_restatement_in_two_parts_is_the_whole_in_order_the_guards_first() -> None:
    """A daemon restates the guards before it listens and the owed notices while it serves: the two parts,
    in that order, are the whole restatement; the guards hold every machine owed a notice, and hold no
    submit."""
    team = PAUSED.teams[TEAM]
    translate = partial(desk_command, PAUSED, at=5, limits=DEFAULT_LIMITS)
    parts = {
        part: restatement_routes(PAUSED, team, known(holders={"b"}), translate, DEFAULT_LIMITS, part=part)
        for part in RestatementPart
    }
    guards, notices = parts[RestatementPart.GUARDS], parts[RestatementPart.NOTICES]
    assert guards + notices == parts[RestatementPart.ALL]
    assert {(r.machine_id, type(r.request)) for r in guards} == {(m, d.Hold) for m in (HERE, "b", "c")}
    assert notices and all(isinstance(r.request, d.Submit) for r in notices)


def test_a_restatement_leaves_out_what_this_desk_would_ignore_only_when_it_alone_hears_the_team() -> None:
    """The daemon's desk says which restated effects it would ignore (`moot_here`): when this machine is the
    team's only destination they are left out before they are routed and rendered, and the rest is routed as
    ever; when any other machine hears the team, nothing is left out, since its desk may lack them."""
    local = ledger_of(CreateTeam(1, TEAM, "team", (member("alice", HERE), member("dave", HERE))))
    team = local.teams[TEAM]
    translate = partial(desk_command, local, at=5, limits=DEFAULT_LIMITS)
    alice = fx.notice_id(TEAM, "m-alice", NoticeKind.INTRODUCTION)

    def moot(effect: object) -> bool:
        return isinstance(effect, fx.SubmitNotice) and effect.notice_id == alice

    whole = restatement_routes(local, team, known(), translate, DEFAULT_LIMITS)
    kept = restatement_routes(local, team, known(), translate, DEFAULT_LIMITS, moot_here=moot)
    assert [r for r in whole if getattr(r.request, "notice_id", None) != alice] == list(kept)
    assert len(kept) == len(whole) - 1
    shared = restatement_routes(local, team, known(holders={"b"}), translate, DEFAULT_LIMITS, moot_here=moot)
    assert shared == restatement_routes(local, team, known(holders={"b"}), translate, DEFAULT_LIMITS)


def test_the_checker_catches_a_routing_that_skips_the_hold_for_a_new_machine() -> None:
    name = "no-hold-for-new-machine"
    scenario = SCENARIOS[CAUGHT_BY[name]]
    assert explore(scenario, scenario.max_depth).violation is None
    found = explore(scenario.with_protocol(MUTANTS[name]), scenario.max_depth).violation
    assert found is not None and found.property == "paused-team-held-at-every-desk"
    assert found.labels == ("owner pauses the team", "owner adds m1 on mach1")


async def test_a_daemon_holds_a_paired_machine_new_to_a_paused_team_before_its_first_notice(
    tmp_path: Path,
) -> None:
    """The daemon runs the same routing: bob joins a paused team on machine B, whose desk never heard the
    pause; B's desk gets the hold first, so bob's introduction waits there `held` until the resume."""
    async with machines(tmp_path) as world:
        a, b = await world.start(world.home_a), await world.start(world.home_b)
        await world.pair(a.daemon, b.daemon)
        node = a.daemon.node
        assert node is not None
        with trio.fail_after(60):  # A knows B is paired (and restated it, owning nothing yet): only routing
            while node.peer(b.daemon.machine_id) is None:  # speaks to B from here on
                await trio.sleep(0.05)
        alice = {"machineId": a.daemon.machine_id, "agentId": "agent-alice", "name": "alice"}
        await call(a.daemon, "create", id=TEAM_ID, name="Routed", members=[alice])
        await call(a.daemon, "pause")
        bob = await call(a.daemon, "add", machineId=b.daemon.machine_id, agentId="agent-bob", name="bob")
        intro = f"{TEAM_ID}/{bob['id']}/{NoticeKind.INTRODUCTION.value}"
        with trio.fail_after(60):
            while notice_states(b.daemon, TEAM_ID).get(intro) != "held":
                await trio.sleep(0.05)
        assert b.daemon.desk is not None and TEAM_ID in b.daemon.desk.desk.held_teams
        await call(a.daemon, "resume")  # B is a holder now: the team-wide release reaches it
        with trio.fail_after(60):
            while notice_states(b.daemon, TEAM_ID).get(intro) == "held":
                await trio.sleep(0.05)
        for running in (a, b):
            await running.stop()
