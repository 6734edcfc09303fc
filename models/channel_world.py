# The channel world (spec/channels-v1.md): seed 000's "departure lets already-started exchanges finish" and
# "questions stay inside the tab", checked over every interleaving of a pane moving between tmux windows, the
# keeper looking and applying its plan one operation at a time (a plan can go stale while it is applied),
# and agents asking, answering, and trying to ask across windows with every key they ever held. Every
# decision is the real code's: core/channels.py plans, core/team.py judges each command.
from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Sequence

import attrs

from harness.core import channels as ch
from harness.core.commands import Ask, Reply, TeamCommand
from harness.core.errors import Rejected
from harness.core.invariants import ledger_violations
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import Exchange, Ledger, MembershipState, QuestionState, Team, TeamState
from harness.core.team import step

from .checker import Transition, Violation

MACHINE = "mach0"
AT = 0  # the clock never matters here: no deadline passes, no rate window fills
SETTING = ch.Setting(enabled=True, epoch=1)
Plan = Callable[[ch.Setting, dict[str, Team], ch.Observation, Limits], tuple[ch.Operation, ...]]

CHANNEL_ALWAYS = ("ledger-invariants", "one-tab", "asks-stay-in-tab", "attributable")
CHANNEL_EVENTUALLY = ("exchanges-complete",)


@attrs.frozen
class ChannelConfig:
    windows: tuple[int, ...]  # the window each agent's pane starts in
    mover: int  # the agent whose pane may move to the other window
    moves: int  # how many times it may move
    asks: tuple[tuple[int, int], ...]  # (asker, addressee) pairs each agent tries once with each key it holds


@attrs.frozen(cache_hash=True)
class ChannelWorld:
    ledger: Ledger
    windows: tuple[int, ...]  # where each agent's pane is now
    moves: int  # moves left
    pending: tuple[ch.Operation, ...]  # the keeper's plan from its last look, not yet applied
    looked: tuple[int, ...] | None  # the windows the keeper's last look saw
    tried: frozenset[tuple[int, int, str]]  # (asker, addressee, team id) already tried


def agent_id(agent: int) -> str:
    return f"a{agent}"


def window_of(index: int) -> ch.Window:
    return ch.Window("sock", "$0", f"@{index}", f"work:{index}")


def key_of(joiner: ch.Joiner) -> str:
    return f"k-{joiner.membership_id}"


def observation(windows: tuple[int, ...]) -> ch.Observation:
    panes = {agent_id(a): ch.PaneAt(agent_id(a), window_of(w)) for a, w in enumerate(windows)}
    return ch.Observation(panes)


def initial_channel_world(config: ChannelConfig) -> ChannelWorld:
    return ChannelWorld(Ledger(), config.windows, config.moves, (), None, frozenset())


def channel_successors(
    world: ChannelWorld, config: ChannelConfig, plan: Plan
) -> Iterator[tuple[str, ChannelWorld, tuple[Violation, ...]]]:
    if world.pending:
        head, *rest = world.pending
        after = _step(world.ledger, ch.command_of(head, AT, MACHINE, key_of))
        ledger = world.ledger if isinstance(after, Rejected) else after.state
        yield (
            f"keeper applies {type(head).__name__} {head.team_id}",
            attrs.evolve(world, ledger=ledger, pending=tuple(rest)),
            (),
        )
    else:
        planned = _planned(plan, world.ledger, world.windows)
        if planned or world.looked != world.windows:
            yield "keeper looks", attrs.evolve(world, pending=planned, looked=world.windows), ()
    if world.moves:
        to = 1 - world.windows[config.mover]
        windows = tuple(to if a == config.mover else w for a, w in enumerate(world.windows))
        yield (
            f"{agent_id(config.mover)} moves to window {to}",
            attrs.evolve(world, windows=windows, moves=world.moves - 1),
            (),
        )
    yield from _asks(world, config)
    yield from _replies(world)


# Explored worlds share a ledger far more often than not (they differ in panes, moves left and the keeper's
# plan), and the clock stands still: the same command meets the same ledger again and again. A reducer step,
# a plan and the ledger's invariants are pure functions of their arguments, so each is memoized (the plan
# keyed by the planner too: a broken one is not answered from the real one's memo).
@functools.lru_cache(maxsize=1 << 16)
def _step(ledger: Ledger, command: TeamCommand) -> Accepted[Ledger] | Rejected:
    return step(ledger, command, DEFAULT_LIMITS)


@functools.lru_cache(maxsize=1 << 16)
def _planned(plan: Plan, ledger: Ledger, windows: tuple[int, ...]) -> tuple[ch.Operation, ...]:
    return plan(SETTING, dict(ledger.teams), observation(windows), DEFAULT_LIMITS)


@functools.lru_cache(maxsize=1 << 16)
def _ledger_findings(ledger: Ledger) -> tuple[Violation, ...]:
    return tuple(("ledger-invariants", f"{code}: {detail}") for code, detail in ledger_violations(ledger))


def _keys(ledger: Ledger, agent: int) -> Iterator[tuple[str, str]]:
    """(team id, key) of every membership the agent was ever given: an agent keeps its old keys."""
    for team_id in sorted(ledger.teams):
        team = ledger.teams[team_id]
        for member_id in team.member_order:
            if team.members[member_id].agent_id == agent_id(agent):
                yield team_id, f"k-{member_id}"


