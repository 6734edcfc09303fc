# Tab channels (spec/channels-v1.md): seed 000's default experience, where "existing tab membership replaces
# manual team setup". The daemon looks at which tmux window each registered engine agent's pane is in; this
# module decides, from that look alone, which team operations make the channel teams follow the windows. It
# is pure so that the decision is the same in the daemon, the tests and the model checker; the shell only
# observes and applies, and a plan applied twice (a crash in between) asks for nothing the second time.
#
# Rules:
# - Off by default. Disabled, every channel team still open is archived (its history stays in the ledger).
# - Enabled, one channel team per window that holds an engine agent, with an id derived from the window and
#   the enable epoch; each enable starts a new epoch, since an archived team can never take members again.
# - A pane that joins a window becomes a member (team.v1 sends it an introduction); a pane that leaves is
#   removed (team.v1 revokes its key, so no new ask reaches it or comes from it, while the questions it
#   already asked can still be answered and stay attributable to its old membership).
# - A pane that could not be looked at (tmux did not answer) keeps its memberships: a failed look is not a
#   departure, or a flaky server would churn memberships and introductions.
from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Mapping

import attrs

from .commands import AddMember, ArchiveTeam, CreateTeam, NewMember, RemoveMember, TeamCommand
from .limits import Limits
from .records import Membership, MembershipState, Team, TeamState
from .terminal_text import is_terminal_safe

PREFIX = "tab:"  # channel team ids start with it; standalone teams should not use it (spec: team ids)
ROLE = "channel"
_HASH_CHARS = 20
_LABEL_CHARS = 80


class Refusal(enum.StrEnum):
    """The codes channels report with (the CLI, the daemon's log), beside team.v1's (spec: refusal codes)."""

    CORRUPT_SETTING = "corrupt_state"  # the settings file is damaged: kept as it is, nothing is changed
    UNSEEN = "unseen"  # a pane tmux did not answer about: its memberships are kept as they are
    APPLY_FAILED = "apply_failed"  # the ledger refused an operation (a full bound): retried every pass
    NO_ROOM = "bound_exceeded"  # a window gets no channel: channels hold their share of the owner's teams


@attrs.frozen
class Setting:
    enabled: bool = False
    epoch: int = 0  # how many times channels were enabled; part of every channel team id


OFF = Setting()


def enabled_setting(current: Setting) -> Setting:
    """`current` enabled: the same setting when already on, else a new epoch."""
    return current if current.enabled else Setting(True, current.epoch + 1)


def disabled_setting(current: Setting) -> Setting:
    return attrs.evolve(current, enabled=False)


@attrs.frozen(order=True)
class Window:
    """A tmux window as the agent's own server names it: ids are stable while the server runs."""

    socket: str
    session_id: str
    window_id: str
    label: str = attrs.field(default="", eq=False, order=False)  # session name and window index, for people


@attrs.frozen
class PaneAt:
    name: str  # the agent's registered name
    window: Window


@attrs.frozen
class Observation:
    """One look: where each registered engine agent's pane is (absent: gone, unregistered or in no window)
    and which agents could not be looked at."""

    panes: Mapping[str, PaneAt]  # agent id -> its pane's window
    unseen: frozenset[str] = frozenset()


@attrs.frozen
class Joiner:
    membership_id: str
    agent_id: str
    name: str


@attrs.frozen
class CreateChannel:
    team_id: str
    name: str
    members: tuple[Joiner, ...]


@attrs.frozen
class JoinChannel:
    team_id: str
    member: Joiner


@attrs.frozen
class LeaveChannel:
    team_id: str
    membership_id: str


@attrs.frozen
class ArchiveChannel:
    team_id: str


Operation = CreateChannel | JoinChannel | LeaveChannel | ArchiveChannel


def channel_id(epoch: int, window: Window) -> str:
    """The stable team id of `window` in `epoch`: `tab:EPOCH:HASH`, where HASH is the first 20 hex digits of
    the SHA-256 of `socket NUL session_id NUL window_id`."""
    raw = "\0".join((window.socket, window.session_id, window.window_id)).encode()
    return f"{PREFIX}{epoch}:{hashlib.sha256(raw).hexdigest()[:_HASH_CHARS]}"


def is_channel(team_id: str) -> bool:
    return team_id.startswith(PREFIX)


def epoch_of(team_id: str) -> int | None:
    head, _, _ = team_id[len(PREFIX) :].partition(":")
    return int(head) if is_channel(team_id) and head.isdigit() else None


def membership_id(team_id: str, agent_id: str, joins: int) -> str:
    """The id of an agent's `joins`-th membership of a team (0 first): derived, so a retried join after a
    crash is team.v1's idempotent repeat, and a rejoin after leaving is a new membership."""
    return hashlib.sha256(f"{team_id}/{agent_id}/{joins}".encode()).hexdigest()[:16]


def channel_name(window: Window) -> str:
    label = "".join(char for char in window.label if is_terminal_safe(char, line_breaks=False)).strip()
    return f"tab {label[:_LABEL_CHARS] or window.window_id}"


