# What a paired machine may ask of this machine's delivery desk: exactly its grant. A paired machine is a
# team's owner only for the teams whose notices it was the first to send here, and it may put a question or
# an answer in front of an agent only after it introduced that agent as a member of that team (the
# introduction is the framed notice that says so). Everything else it sends is refused as a value, so a
# hostile peer can neither write into an agent that shares no team with it nor steer another owner's notices.
# Pure: the destination (io/remote.py) and the model checker's lossy link (models/link.py) run this same
# function, and the grant it returns is what the destination keeps durable (routes.json).
from __future__ import annotations

from collections.abc import Collection

import attrs
from immutables import Map

from . import delivery as d
from .effects import parse_notice_id
from .errors import ErrorCode, Rejected
from .outcome import reject
from .records import NoticeKind

E = ErrorCode


@attrs.frozen
class Grants:
    """Per team held here: its owning machine, and the memberships it introduced (membership -> agent)."""

    owners: Map[str, str] = attrs.field(factory=Map)
    members: Map[str, Map[str, str]] = attrs.field(factory=Map)

    def owner(self, team_id: str) -> str | None:
        return self.owners.get(team_id)

    def introduced(self, team_id: str, membership_id: str) -> str | None:
        """The agent the team's owner introduced as `membership_id`, or None."""
        return self.members.get(team_id, Map()).get(membership_id)


EMPTY_GRANTS = Grants()

GrantedRequest = d.Submit | d.Hold | d.Release | d.Withdraw | d.WithdrawMember | d.WithdrawTeam
Consumption = d.InboxRead | d.AnswerRetrieved


def request_teams(command: GrantedRequest | Consumption) -> list[str]:
    """The teams an owner request concerns (read from its notice ids where it names no team)."""
    if isinstance(command, d.Withdraw | d.AnswerRetrieved):
        ids: tuple[str, ...] = (command.notice_id,)
    elif isinstance(command, d.InboxRead):
        ids = command.notice_ids
    else:
        return [command.team_id]
    return sorted({parsed[0] for n in ids if (parsed := parse_notice_id(n)) is not None})


def admit(
    grants: Grants,
    *,
    here: str,
    sender: str,
    command: GrantedRequest | Consumption,
    owned_here: Collection[str],
    agents: Collection[str],
) -> Grants | Rejected:
    """Whether machine `sender` may hand this desk `command`, and the grants after it.

    `here` is this machine's id, `owned_here` the teams this machine owns itself (never steered from
    elsewhere), `agents` the agents registered on this machine."""
    teams = request_teams(command)
    mine = [team for team in teams if team in owned_here]
    if mine:
        return reject(E.CONFLICT, f"team {mine[0]} is owned by machine {here}")
    if isinstance(command, d.Submit):
        return _admit_submit(grants, here, sender, command, agents)
    if isinstance(command, d.Hold) and grants.owner(command.team_id) is None:
        # A paused team's first request here is its hold, before any notice; it binds the team's owner.
        return attrs.evolve(grants, owners=grants.owners.set(command.team_id, sender))
    foreign = [team for team in teams if grants.owner(team) != sender]
    if foreign:
        return reject(E.NOT_FOUND, f"machine {sender} sent no notices of team {foreign[0]} here")
    if isinstance(command, d.WithdrawMember):
        return _forget(grants, command.team_id, command.membership_id)
    if isinstance(command, d.WithdrawTeam) and command.team_id in grants.members:
        return attrs.evolve(grants, members=grants.members.delete(command.team_id))
    return grants


def _forget(grants: Grants, team_id: str, membership_id: str) -> Grants:
    """A removed membership is no longer a door: the owner must introduce it again."""
    held = grants.members.get(team_id, Map())
    if membership_id not in held:
        return grants
    return attrs.evolve(grants, members=grants.members.set(team_id, held.delete(membership_id)))


def _admit_submit(
    grants: Grants, here: str, sender: str, command: d.Submit, agents: Collection[str]
) -> Grants | Rejected:
    if command.machine_id != here:
        return reject(E.BAD_REQUEST, f"that notice is not for machine {here}")
    owner = grants.owner(command.team_id)
    if owner is not None and owner != sender:
        return reject(E.CONFLICT, f"team {command.team_id}'s notices come from machine {owner}, not {sender}")
    if command.agent_id not in agents:
        return reject(E.NOT_FOUND, f"no agent {command.agent_id!r} is registered on machine {here}")
    owners = grants.owners.set(command.team_id, sender)
    held = grants.members.get(command.team_id, Map())
    if command.kind is NoticeKind.INTRODUCTION:
        known = held.get(command.membership_id)
        if known is not None and known != command.agent_id:
            return reject(E.CONFLICT, f"membership {command.membership_id} was introduced as another agent")
        return Grants(
            owners, grants.members.set(command.team_id, held.set(command.membership_id, command.agent_id))
        )
    if held.get(command.membership_id) != command.agent_id:
        return reject(
            E.NOT_FOUND,
            f"machine {sender} introduced no member {command.membership_id} of team {command.team_id} "
            f"as agent {command.agent_id!r} here",
        )
    return attrs.evolve(grants, owners=owners)


__all__ = ["EMPTY_GRANTS", "Consumption", "GrantedRequest", "Grants", "admit", "request_teams"]
