# What a paired machine may ask of this machine's delivery desk: exactly its grant. A paired machine is a
# team's owner only for the teams whose notices it was the first to send here, and it may put a question or
# an answer in front of an agent only after it introduced that agent as a member of that team (the
# introduction is the framed notice that says so). Everything else it sends is refused as a value, so a
# hostile peer can neither write into an agent that shares no team with it nor steer another owner's notices.
# A notice arrives as ledger fields (`NoticeContent`), never as text: the destination renders it itself, so
# no byte from the wire can stand outside the `[team …]` framing or become a key.
# Pure: the destination (io/remote.py) and the model checker's lossy link (models/link.py) run this same
# function, and the grant it returns is what the destination keeps durable (routes.json).
from __future__ import annotations

from collections.abc import Collection
from typing import Final

import attrs
from immutables import Map

from . import delivery as d
from .effects import parse_notice_id
from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS, Limits
from .outcome import reject
from .records import ID_PATTERN, MembershipState, NoticeKind, Team
from .system import NoticeContent, Prefix, content_problem, render_content
from .team import introduction_subject

E = ErrorCode
# A paired machine's ids are the ledger's (at most `id_chars`: team and membership ids match ID_PATTERN, an
# agent id need not), and what it may bind here is what one ledger retains: `teams` teams at once (a team it
# withdraws whole frees its place) and `memberships` introduced per team.
WIRE_ID_CHARS: Final = DEFAULT_LIMITS.id_chars
TEAMS_PER_OWNER: Final = DEFAULT_LIMITS.teams
MEMBERS_PER_TEAM: Final = DEFAULT_LIMITS.memberships


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
) -> Grants | Rejected:
    """Whether machine `sender` may hand this desk `command`, and the grants after it.

    `here` is this machine's id, `owned_here` the teams this machine owns itself (never steered from
    elsewhere). An introduction may name an agent not registered here yet: its notices wait `offline` on the
    desk, as a local member's do; registering an agent gives no peer a door that introducing it did not."""
    problem = _id_problem(command)
    if problem is not None:
        return reject(E.BAD_REQUEST, problem)
    teams = request_teams(command)
    mine = [team for team in teams if team in owned_here]
    if mine:
        return reject(E.CONFLICT, f"team {mine[0]} is owned by machine {here}")
    if isinstance(command, d.Submit):
        return _admit_submit(grants, here, sender, command)
    if isinstance(command, d.WithdrawTeam) and grants.owner(command.team_id) is None:
        return grants  # nothing of it is here (one it withdrew before, restated after a restart): a no-op
    if isinstance(command, d.Hold) and grants.owner(command.team_id) is None:
        # A paused team's first request here is its hold, before any notice; it binds the team's owner.
        refused = _bind(grants, command.team_id, sender)
        return refused or attrs.evolve(grants, owners=grants.owners.set(command.team_id, sender))
    foreign = [team for team in teams if grants.owner(team) != sender]
    if foreign:
        return reject(E.NOT_FOUND, f"machine {sender} sent no notices of team {foreign[0]} here")
    if isinstance(command, d.WithdrawMember):
        return _forget(grants, command.team_id, command.membership_id)
    if isinstance(command, d.WithdrawTeam):  # archived or deleted: its owner sends nothing of it again
        members = (
            grants.members.delete(command.team_id) if command.team_id in grants.members else grants.members
        )
        return Grants(grants.owners.delete(command.team_id), members)
    return grants


def _id_problem(command: GrantedRequest | Consumption) -> str | None:
    """Why a request's ids are not ids as a ledger makes them, or None. They name files here (a member's key
    file lives at `keys/TEAM/MEMBERSHIP.key`) and entries of the kept grant, so `..`, a slash or a megabyte
    is refused before anything is done with them."""
    named: list[tuple[str, str]] = []
    if not isinstance(command, d.Withdraw | Consumption):
        named.append(("team", command.team_id))
    if isinstance(command, d.Submit | d.WithdrawMember):
        named.append(("membership", command.membership_id))
    if isinstance(command, d.Submit) and not 0 < len(command.agent_id) <= WIRE_ID_CHARS:
        return f"the agent id {command.agent_id[:40]!r} is empty or longer than {WIRE_ID_CHARS} characters"
    for kind, value in named:
        if not _is_id(value):
            return f"the {kind} id {value[:40]!r} is not an id"
    notices = command.notice_ids if isinstance(command, d.InboxRead) else ()
    if isinstance(command, d.Submit | d.Withdraw | d.AnswerRetrieved):
        notices = (command.notice_id,)
    for notice in notices:
        parsed = parse_notice_id(notice)
        if parsed is None or not all(_is_id(part) for part in (parsed[0], _subject_id(parsed[1], parsed[2]))):
            return f"the notice id {notice[:40]!r} is not a notice id"
    return None