def plan(
    setting: Setting, teams: Mapping[str, Team], observation: Observation, limits: Limits
) -> tuple[Operation, ...]:
    """The operations that make the channel teams in `teams` follow `observation`, in the order to apply
    them: archives, departures, new channels, arrivals. Teams without the channel prefix are never touched."""
    channels = {team_id: team for team_id, team in teams.items() if is_channel(team_id)}
    open_ = {team_id: team for team_id, team in channels.items() if team.state is not TeamState.ARCHIVED}
    if not setting.enabled:
        return tuple(ArchiveChannel(team_id) for team_id in sorted(open_))
    archives = [ArchiveChannel(t) for t in sorted(open_) if epoch_of(t) != setting.epoch]
    current = {t: team for t, team in open_.items() if epoch_of(t) == setting.epoch}
    wanted = _wanted(setting, observation)
    room = channel_room(teams, limits)
    leaves: list[LeaveChannel] = []
    for team_id in sorted(current):
        stays = set(wanted.get(team_id, (None, []))[1]) | observation.unseen
        leaves.extend(
            LeaveChannel(team_id, m.id) for m in _active(current[team_id]) if m.agent_id not in stays
        )
    arrivals: list[Operation] = []
    for team_id in sorted(wanted):
        window, agent_ids = wanted[team_id]
        team = channels.get(team_id)
        if team is not None and team.state is TeamState.ARCHIVED:  # archived by hand: never reopened
            continue
        left = {op.membership_id for op in leaves if op.team_id == team_id}
        staying = [] if team is None else [m for m in _active(team) if m.id not in left]
        present = {m.agent_id for m in staying}
        taken = {m.name for m in staying}
        joiners = tuple(
            _joiner(team, team_id, agent_id, observation.panes[agent_id].name, taken=taken, limits=limits)
            for agent_id in agent_ids
            if agent_id not in present
        )
        if team is None:
            if room <= 0:
                continue  # `roomless` names it
            room -= 1
            arrivals.append(CreateChannel(team_id, channel_name(window), joiners))
        else:
            arrivals.extend(JoinChannel(team_id, joiner) for joiner in joiners)
    return (*archives, *leaves, *arrivals)


def channel_room(teams: Mapping[str, Team], limits: Limits) -> int:
    """How many more channel teams may be made. Channels retain at most half of the owner's `teams` bound
    (archived ones count, as every retained team does): panes moved through new windows (an engine's shell
    can run `tmux break-pane`) once made a team of each and took every place, so the owner could create no
    team of its own."""
    return limits.teams // 2 - sum(1 for team_id in teams if is_channel(team_id))


def roomless(
    setting: Setting, teams: Mapping[str, Team], observation: Observation, limits: Limits
) -> tuple[str, ...]:
    """The channel ids of windows holding agents that `plan` gives no team for want of room."""
    if not setting.enabled:
        return ()
    made = {op.team_id for op in plan(setting, teams, observation, limits) if isinstance(op, CreateChannel)}
    return tuple(sorted(t for t in _wanted(setting, observation) if t not in teams and t not in made))


def _wanted(setting: Setting, observation: Observation) -> dict[str, tuple[Window, list[str]]]:
    """Each window holding agents, by its channel id in this epoch: the window and its agents."""
    wanted: dict[str, tuple[Window, list[str]]] = {}
    for agent_id in sorted(observation.panes):
        window = observation.panes[agent_id].window
        wanted.setdefault(channel_id(setting.epoch, window), (window, []))[1].append(agent_id)
    return wanted


def _active(team: Team) -> list[Membership]:
    return [m for m in (team.members[i] for i in team.member_order) if m.state is MembershipState.ACTIVE]


def _joiner(
    team: Team | None, team_id: str, agent_id: str, name: str, *, taken: set[str], limits: Limits
) -> Joiner:
    """A new membership for `agent_id`; its registered name unless an active member has it (names are
    unique among active members), then the name with the start of the agent id."""
    joins = 0 if team is None else sum(1 for m in team.members.values() if m.agent_id == agent_id)
    chosen = name
    for suffix in (f"-{agent_id[:8]}", f"-{agent_id}"):
        if chosen not in taken:
            break
        chosen = name[: max(1, limits.name_chars - len(suffix))] + suffix
    taken.add(chosen)
    return Joiner(membership_id(team_id, agent_id, joins), agent_id, chosen)


def command_of(
    operation: Operation, at: int, machine_id: str, key_of: Callable[[Joiner], str]
) -> TeamCommand:
    """The team.v1 command an operation is, as the owner sends it; `key_of` draws each new member's key (the
    daemon's `team` actions draw it at random; the model checker and tests name it)."""

    def new(joiner: Joiner) -> NewMember:
        return NewMember(joiner.membership_id, machine_id, joiner.agent_id, joiner.name, ROLE, key_of(joiner))

    if isinstance(operation, CreateChannel):
        return CreateTeam(at, operation.team_id, operation.name, tuple(map(new, operation.members)))
    if isinstance(operation, JoinChannel):
        return AddMember(at, operation.team_id, new(operation.member))
    if isinstance(operation, LeaveChannel):
        return RemoveMember(at, operation.team_id, operation.membership_id)
    return ArchiveTeam(at, operation.team_id)