def _asks(
    world: ChannelWorld, config: ChannelConfig
) -> Iterator[tuple[str, ChannelWorld, tuple[Violation, ...]]]:
    for asker, to in config.asks:
        for team_id, key in _keys(world.ledger, asker):
            if (asker, to, team_id) in world.tried:
                continue
            question = f"q{asker}{to}-{team_id[-4:]}"
            command = Ask(AT, team_id, question, agent_id(to), f"{asker} asks {to}", member_key=key)
            after = _step(world.ledger, command)
            ledger = world.ledger if isinstance(after, Rejected) else after.state
            tried = world.tried | {(asker, to, team_id)}
            label = f"{agent_id(asker)} asks {agent_id(to)} in {team_id}"
            next_world = attrs.evolve(world, ledger=ledger, tried=tried)
            yield label, next_world, _crossed(world, ledger.teams[team_id], question, after)


def _crossed(
    world: ChannelWorld, team: Team, question: str, after: Accepted[Ledger] | Rejected
) -> tuple[Violation, ...]:
    """An ask accepted while the keeper had caught up with the windows (its last look saw them as they are
    and it applied all of it) must be between two agents in the team's window."""
    if isinstance(after, Rejected) or world.pending or world.looked != world.windows:
        return ()
    exchange = team.exchanges[question]
    ends = [int(team.members[m].agent_id[1:]) for m in (exchange.from_, exchange.to)]
    windows = {ch.channel_id(SETTING.epoch, window_of(world.windows[a])) for a in ends}
    if windows == {team.id}:
        return ()
    return (("asks-stay-in-tab", f"{question} in {team.id} joins agents in windows {windows}"),)


def _replies(world: ChannelWorld) -> Iterator[tuple[str, ChannelWorld, tuple[Violation, ...]]]:
    """The addressee answers with its key while it holds the membership; the owner answers for a member that
    left (team.v1: a removed member's open questions stay open for the owner)."""
    for team_id in sorted(world.ledger.teams):
        team = world.ledger.teams[team_id]
        for exchange in _open(team):
            addressee = team.members[exchange.to]
            if addressee.state is MembershipState.ACTIVE:
                command = Reply(AT, team_id, exchange.id, "answer", member_key=f"k-{addressee.id}")
                label = f"{addressee.agent_id} answers {exchange.id}"
            else:
                command = Reply(AT, team_id, exchange.id, "answer", member_id=addressee.id)
                label = f"owner answers {exchange.id} for {addressee.agent_id}"
            after = _step(world.ledger, command)
            if isinstance(after, Accepted):
                yield label, attrs.evolve(world, ledger=after.state), ()


def _open(team: Team) -> list[Exchange]:
    return [team.exchanges[e] for e in team.exchange_order if team.exchanges[e].state is QuestionState.OPEN]


def channel_always(world: ChannelWorld) -> list[Violation]:
    found = list(_ledger_findings(world.ledger))
    homes: dict[str, list[str]] = {}
    for team in world.ledger.teams.values():
        if team.state is TeamState.ARCHIVED:
            continue
        for member in team.members.values():
            if member.state is MembershipState.ACTIVE:
                homes.setdefault(member.agent_id, []).append(team.id)
        for exchange in team.exchanges.values():
            answer = exchange.answer
            if answer is not None and answer.member_id != exchange.to:
                found.append(("attributable", f"{exchange.id}'s answer is for {answer.member_id}"))
    found.extend(
        ("one-tab", f"{agent} is in {sorted(teams)}") for agent, teams in homes.items() if len(teams) > 1
    )
    return found


def channel_eventually(world: ChannelWorld) -> list[Violation]:
    return [
        ("exchanges-complete", f"{exchange.id} in {team.id} is still open")
        for team in world.ledger.teams.values()
        for exchange in _open(team)
    ]


def describe_channel_world(world: ChannelWorld) -> dict[str, str]:
    facts = {f"pane {agent_id(a)}": f"window {w}" for a, w in enumerate(world.windows)}
    facts["keeper"] = f"{len(world.pending)} operations pending"
    for team in world.ledger.teams.values():
        active = sorted(m.agent_id for m in team.members.values() if m.state is MembershipState.ACTIVE)
        facts[f"team {team.id}"] = f"{team.state.value}: {', '.join(active) or 'no members'}"
        for exchange in team.exchanges.values():
            facts[f"question {exchange.id}"] = exchange.state.value
    return facts


@attrs.frozen
class ChannelModel:
    """A channel scenario bound to a planner (the real one, or a broken one in the tests)."""

    name: str
    description: str
    config: ChannelConfig
    max_depth: int
    plan: Plan = ch.plan
    always_properties: tuple[str, ...] = CHANNEL_ALWAYS
    eventually_properties: tuple[str, ...] = CHANNEL_EVENTUALLY

    def initial(self) -> ChannelWorld:
        return initial_channel_world(self.config)

    def successors(self, state: ChannelWorld) -> Iterator[Transition[ChannelWorld]]:
        for label, world, violations in channel_successors(state, self.config, self.plan):
            yield Transition(label, world, violations)

    def always(self, state: ChannelWorld) -> Sequence[Violation]:
        return channel_always(state)

    def eventually(self, state: ChannelWorld) -> Sequence[Violation]:
        return channel_eventually(state)

    def canonical(self, state: ChannelWorld) -> Hashable:
        return state

    def describe(self, state: ChannelWorld) -> dict[str, str]:
        return describe_channel_world(state)


CHANNEL_SCENARIOS: dict[str, ChannelModel] = {
    model.name: model
    for model in (
        ChannelModel(
            "channel-member-leaves",
            "a0 and a1 share window 0, a2 is in window 1; a0 asks a1, a1 asks a0, and every agent tries the "
            "others in every team it ever held a key to, while a0's pane moves to window 1 (and may come "
            "back) and the keeper looks and applies its plan one operation at a time.",
            ChannelConfig(windows=(0, 0, 1), mover=0, moves=2, asks=((0, 1), (1, 0), (0, 2), (2, 0))),
            max_depth=40,
        ),
    )
}
