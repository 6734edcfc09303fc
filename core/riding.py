# Which journal steps may ride: be written at once but made durable only by the journal's next fsynced
# append, so that a machine crash (not a killed daemon: the bytes are written) may lose them. One rule, here,
# because the daemon's runners decide with it and the model's machine crash loses exactly what it allows
# (core/system.py `Durable`); a step that rides and should not is then a write typed twice in a scenario.
from __future__ import annotations

from collections.abc import Callable

from . import delivery as d
from .effects import parse_notice_id
from .outcome import Accepted
from .routing import TeamRequest, team_of

OwnedHere = Callable[[str], bool]
"""Whether a team (by id) is owned on this machine: its owner restates to this desk at every start."""


def desk_step_rides(command: d.DeskCommand, outcome: Accepted[d.Desk], owned_here: OwnedHere) -> bool:
    """A desk step whose loss a restart repairs or leaves on the safe side, and whose effects stay in this
    process or go only to an owner that repairs them too.

    The steps: a look at a terminal or a tick (a restart demands a fresh look, and ticks again); the requests
    a team's effects become (`TeamRequest`) for a team owned here: at its start that owner restates every
    notice a desk lacks and every hold, release and withdrawal, and the desk writes nothing before those are
    applied; and the end of a write and the turn after it (`write_finished`, `turn_observed`) of a notice of
    such a team: lost, the write its durable `write_started` recorded is `unconfirmed` after the restart,
    which is never written again unless the owner declares it lost, and the desk's next durable step makes
    them durable before any later write. Never a member's read, a write's start, nor a paired owner's request
    or a report to it (nothing restates to this desk when only this machine restarts).

    The effects: a recheck, a timer (no licence to write), or a report to such an owner, whose ledger lets it
    ride (`report_rides`). A paste (`WriteNotice`) never rides: its `write_started` is durable first."""
    return (
        isinstance(command, d.Observe | d.Tick)
        or (isinstance(command, TeamRequest) and _team_owned_here(team_of(command), owned_here))
        or (isinstance(command, d.WriteFinished | d.TurnObserved) and _notice_owned_here(command, owned_here))
    ) and all(
        isinstance(effect, d.WriteDue | d.ArmDeskTimer)
        or (isinstance(effect, d.DeliveryChanged) and owned_here(effect.team_id))
        for effect in outcome.effects
    )


def report_rides(from_machine: str | None, home: str) -> bool:
    """Whether a delivery report may ride the journal of the ledger on machine `home`: one from the desk on
    its own machine (that desk tells its owner every notice's state again at every start, `start_reports`),
    never one that crossed from a paired machine (`from_machine` another, or None for a report that arrived
    through the link), which nothing repeats when only this machine restarts. (The daemon: `report_own`.)"""
    return from_machine == home


def _team_owned_here(team_id: str | None, owned_here: OwnedHere) -> bool:
    return team_id is not None and owned_here(team_id)


def _notice_owned_here(report: d.WriteFinished | d.TurnObserved, owned_here: OwnedHere) -> bool:
    parsed = parse_notice_id(report.notice_id)
    return parsed is not None and owned_here(parsed[0])


__all__ = ["OwnedHere", "desk_step_rides", "report_rides"]
