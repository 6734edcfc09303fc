# Where the owner's requests go: the one routing table from the ledger's effects to (destination machine,
# desk request) pairs. The daemon (io/delivery_router.py) hands each pair to that machine's desk, here or
# through the relay; `step_system` (core/system.py) steps the same pairs, so the model checker explores the
# routing the daemon runs, and a routing bug found by a scenario is one in production.
#
# An owner cannot see a paired machine's desk. What it knows is which machines it has handed notices of a
# team (the holders): those, and its own desk, hear every team-wide request. A machine new to a paused team
# gets the hold before its first notice, since the pause itself never reached it.
from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping

import attrs

from . import delivery as d
from .effects import SubmitNotice, parse_notice_id
from .limits import Limits
from .records import Ledger, Team, TeamState
from .team import RestatedEffect, owed_machines, owed_notices, restated_guards, restatement

# The desk requests a team effect becomes (core/system.py `desk_command`).
TeamRequest = d.Submit | d.Withdraw | d.WithdrawMember | d.WithdrawTeam | d.Hold | d.Release
# A team effect's desk request: the shell alone knows how a notice names its command prefix, so it passes
# the translation with its renderer bound (core/system.py `desk_command`).
Translate = Callable[[object], TeamRequest]


class Destinations(enum.StrEnum):
    AGENT = "the machine of its agent"
    TEAM = "this machine, then every holder of its team"


class First(enum.StrEnum):
    NOTHING = "-"
    HOLD_IF_NEW_TO_PAUSED = "a hold of its team, when the team is paused and the machine holds none of it"


# The routing table (spec/remote-v1.md section 6, `routing`): where each desk request goes, and what goes
# before it there.
ROUTES: Mapping[type[TeamRequest], tuple[Destinations, First]] = {
    d.Submit: (Destinations.AGENT, First.HOLD_IF_NEW_TO_PAUSED),
    d.Hold: (Destinations.TEAM, First.NOTHING),
    d.Release: (Destinations.TEAM, First.NOTHING),
    d.Withdraw: (Destinations.TEAM, First.NOTHING),
    d.WithdrawMember: (Destinations.TEAM, First.NOTHING),
    d.WithdrawTeam: (Destinations.TEAM, First.NOTHING),
}


@attrs.frozen
class Known:
    """What the owner knows of the machines a team's requests go to."""

    # This machine, whose desk hears every team-wide request; None when every desk is a holder (the model).
    here: str | None
    # Team id -> the machines handed notices of the team (a submit, a restatement), `here` aside.
    holders: Callable[[str], Collection[str]]


@attrs.frozen
class Route:
    """One desk request for one machine's desk, in the order the owner made it."""

    machine_id: str
    request: TeamRequest


def route(
    ledger: Ledger,
    effects: Iterable[object],
    known: Known,
    translate: Translate,
    table: Mapping[type[TeamRequest], tuple[Destinations, First]] = ROUTES,
) -> tuple[Route, ...]:
    """Where each team effect (other than ArmTimer) goes, in order, by `table`: a notice to its agent's
    machine, held first if that machine is new to a paused team; everything else to this machine and every
    holder of the team."""
    routes: list[Route] = []
    for effect in effects:
        request = translate(effect)
        destinations, first = table[type(request)]
        if destinations is Destinations.TEAM:
            machines = team_wide(known, request)
        else:
            assert isinstance(request, d.Submit)  # the one request that names its machine
            machines = [request.machine_id]
        for machine in machines:
            if (
                first is First.HOLD_IF_NEW_TO_PAUSED
                and isinstance(request, d.Submit)
                and _new_to_paused(ledger, request, machine, known)
            ):
                routes.append(Route(machine, d.Hold(request.at, request.team_id)))
            routes.append(Route(machine, request))
    return tuple(routes)


def _new_to_paused(ledger: Ledger, request: d.Submit, machine: str, known: Known) -> bool:
    """Whether `machine` never heard the pause of the request's team: it is not here and holds none of it."""
    team = ledger.teams.get(request.team_id)
    paused = team is not None and team.state is TeamState.PAUSED
    return paused and machine != known.here and machine not in known.holders(request.team_id)


def team_wide(known: Known, request: TeamRequest) -> list[str]:
    """The machines a team-wide request goes to: this one first, then every holder of its team."""
    team_id = team_of(request)
    holders = set() if team_id is None else set(known.holders(team_id))
    here = [] if known.here is None else [known.here]
    return here + sorted(holders - set(here))


def team_of(request: TeamRequest) -> str | None:
    """The team a desk request concerns (a withdrawal names it in its notice id; None: no such id)."""
    if isinstance(request, d.Withdraw):
        parsed = parse_notice_id(request.notice_id)
        return None if parsed is None else parsed[0]
    return request.team_id


class RestatementPart(enum.StrEnum):
    """Which part of a restatement to route: all of it, in order, is the guards then the notices."""

    ALL = "all"
    GUARDS = "guards"  # the hold, release or withdrawal of the team, its members and its ended questions
    NOTICES = "notices"  # the submits of every notice the team still owes


def restatement_routes(
    ledger: Ledger,
    team: Team,
    known: Known,
    translate: Translate,
    limits: Limits,
    *,
    part: RestatementPart = RestatementPart.ALL,
    moot_here: Callable[[RestatedEffect], bool] = lambda effect: False,
) -> tuple[Route, ...]:
    """Everything each destination must have been told of `team` (core/team.py `restatement`), routed as if
    new: a crash can fall between a durable ledger change and a destination's durable receipt of it. Every
    machine owed a notice now hears the team-wide part too, so the restated hold of a paused team comes before
    its notices there. Every desk request is idempotent. The guards alone are what keeps a desk from writing
    what it must not; the notices alone, what it may still lack. When this machine is the team's only
    destination, an effect `moot_here` says its desk would ignore is left out before it is routed (at the
    seed's bounds most of a restart's: the withdrawal of every finished exchange)."""
    effects: tuple[RestatedEffect, ...]
    if part is RestatementPart.GUARDS:  # without the owed notices, which only name their machines here
        effects, owed = restated_guards(team), owed_machines(team)
    else:
        effects = restatement(team, limits) if part is RestatementPart.ALL else owed_notices(team, limits)
        owed = frozenset(effect.machine_id for effect in effects if isinstance(effect, SubmitNotice))
    told = Known(known.here, lambda team_id: {*known.holders(team_id), *owed})
    if known.here is not None and set(told.holders(team.id)) <= {known.here}:
        effects = tuple(effect for effect in effects if not moot_here(effect))
    return route(ledger, effects, told, translate)


__all__ = [
    "ROUTES",
    "Destinations",
    "First",
    "Known",
    "RestatementPart",
    "Route",
    "TeamRequest",
    "Translate",
    "restatement_routes",
    "route",
    "team_of",
    "team_wide",
]