def _is_id(value: str) -> bool:
    return len(value) <= WIRE_ID_CHARS and ID_PATTERN.fullmatch(value) is not None


def _subject_id(subject: str, kind: NoticeKind) -> str:
    """The id a notice's subject names: an introduction's may carry its re-introduction's time."""
    introduced = introduction_subject(subject) if kind is NoticeKind.INTRODUCTION else (subject, None)
    return "" if introduced is None else introduced[0]


def _bind(grants: Grants, team_id: str, sender: str) -> Rejected | None:
    """Why `sender` may not become the owner here of one more team (`team_id`), or None."""
    owned = sum(1 for owner in grants.owners.values() if owner == sender)
    if owned >= TEAMS_PER_OWNER:
        return reject(
            E.BOUND_EXCEEDED, f"machine {sender} already owns {TEAMS_PER_OWNER} teams here", "teams"
        )
    return None


def _forget(grants: Grants, team_id: str, membership_id: str) -> Grants:
    """A removed membership is no longer a door: the owner must introduce it again."""
    held = grants.members.get(team_id, Map())
    if membership_id not in held:
        return grants
    return attrs.evolve(grants, members=grants.members.set(team_id, held.delete(membership_id)))


def _admit_submit(grants: Grants, here: str, sender: str, command: d.Submit) -> Grants | Rejected:
    if command.machine_id != here:
        return reject(E.BAD_REQUEST, f"that notice is not for machine {here}")
    owner = grants.owner(command.team_id)
    if owner is not None and owner != sender:
        return reject(E.CONFLICT, f"team {command.team_id}'s notices come from machine {owner}, not {sender}")
    if owner is None and (refused := _bind(grants, command.team_id, sender)) is not None:
        return refused
    owners = grants.owners.set(command.team_id, sender)
    held = grants.members.get(command.team_id, Map())
    if command.kind is NoticeKind.INTRODUCTION:
        known = held.get(command.membership_id)
        if known is not None and known != command.agent_id:
            return reject(E.CONFLICT, f"membership {command.membership_id} was introduced as another agent")
        if known is None and len(held) >= MEMBERS_PER_TEAM:
            detail = f"team {command.team_id} already has {MEMBERS_PER_TEAM} members introduced here"
            return reject(E.BOUND_EXCEEDED, detail, "memberships")
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


def observable(team: Team, machine: str) -> bool:
    """Whether paired machine `machine`'s owner may read `team` here (`get`, `members`, `list`): only a team
    with an active member on that machine; the others' names, questions and answers are not its business."""
    active = MembershipState.ACTIVE
    return any(m.machine_id == machine and m.state is active for m in team.members.values())


def rendered_here(
    command: d.Submit, content: NoticeContent, limits: Limits, prefix: Prefix
) -> d.Submit | Rejected:
    """The submit this desk takes for a paired owner's notice: its text rendered here from `content`, with
    this machine's own command `prefix`; refused unless the content is within `limits` and is that
    notice's."""
    problem = content_problem(content, limits)
    if problem is not None:
        return reject(E.BOUND_EXCEEDED, f"the notice's content is out of bounds: {problem}")
    said = (content.kind, content.team_id, content.subject_id)
    if said != (command.kind, command.team_id, command.subject_id):
        return reject(E.BAD_REQUEST, f"the content sent is not that of notice {command.notice_id}")
    if not ID_PATTERN.fullmatch(command.membership_id) or (
        content.kind is NoticeKind.INTRODUCTION and command.membership_id != command.subject_id
    ):  # the membership names the member's key file here
        return reject(E.BAD_REQUEST, f"notice {command.notice_id} names no membership of its own")
    introduction = content.kind is NoticeKind.INTRODUCTION
    if introduction != bool(content.member_key) or not ID_PATTERN.fullmatch(content.member_key or "k"):
        # It becomes the content of a key file here: one token, as the ledger makes them.
        return reject(E.BAD_REQUEST, "a member key (one token) travels in an introduction, and only there")
    return attrs.evolve(command, text=render_content(content, limits, prefix))


__all__ = [
    "EMPTY_GRANTS",
    "Consumption",
    "GrantedRequest",
    "Grants",
    "admit",
    "observable",
    "rendered_here",
    "request_teams",
]
