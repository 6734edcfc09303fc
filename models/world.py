# The world a scenario explores: the real composed system (owner ledger + delivery desks, core/system.py)
# plus what the protocol does not own but must survive: terminals that go busy, take human drafts and open
# dialogs; a shell that rechecks and pastes; a daemon that crashes mid-write; RPC replies that get lost and
# retried with the same operation id; a clock that jumps past deadlines; agents that wait on each other.
#
# Every protocol decision is the real reducers'. The world only chooses which input comes next and records
# what physically happened (which notices reached which terminal, in which screen state), so the properties
# can judge the protocol by its effects, not by its own bookkeeping.
#
# With a link (Config.link), one machine's desk is remote: the owner's requests to it and its reports back
# travel through models/link.py's lossy, repeating, reordering relay instead of within one step. Every request
# that reaches the remote desk passes its grant first (core/remote_grant.py `admit`, as io/remote.py runs it),
# and with Config.hostile a third, hostile machine paired with that desk sends it requests of its own
# (models/hostile.py).
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from operator import attrgetter
from typing import TypeVar

import attrs
from immutables import Map

from harness.core import delivery as d
from harness.core import effects as fx
from harness.core import remote_grant
from harness.core.commands import (
    AddMember,
    Ask,
    Cancel,
    CreateTeam,
    NewMember,
    PauseTeam,
    RecordDelivery,
    Reply,
    ResumeTeam,
    Tick,
)
from harness.core.delivery_invariants import desk_violations, spanning_violations
from harness.core.errors import Rejected
from harness.core.invariants import ledger_violations
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.queries import WaitDecision, decide_wait, delivery_view, incoming_for
from harness.core.records import (
    DeliveryView,
    Exchange,
    Ledger,
    Membership,
    NoticeKind,
    QuestionState,
    Team,
    TeamState,
)
from harness.core.remote_grant import EMPTY_GRANTS, Consumption, GrantedRequest, Grants
from harness.core.routing import restatement_routes
from harness.core.system import (
    Action,
    Arrived,
    AtDesk,
    Durable,
    OwnerRequest,
    Routed,
    System,
    ToDesk,
    ToOwner,
    answer_retrieved_action,
    desk_command,
    inbox_read_action,
    owner_known,
    refused_reason,
    start_reports,
    step_system,
)
from harness.core.values import replace

from . import hostile as hs
from . import link as ln
from .checker import Violation

TEAM = "t"
HOME = "mach0"  # the owner's machine: its ledger, and the desk of the agents there (`machine_of`)
StepSystem = Callable[[System, Action, Limits], Accepted[System] | Rejected]
Admit = Callable[..., Grants | Rejected]  # core.remote_grant.admit's signature (keyword arguments)


@functools.lru_cache(maxsize=1 << 16)
def _memo_step(system: System, action: Action) -> Accepted[System] | Rejected:
    """`step_system` under the limits of the search under way (`StepMemo.limits`), keyed without them: hashing
    the limits' twenty fields at every step cost about as much as the steps the memo spares in
    two-agents-ask-each-other (4,884 of 48,583)."""
    limits = StepMemo.limits
    assert limits is not None  # real_step_system comes here only under the limits of a started search
    return step_system(system, action, limits)


class StepMemo:
    """Whether `real_step_system` keeps what it computed. A step is a pure function of its arguments, and in
    some scenarios many explored worlds share a system and clock and differ only in their screens, waits or
    relay (wait-deadlock, the link scenarios: most steps are found in the memo). In others nearly every
    step is new (three-agents-parent-chain: 233 of 166,894), and keeping 65,536 outcomes alive only slowed
    the search (by about a tenth). So each search starts memoizing (`reset`, at its initial world), and once
    a window of `WINDOW` steps found fewer than `LEAST` of them in the memo, steps it for the rest of that
    search without keeping them. Either way every step is the real reducers' answer."""

    WINDOW = 10_000
    LEAST = 200
    keeping = True
    calls = 0
    hits_before = 0
    scenario: object = None
    limits: Limits | None = None  # the memo's steps are under these; a step under others is not kept

    @classmethod
    def start(cls, scenario: object, limits: Limits) -> None:
        """A search of `scenario` under `limits` begins (its initial world is built): a new scenario memoizes
        again. Limits equal to the kept steps' are theirs (a scenario names its limits)."""
        if scenario != cls.scenario:
            _memo_step.cache_clear()
            cls.keeping, cls.calls, cls.hits_before, cls.scenario = True, 0, 0, scenario
        cls.limits = limits


def real_step_system(system: System, action: Action, limits: Limits) -> Accepted[System] | Rejected:
    """The real composed reducers, memoized while that pays (`StepMemo`)."""
    memo = StepMemo
    if not memo.keeping or limits is not memo.limits:
        return step_system(system, action, limits)
    memo.calls += 1
    if memo.calls % memo.WINDOW == 0:
        hits = _memo_step.cache_info().hits
        if hits - memo.hits_before < memo.LEAST:
            memo.keeping = False
            _memo_step.cache_clear()
            return step_system(system, action, limits)
        memo.hits_before = hits
    return _memo_step(system, action)


@attrs.frozen
class Protocol:
    """The reducers under test. Mutants (models/mutants.py) swap in deliberately broken variants."""

    name: str = "team.v1"
    step: StepSystem = real_step_system
    decide_wait: Callable[..., WaitDecision | None] = decide_wait
    transport: ln.Transport = ln.REAL_TRANSPORT  # the link's rules (scenarios with a remote machine)
    admit: Admit = remote_grant.admit  # what a remote desk lets a paired machine hand it (its grant)
    description: str = ""  # what a mutant breaks, when its reducers' docstrings do not say


REAL = Protocol()


@attrs.frozen
class PlannedAsk:
    asker: int
    to: int
    parent: int | None = None  # index of another planned ask this one follows up
    ttl_ms: int = 10_000
    notify: bool = True  # False: the answer is retrieved, never delivered as a continuation notice


# Small numbers keep the clock's reachable values few; the protocol's rules do not depend on their size.
MODEL_LIMITS = Limits(
    ttl_min_ms=5_000,
    notice_ttl_ms=20_000,
    observation_fresh_ms=5_000,
    write_settle_ms=2_000,
    write_timeout_ms=10_000,
)


@attrs.frozen
class Config:
    """A scenario: who is in the team, what they may do, and what the world may throw at them."""

    agents: int
    machines: int = 1  # agents are spread over this many destination machines
    asks: tuple[PlannedAsk, ...] = ()
    replies: bool = True
    ignores: bool = False  # an addressee may decide never to answer
    wrong_replies: bool = False  # a non-addressee tries to answer
    waits: bool = False
    reads: bool = False  # inbox reads (which suppress unsent notices)
    fine_delivery: bool = False  # explore each look, recheck, write end and turn as its own step
    introductions: bool = False  # deliver the members' introductions too (else they are read at the start)
    cancels: bool = False
    pause: bool = False
    crashes: int = 0  # daemon crash + restart, at any step
    # The machine crashes + restarts, at any step: the journals keep only what was durable (core/riding.py),
    # the terminals keep what they show (the harder case: a notice on screen must not be pasted again).
    machine_crashes: int = 0
    retries: bool = False  # a lost RPC reply: the client repeats an accepted ask with the same id
    disturbances: int = 0  # screen changes the world may make (busy, draft, dialog, offline, then back)
    screens: tuple[d.Observed, ...] = (d.Observed.BUSY, d.Observed.DRAFT, d.Observed.DIALOG)
    write_results: tuple[d.WriteResult, ...] = (d.WriteResult.OK, d.WriteResult.UNCERTAIN)
    horizon_ms: int = 30_000  # the clock never passes this: keeps the state space finite
    limits: Limits = MODEL_LIMITS
    link: ln.LinkBounds | None = None  # one machine's desk is reached through a lossy relay
    hostile: hs.HostilePeer | None = None  # with a link: a third machine, paired with the remote desk
    # The last agent is not in the team at the start: the owner adds it, at any step, on a machine of its own
    # (one new to the team, which may be paused by then).
    joiner: bool = False


def machine_of(config: Config, agent: int) -> str:
    if config.joiner and agent == config.agents - 1:
        return f"mach{config.machines}"
    return f"mach{agent % config.machines}"


def new_member(config: Config, agent: int) -> NewMember:
    machine = machine_of(config, agent)
    return NewMember(member_id(agent), machine, f"a{agent}", f"agent{agent}", "peer", f"k{agent}")


def _founders(config: Config) -> range:
    """The agents in the team from its creation."""
    return range(config.agents - 1 if config.joiner else config.agents)


def _members(world: World, config: Config) -> Iterator[int]:
    """The agents in the team now: the shell looks only at the terminals of its members' agents."""
    team = world.system.ledger.teams[TEAM]
    return (agent for agent in range(config.agents) if member_id(agent) in team.members)


@attrs.frozen(cache_hash=True)
class World:
    system: System
    now: int
    screens: tuple[d.Observed, ...]  # what each agent's terminal shows right now
    disturbances: int
    crashes: int
    due: frozenset[tuple[str, str]]  # (machine, notice id): WriteDue not yet acted on by the shell
    inflight: frozenset[tuple[str, str]]  # (machine, notice id): pasted, end not yet reported
    turns: frozenset[tuple[str, str]]  # (machine, notice id): the engine works on a delivered notice
    written: Map[str, int]  # notice id -> times it physically reached a terminal
    team_timers: frozenset[int]
    desk_timers: frozenset[tuple[str, int]]
    asked: frozenset[int]  # planned asks already accepted
    waiting: tuple[tuple[str, int] | None, ...]  # per agent: (question id, until) while blocked in wait
    ignored: frozenset[str] = frozenset()  # questions their addressee decided never to answer
    pauses: int = 0  # owner pauses left (each may be followed by a resume)
    machine_crashes: int = 0
    harm: tuple[Violation, ...] = ()  # what the world saw go wrong on the last step (judged by properties)
    link: ln.Link | None = None  # the relay to the remote machine, with Config.link
    grants: Map[str, Grants] = attrs.field(factory=Map)  # each remote desk's grants (its routes.json)
    # Ghost bookkeeping for the grant's properties (nothing in the protocol reads it): the memberships each
    # team's own owner introduced at a remote desk, (machine, team, membership, agent), and the notices a
    # machine other than their team's owner put on a remote desk, (machine, notice id).
    doors: frozenset[tuple[str, str, str, str]] = frozenset()
    forged: frozenset[tuple[str, str]] = frozenset()


def member_id(agent: int) -> str:
    return f"m{agent}"


def question_id(index: int) -> str:
    return f"q{index}"


def initial_world(config: Config, protocol: Protocol) -> World:
    StepMemo.start((config, protocol), config.limits)
    members = tuple(new_member(config, i) for i in _founders(config))
    world = World(
        system=System(),
        now=0,
        screens=tuple(d.Observed.IDLE for _ in range(config.agents)),
        disturbances=config.disturbances,
        crashes=config.crashes,
        due=frozenset(),
        inflight=frozenset(),
        turns=frozenset(),
        written=Map(),
        team_timers=frozenset(),
        desk_timers=frozenset(),
        asked=frozenset(),
        waiting=tuple(None for _ in range(config.agents)),
        pauses=1 if config.pause else 0,
    )
    created = _apply(world, config, protocol, CreateTeam(0, TEAM, "model", members))
    assert created is not None, "the scenario's team must be creatable"
    if not config.introductions:
        # Each member reads its inbox once before the story starts: their introductions are settled, so the
        # search spends itself on the questions, not on every order of delivering two introductions.
        for i in _founders(config):
            read = inbox_read_action(created.system, TEAM, member_id(i), 0)
            assert read is not None
            after = _apply(created, config, protocol, read)
            assert after is not None
            created = after
    created = replace(created, due=frozenset(), desk_timers=frozenset())
    if config.machine_crashes:  # the story starts durable; from here on a machine crash loses what rode
        system = attrs.evolve(
            created.system, durable=Durable(HOME, created.system.ledger, created.system.desks)
        )
        created = replace(created, system=system, machine_crashes=config.machine_crashes)
    if config.link is not None:  # from here on the remote machine's desk is reached through the relay
        system = attrs.evolve(created.system, remote=frozenset({config.link.remote}))
        created = replace(created, system=system, link=ln.new_link(config.link, protocol.transport))
        created = _introduced_before(created, config, protocol)
    return created


def _introduced_before(world: World, config: Config, protocol: Protocol) -> World:
    """The story starts after the owner's introductions crossed the link: the remote desk admitted them, so
    its grant binds the team to the owner and holds those memberships."""
    assert config.link is not None
    here = config.link.remote
    grants = EMPTY_GRANTS
    notices = world.system.desks[here].notices.values()
    for notice in notices:
        assert notice.kind is NoticeKind.INTRODUCTION
        submit = d.Submit(
            notice.submitted_at,
            notice.team_id,
            notice.id,
            notice.kind,
            notice.subject_id,
            notice.membership_id,
            here,
            notice.agent_id,
            notice.expires_at,
            notice.text,
        )
        admitted = protocol.admit(
            grants,
            here=here,
            sender=config.link.owner,
            command=submit,
            owned_here=frozenset(),
        )
        assert isinstance(admitted, Grants), admitted
        grants = admitted
    doors = frozenset((here, n.team_id, n.membership_id, n.agent_id) for n in notices)
    return replace(world, grants=Map({here: grants}), doors=doors)


def _apply(world: World, config: Config, protocol: Protocol, action: Action) -> World | None:
    """Feed one input to the protocol and let the shell take in the effects; None if it was rejected."""
    outcome = protocol.step(world.system, action, config.limits)
    if isinstance(outcome, Rejected):
        return None
    if not outcome.effects and outcome.state is world.system:
        # Most inputs a world offers change nothing (a retried ask, a repeated retrieval, an idle timer):
        # the shell has nothing to take in, so the world is this one with no harm seen on this step.
        return replace(world, harm=()) if world.harm else world
    changes = _absorb(world, config, outcome.effects)
    return replace(world, system=outcome.state, **changes)


def _absorb(world: World, config: Config, effects: Sequence[object]) -> dict[str, object]:
    """The world fields the shell changes on taking in `effects`: timers armed, writes due, pastes made,
    requests and reports put in the link's outboxes. A remote desk's report goes to its team's owner there
    (io/remote.py `route_report`): the owner's ledger through the link, or a paired machine the model does
    not follow (or none: a notice the grant let in without an owner)."""
    team_timers, desk_timers, due, inflight = world.team_timers, world.desk_timers, world.due, world.inflight
    written, link = world.written, world.link
    harm: list[Violation] = []
    for effect in effects:
        if isinstance(effect, fx.ArmTimer):
            team_timers = team_timers | {effect.at}
        elif isinstance(effect, ToDesk):
            assert link is not None, "a remote machine without a link"
            link = ln.enqueue(link, ln.DOWN, effect.command)
        elif isinstance(effect, ToOwner):
            assert link is not None and config.link is not None, "a remote machine without a link"
            grants = world.grants.get(effect.machine_id, EMPTY_GRANTS)
            if grants.owner(effect.command.team_id) == config.link.owner:
                link = ln.enqueue(link, ln.UP, effect.command)
        elif isinstance(effect, Routed):
            inner, machine = effect.effect, effect.machine_id
            if isinstance(inner, d.ArmDeskTimer):
                desk_timers = desk_timers | {(machine, inner.at)}
            elif isinstance(inner, d.WriteDue):
                due = due | {(machine, inner.notice_id)}
            elif isinstance(inner, d.WriteNotice):
                # The paste happens now, at the write boundary the desk just licensed.
                screen = world.screens[int(inner.agent_id[1:])]
                if screen is not d.Observed.IDLE:
                    harm.append(("no-write-over-human", f"{inner.notice_id} pasted into a {screen} terminal"))
                count = written.get(inner.notice_id, 0) + 1
                if count > 1:
                    harm.append(
                        ("no-duplicate-write", f"{inner.notice_id} reached the terminal {count} times")
                    )
                written = written.set(inner.notice_id, count)
                inflight = inflight | {(machine, inner.notice_id)}
                if link is not None and link.withdrawn & _withdrawal_keys(world, machine, inner.notice_id):
                    late = f"{inner.notice_id} pasted after its withdrawal arrived"
                    harm.append(("no-write-after-withdrawal", late))
                if machine in world.system.remote and (
                    outside := _outside_grant(world, machine, inner.notice_id)
                ):
                    harm.append(("no-write-outside-grant", outside))
    return {
        "team_timers": team_timers,
        "desk_timers": desk_timers,
        "due": due,
        "inflight": inflight,
        "written": written,
        "harm": tuple(harm),
        "link": link,
    }


def _outside_grant(world: World, machine: str, notice_id: str) -> str | None:
    """Why a notice pasted at a remote machine was not its team's owner's to send there, or None."""
    notice = world.system.desks[machine].notices[notice_id]
    if (machine, notice_id) in world.forged:
        return f"{notice_id} was put on {machine}'s desk by a machine that does not own team {notice.team_id}"
    door = (machine, notice.team_id, notice.membership_id, notice.agent_id)
    if notice.kind is not NoticeKind.INTRODUCTION and door not in world.doors:
        return (
            f"{notice_id} pasted into {notice.agent_id}, whom team {notice.team_id}'s owner never introduced "
            f"as {notice.membership_id} on {machine}"
        )
    return None


def _withdrawal_keys(world: World, machine: str, notice_id: str) -> frozenset[str]:
    """The withdrawals that would cover a notice: its own, its membership's, its team's."""
    notice = world.system.desks[machine].notices[notice_id]
    return frozenset(
        {f"notice {notice.id}", f"member {notice.team_id}/{notice.membership_id}", f"team {notice.team_id}"}
    )


def _withdrawn_by(command: object) -> frozenset[str]:
    if isinstance(command, d.Withdraw):
        return frozenset({f"notice {command.notice_id}"})
    if isinstance(command, d.WithdrawMember):
        return frozenset({f"member {command.team_id}/{command.membership_id}"})
    if isinstance(command, d.WithdrawTeam):
        return frozenset({f"team {command.team_id}"})
    return frozenset()


def successors(world: World, config: Config, protocol: Protocol) -> Iterator[tuple[str, World]]:
    """Every input the world may give next, with the world after it. Rejected inputs lead nowhere."""
    if world.link is not None:  # the relay between the machines
        yield from _link(world, config, protocol)
    if config.hostile is not None:
        yield from _hostile(world, config, protocol, config.hostile)
    team = world.system.ledger.teams[TEAM]
    now = world.now

    def go(label: str, action: Action, base: World | None = None) -> Iterator[tuple[str, World]]:
        nxt = _apply(base or world, config, protocol, action)
        if nxt is not None and nxt is not world and nxt != world:
            yield label, nxt

    # Agents: ask, reply, wait, read, cancel, retry.
    for index, plan in enumerate(config.asks):
        if index in world.asked:
            if config.retries:
                yield from go(f"retry ask {question_id(index)} (reply lost)", _ask(config, index, now))
            continue
        if plan.parent is not None and plan.parent not in world.asked:
            continue
        nxt = _apply(world, config, protocol, _ask(config, index, now))
        if nxt is not None:
            yield (
                f"m{plan.asker} asks m{plan.to} {question_id(index)}",
                replace(nxt, asked=nxt.asked | {index}),
            )
    for exchange_id in team.exchange_order:
        exchange = team.exchanges[exchange_id]
        to = int(exchange.to[1:])
        if config.replies and exchange.answer is None and exchange_id not in world.ignored:
            yield from go(
                f"m{to} replies {exchange_id}", Reply(now, TEAM, exchange_id, "answer", member_key=f"k{to}")
            )
            if config.ignores:  # the addressee may never answer: only the deadline ends the question then
                yield (
                    f"m{to} ignores {exchange_id}",
                    replace(world, ignored=world.ignored | {exchange_id}, harm=()),
                )
        if config.wrong_replies and exchange.answer is None:
            wrong = next(i for i in range(config.agents) if member_id(i) != exchange.to)
            yield from go(
                f"m{wrong} replies {exchange_id} (not addressed)",
                Reply(now, TEAM, exchange_id, "intruder", member_key=f"k{wrong}"),
            )
        if config.cancels and exchange.state is QuestionState.OPEN:
            asker = exchange.from_
            yield from go(
                f"{asker} cancels {exchange_id}", Cancel(now, TEAM, exchange_id, member_key=f"k{asker[1:]}")
            )
    if config.waits:
        yield from _waits(world, config, protocol, team)
    if config.reads:
        for agent in range(config.agents):
            read = inbox_read_action(world.system, TEAM, member_id(agent), now)
            if read is not None:
                yield from go(f"m{agent} reads its inbox", read)
    for exchange_id in team.exchange_order:
        if team.exchanges[exchange_id].state is QuestionState.ANSWERED:
            retrieved = answer_retrieved_action(world.system, TEAM, exchange_id, now)
            if retrieved is not None:
                asker = team.exchanges[exchange_id].from_
                yield from go(f"{asker} retrieves the answer to {exchange_id}", retrieved)
    # Owner.
    if config.pause and world.pauses > 0:
        paused = _apply(world, config, protocol, PauseTeam(now, TEAM))
        if paused is not None and paused != world:
            yield "owner pauses the team", replace(paused, pauses=world.pauses - 1)
    if config.pause:
        yield from go("owner resumes the team", ResumeTeam(now, TEAM))
    if config.joiner and member_id(config.agents - 1) not in team.members:
        joiner = new_member(config, config.agents - 1)
        yield from go(f"owner adds {joiner.id} on {joiner.machine_id}", AddMember(now, TEAM, joiner))
    # Terminals and the shell.
    yield from _terminals(world, config, protocol)
    # Faults.
    if world.crashes > 0:
        yield "daemon crashes and restarts", _crash(world, config, protocol)
    if world.machine_crashes > 0:
        yield "the machine crashes and restarts", _machine_crash(world, config, protocol)
    # Time.
    yield from _time(world, config, protocol, team)


def _ask(config: Config, index: int, now: int) -> Ask:
    return _planned_ask(config.asks[index], index, now)


# Each ask is built at every state that may ask it (or retry it): the same few commands serve them all.
@functools.lru_cache(maxsize=1 << 12)
def _planned_ask(plan: PlannedAsk, index: int, now: int) -> Ask:
    parent = question_id(plan.parent) if plan.parent is not None else None
    return Ask(
        now,
        TEAM,
        question_id(index),
        member_id(plan.to),
        f"question {question_id(index)}",
        None,
        plan.ttl_ms,
        parent,
        plan.notify,
        member_key=f"k{plan.asker}",
    )


def _waits(world: World, config: Config, protocol: Protocol, team: Team) -> Iterator[tuple[str, World]]:
    for agent in range(config.agents):
        waiting = world.waiting[agent]
        if waiting is None:
            for exchange_id in team.exchange_order:
                exchange = team.exchanges[exchange_id]
                if exchange.from_ == member_id(agent) and exchange.state is QuestionState.OPEN:
                    until = world.now + 10_000
                    yield (
                        f"m{agent} waits on {exchange_id}",
                        replace(world, waiting=_set(world.waiting, agent, (exchange_id, until)), harm=()),
                    )
            continue
        exchange_id, until = waiting
        decision = protocol.decide_wait(team, member_id(agent), team.exchanges[exchange_id], world.now, until)
        if decision is not None:
            woke = replace(world, waiting=_set(world.waiting, agent, None), harm=())
            yield f"m{agent} wakes ({decision.reason})", woke


def _deliver_atomically(world: World, config: Config, protocol: Protocol) -> Iterator[tuple[str, World]]:
    """One step per notice taken: the shell looks at an idle screen, rechecks, pastes, the write ends ok and
    the agent's turn on it is observed. Every part is still the real desk's decision; only the
    interleavings inside one delivery are not explored (the fine-grained scenarios do that)."""
    now = world.now
    for agent in _members(world, config):
        machine = machine_of(config, agent)
        if world.screens[agent] is not d.Observed.IDLE or not _queued(world, machine, agent):
            continue  # a look at an agent with nothing queued changes nothing that this step yields
        looked: World | None = world
        if _needs_look(world, config, machine, agent):
            looked = _apply(
                world, config, protocol, AtDesk(machine, d.Observe(now, f"a{agent}", d.Observed.IDLE))
            )
        if looked is None:
            continue
        for due_machine, notice_id in sorted(looked.due):
            if due_machine != machine or _agent_of(looked, machine, notice_id) != agent:
                continue
            base = replace(looked, due=looked.due - {(machine, notice_id)})
            started = _apply(
                base, config, protocol, AtDesk(machine, d.WriteStarted(now, notice_id, d.Observed.IDLE, now))
            )
            if started is None or (machine, notice_id) not in started.inflight:
                continue
            harm = started.harm
            written = replace(started, inflight=started.inflight - {(machine, notice_id)})
            finished = _apply(
                written, config, protocol, AtDesk(machine, d.WriteFinished(now, notice_id, d.WriteResult.OK))
            )
            if finished is None:
                continue
            turned = (
                _apply(finished, config, protocol, AtDesk(machine, d.TurnObserved(now, notice_id)))
                or finished
            )
            yield f"a{agent} takes {notice_id}", replace(turned, harm=harm + turned.harm)


def _terminals(world: World, config: Config, protocol: Protocol) -> Iterator[tuple[str, World]]:
    if not config.fine_delivery:
        yield from _deliver_atomically(world, config, protocol)
        return
    now = world.now
    for agent in _members(world, config):
        machine = machine_of(config, agent)
        screen = world.screens[agent]
        if _needs_look(world, config, machine, agent):
            observed = _apply(world, config, protocol, AtDesk(machine, d.Observe(now, f"a{agent}", screen)))
            if observed is not None and observed != world:
                yield f"shell observes a{agent} {screen}", observed
        busy_with = [n for (m, n) in world.turns if m == machine and _agent_of(world, m, n) == agent]
        if world.disturbances > 0 and not busy_with:
            for change in config.screens if screen is d.Observed.IDLE else (d.Observed.IDLE,):
                yield (
                    f"a{agent} screen turns {change}",
                    replace(
                        world,
                        screens=_set(world.screens, agent, change),
                        disturbances=world.disturbances - 1,
                        harm=(),
                    ),
                )
    for machine, notice_id in sorted(world.due):
        agent = _agent_of(world, machine, notice_id)
        seen = world.screens[agent]
        base = replace(world, due=world.due - {(machine, notice_id)}, harm=())
        started = _apply(base, config, protocol, AtDesk(machine, d.WriteStarted(now, notice_id, seen, now)))
        yield f"shell rechecks a{agent} ({seen}) for {notice_id}", started if started is not None else base
    for machine, notice_id in sorted(world.inflight):
        agent = _agent_of(world, machine, notice_id)
        base = replace(world, inflight=world.inflight - {(machine, notice_id)}, harm=())
        for result in config.write_results:
            finished = _apply(
                base, config, protocol, AtDesk(machine, d.WriteFinished(now, notice_id, result))
            )
            if finished is None:
                continue
            if result is not d.WriteResult.FAILED:  # the engine took the paste and works on it
                finished = replace(
                    finished,
                    screens=_set(finished.screens, agent, d.Observed.BUSY),
                    turns=finished.turns | {(machine, notice_id)},
                )
            yield f"write {notice_id} ends {result}", finished
    for machine, notice_id in sorted(world.turns):
        agent = _agent_of(world, machine, notice_id)
        base = replace(
            world,
            turns=world.turns - {(machine, notice_id)},
            screens=_set(world.screens, agent, d.Observed.IDLE),
            harm=(),
        )
        turned = _apply(base, config, protocol, AtDesk(machine, d.TurnObserved(now, notice_id)))
        yield f"a{agent} finishes its turn on {notice_id}", turned if turned is not None else base


def _crash(world: World, config: Config, protocol: Protocol) -> World:
    """The daemon dies at this step and comes back: in-memory work is gone, the journals are not (what rode
    was written, only not yet fsynced)."""
    return _restarted(replace(world, crashes=world.crashes - 1), config, protocol)


def _machine_crash(world: World, config: Config, protocol: Protocol) -> World:
    """The machine dies at this step and comes back: the journals keep what was durable, and lose every step
    that rode (core/riding.py) since their last fsync. Each desk then tells the owner every notice's state
    again (io/desk_runner.py `_sync`), as its daemon does once the owner's restated guards are applied."""
    durable = world.system.durable
    assert durable is not None, "a machine crash needs the durable journals kept (Config.machine_crashes)"
    system = attrs.evolve(world.system, ledger=durable.ledger, desks=durable.desks)
    lost = replace(world, system=system, machine_crashes=world.machine_crashes - 1)
    restarted = _restarted(lost, config, protocol)
    for machine in sorted(restarted.system.desks.keys()):
        for report in start_reports(restarted.system.desks[machine], world.now):
            restarted = _apply(restarted, config, protocol, report) or restarted
    return restarted


def _restarted(world: World, config: Config, protocol: Protocol) -> World:
    """The daemon starts on the journals `world` holds: the desks restart, and the owner restates."""
    base = replace(
        world,
        due=frozenset(),
        inflight=frozenset(),
        waiting=tuple(None for _ in world.waiting),
        harm=(),
    )
    for machine in sorted(base.system.desks.keys()):
        restarted = _apply(base, config, protocol, AtDesk(machine, d.Restart(world.now)))
        if restarted is not None:
            base = restarted
    # The owner restates what every desk must have (io/delivery_router.py `restate`), as routed by core.
    ledger = base.system.ledger
    translate = partial(desk_command, ledger, at=world.now, limits=config.limits)
    for team in ledger.teams.values():
        for routed in restatement_routes(ledger, team, owner_known(base.system), translate, config.limits):
            base = _apply(base, config, protocol, AtDesk(routed.machine_id, routed.request)) or base
    return base


def _link(world: World, config: Config, protocol: Protocol) -> Iterator[tuple[str, World]]:
    """What the relay and the two senders may do next; a request served by its receiver is applied there by
    the real reducers (an `Arrived` action), stamped with the receiver's clock as its shell stamps it."""
    assert world.link is not None and config.link is not None
    remote = config.link.remote
    for move in ln.moves(world.link):
        moved = replace(world, link=move.link, harm=())
        if move.arrived is None:
            if move.refusal is not None:  # a retry answered from the cache: the refusal reaches the owner now
                moved = _refused_at_owner(moved, config, protocol, *move.refusal)
            yield move.label, moved
            continue
        _direction, seq, command = move.arrived
        command = replace(command, at=world.now)
        if not isinstance(command, RecordDelivery):
            arrived, refusal = _at_remote_desk(moved, config, protocol, config.link.owner, command)
            if refusal is not None:  # the desk never sees it; the sender's item is answered with the refusal
                assert arrived.link is not None
                code = refused_reason(refusal)
                arrived = replace(arrived, link=ln.refuse(arrived.link, ln.DOWN, seq, code))
                if move.answered:
                    arrived = _refused_at_owner(arrived, config, protocol, command, code)
            yield move.label, arrived
            continue
        link = move.link
        last = link.recorded.get(command.notice_id, 0)
        link = replace(link, recorded=link.recorded.set(command.notice_id, max(seq, last)))
        moved = replace(moved, link=link)
        arrived = _apply(moved, config, protocol, Arrived(remote, command)) or moved
        if seq < last and _view(arrived, command) != _view(world, command):
            stale = f"report up#{seq} of {command.notice_id} changed the owner's view after report up#{last}"
            arrived = replace(arrived, harm=(*arrived.harm, ("owner-view-never-backwards", stale)))
        yield move.label, arrived


def _at_remote_desk(
    world: World, config: Config, protocol: Protocol, sender: str, command: GrantedRequest | Consumption
) -> tuple[World, Rejected | None]:
    """Paired machine `sender`'s request arrives at the remote desk: the desk's grant decides whether the
    desk gets it (io/remote.py `_execute_delivery`), and the real reducers apply it there, stamped with the
    receiver's clock. A refusal reaches no desk and changes nothing here."""
    assert config.link is not None and world.link is not None
    here = config.link.remote
    admitted = _admitted(protocol.admit, world.grants.get(here, EMPTY_GRANTS), here, sender, command)
    if isinstance(admitted, Rejected):
        return world, admitted
    arrived = _admitted_at_remote_desk(
        world, config, protocol, sender=sender, command=command, admitted=admitted
    )
    return arrived, None


def _admitted_at_remote_desk(
    world: World,
    config: Config,
    protocol: Protocol,
    *,
    sender: str,
    command: GrantedRequest | Consumption,
    admitted: Grants,
) -> World:
    """`_at_remote_desk` once the grant let the request in, leaving the desk's grants `admitted`."""
    assert config.link is not None and world.link is not None
    here = config.link.remote
    desk = world.system.desks.get(here)
    doors, forged, link = world.doors, world.forged, world.link
    if isinstance(command, d.Submit):
        owner = _team_owner(config, command.team_id)
        if sender != owner and (desk is None or command.notice_id not in desk.notices):
            forged = forged | {(here, command.notice_id)}
        elif sender == owner and command.kind is NoticeKind.INTRODUCTION:
            doors = doors | {(here, command.team_id, command.membership_id, command.agent_id)}
    elif withdrawn := _withdrawn_by(command):
        link = replace(link, withdrawn=link.withdrawn | withdrawn)
    admitted_world = replace(
        world, grants=world.grants.set(here, admitted), doors=doors, forged=forged, link=link
    )
    return _apply(admitted_world, config, protocol, Arrived(here, command)) or admitted_world


# The hostile machine offers the same few requests at most worlds, and a desk's grant changes rarely; a grant
# decision is a pure function of its arguments (a mutant's `admit` is keyed apart from the real one).
@functools.lru_cache(maxsize=1 << 16)
def _admitted(
    admit: Admit, grants: Grants, here: str, sender: str, command: GrantedRequest | Consumption
) -> Grants | Rejected:
    return admit(grants, here=here, sender=sender, command=command, owned_here=frozenset())


def _team_owner(config: Config, team_id: str) -> str | None:
    """The machine that really owns a team: the owner's for the story's team, the hostile machine's for its
    own (ghost knowledge, for the properties; a destination knows only what its grant says)."""
    assert config.link is not None
    if team_id == TEAM:
        return config.link.owner
    if config.hostile is not None and team_id == config.hostile.team:
        return config.hostile.machine
    return None


def _refused_at_owner(
    world: World, config: Config, protocol: Protocol, command: ln.Command, code: str
) -> World:
    """The owner's outbox got a refusal for its request: a refused submit is recorded as `rejected` with the
    code (never silent loss); any other refusal is only logged (io/remote.py `_outbox_worker`)."""
    if not isinstance(command, d.Submit):
        return world
    rejected = RecordDelivery(
        world.now, command.team_id, command.notice_id, d.DeliveryState.REJECTED.value, code
    )
    return _apply(world, config, protocol, rejected) or world


def _hostile(
    world: World, config: Config, protocol: Protocol, peer: hs.HostilePeer
) -> Iterator[tuple[str, World]]:
    """The hostile machine hands the remote desk one of its requests. Whatever the grant lets through, the
    honest owner's notices there stay as they were."""
    assert config.link is not None and world.link is not None
    here = config.link.remote
    member = next(i for i in range(config.agents) if machine_of(config, i) == here)
    target = hs.Target(here, TEAM, member_id(member), f"a{member}", question_id(0))
    seen = tuple(frame.command for frame in world.link.flight if frame.direction == ln.DOWN)
    grants = world.grants.get(here, EMPTY_GRANTS)
    ttl = config.limits.notice_ttl_ms
    # A refused request's answer goes to the hostile machine; nothing here changes: only the admitted arrive.
    for label, command, admitted in _admitted_attempts(
        protocol.admit, grants, here, peer=peer, target=target, seen=seen, now=world.now, ttl=ttl
    ):
        arrived = _admitted_at_remote_desk(
            world, config, protocol, sender=peer.machine, command=command, admitted=admitted
        )
        if _owners_part(arrived.system, here) != _owners_part(world.system, here):
            steered = f"{label} changed what team {TEAM} of the owner has at {here} (its notices, its hold)"
            arrived = replace(arrived, harm=(*arrived.harm, ("peer-cannot-steer-owner-notices", steered)))
        if arrived != world:
            yield label, arrived


# Most worlds offer the hostile machine the same few requests (one clock value, one relay's worth of the
# owner's requests) at a desk whose grant is one of a few: which of them the grant admits, and the grant
# after each, is decided once per such combination, not at every world, where building the requests and
# asking the grant about each took a fifth of the search.
@functools.lru_cache(maxsize=1 << 14)
def _admitted_attempts(
    admit: Admit,
    grants: Grants,
    here: str,
    *,
    peer: hs.HostilePeer,
    target: hs.Target,
    seen: tuple[ln.Command, ...],
    now: int,
    ttl: int,
) -> tuple[tuple[str, OwnerRequest, Grants], ...]:
    return tuple(
        (label, command, admitted)
        for label, command in hs.attempts(peer, target, seen, now, ttl)
        if not isinstance(admitted := _admitted(admit, grants, here, peer.machine, command), Rejected)
    )


def _owners_part(system: System, machine: str) -> tuple[object, ...]:
    """What the honest owner's team has at a desk: its notices, and whether the desk holds the team."""
    desk = system.desks.get(machine)
    if desk is None:
        return ()
    notices = tuple(sorted((n.id, n) for n in desk.notices.values() if n.team_id == TEAM))
    return (notices, TEAM in desk.held_teams)


def _view(world: World, report: RecordDelivery) -> tuple[str, str | None] | None:
    team = world.system.ledger.teams.get(report.team_id)
    view = None if team is None else delivery_view(team, report.notice_id)
    return None if view is None else (view.state, view.reason)


def _time(world: World, config: Config, protocol: Protocol, team: Team) -> Iterator[tuple[str, World]]:
    """The clock moves to the next moment something can happen (a timer, a write settling, a wait's end),
    and the shell fires every timer that is due then, as the daemon's timer task would."""
    now = world.now
    moments = {at for at in world.team_timers if at > now} | {at for _, at in world.desk_timers if at > now}
    moments |= {waiting[1] for waiting in world.waiting if waiting is not None and waiting[1] > now}
    for desk in world.system.desks.values():
        moments |= {
            s.idle_after for s in desk.sessions.values() if s.idle_after > now and (s.queue or s.writing)
        }
    later = sorted(at for at in moments if at <= config.horizon_ms)
    overdue = any(t <= now for t in world.team_timers) or any(t <= now for _, t in world.desk_timers)
    if not later and not overdue:
        return
    at = now if overdue else later[0]
    moved = replace(world, now=at, harm=())
    if any(due <= at for due in world.team_timers):
        moved = replace(moved, team_timers=frozenset(t for t in world.team_timers if t > at))
        moved = _apply(moved, config, protocol, Tick(at, TEAM)) or moved
    for machine in sorted({machine for machine, due in world.desk_timers if due <= at}):
        moved = replace(
            moved, desk_timers=frozenset(t for t in moved.desk_timers if t[0] != machine or t[1] > at)
        )
        moved = _apply(moved, config, protocol, AtDesk(machine, d.Tick(at))) or moved
    yield f"clock moves to {at}", moved


def _needs_look(world: World, config: Config, machine: str, agent: int) -> bool:
    """The shell polls a screen when the desk's picture of it is missing, different or no longer fresh."""
    desk = world.system.desks.get(machine)
    session = desk.sessions.get(f"a{agent}") if desk is not None else None
    if session is None:
        return True
    if session.observed is not world.screens[agent]:
        return True
    return session.observed is d.Observed.IDLE and not d.fresh_idle(session, world.now, config.limits)


def _queued(world: World, machine: str, agent: int) -> bool:
    """Whether the desk has a notice queued for the agent: only a queue's head is ever written."""
    desk = world.system.desks.get(machine)
    session = desk.sessions.get(f"a{agent}") if desk is not None else None
    return session is not None and bool(session.queue)


def _agent_of(world: World, machine: str, notice_id: str) -> int:
    return int(world.system.desks[machine].notices[notice_id].agent_id[1:])


T = TypeVar("T")


def _set(values: tuple[T, ...], index: int, value: T) -> tuple[T, ...]:
    return (*values[:index], value, *values[index + 1 :])


# --- properties -------------------------------------------------------------------------------------------

ALWAYS = (
    "no-duplicate-write",
    "no-write-over-human",
    "ledger-invariants",
    "desk-invariants",
    "no-answer-by-non-addressee",
    "no-continuation-from-late-answer",
    "no-wait-blocked-by-pending-question",
    "bounds-hold",
    "paused-team-held-at-every-desk",
    "no-acknowledged-ask-lost",
)
EVENTUALLY = ("questions-end-after-deadline", "waits-end")
# With a link: the relay can repeat, reorder and lose, yet the remote desk acts on what the owner asked once
# and in order, and the owner's view follows the desk's reports in the order the desk made them.
LINK_ALWAYS = ("no-write-after-withdrawal", "owner-view-never-backwards")
LINK_EVENTUALLY = ("link-drains", "owner-agrees-with-remote-desk")
# With a hostile paired machine: a notice reaches a remote agent's terminal only if its team's owner sent it
# and introduced that membership as that agent there, and the hostile machine never touches the owner's.
HOSTILE_ALWAYS = ("no-write-outside-grant", "peer-cannot-steer-owner-notices")


_PROPERTY_OF = {
    "T1": "bounds-hold",
    "T2": "no-answer-by-non-addressee",
    "T7": "no-continuation-from-late-answer",
}


# Explored worlds share ledgers, desks and systems far more often than not; their invariants are memoized.
@functools.lru_cache(maxsize=1 << 16)
def _ledger_findings(ledger: Ledger, limits: Limits) -> tuple[Violation, ...]:
    return tuple(
        (_PROPERTY_OF.get(invariant, "ledger-invariants"), f"{invariant}: {detail}")
        for invariant, detail in ledger_violations(ledger, limits)
    )


@functools.lru_cache(maxsize=1 << 16)
def _desk_findings(desk: d.Desk, limits: Limits) -> tuple[Violation, ...]:
    return tuple(("desk-invariants", f"{inv}: {detail}") for inv, detail in desk_violations(desk, limits))


@functools.lru_cache(maxsize=1 << 16)
def _spanning_findings(system: System, now: int) -> tuple[Violation, ...]:
    return tuple(("desk-invariants", f"{inv}: {detail}") for inv, detail in spanning_violations(system, now))


def always(world: World, config: Config, protocol: Protocol) -> list[Violation]:
    found = list(world.harm)
    own, shared = _system_findings(world.system, config.limits)
    found.extend(own)
    found.extend(_spanning_findings(_settled(world), world.now))
    found.extend(shared)
    team = world.system.ledger.teams[TEAM]
    found.extend(
        ("no-acknowledged-ask-lost", f"{question_id(index)} was accepted, and the ledger no longer has it")
        for index in world.asked
        if question_id(index) not in team.exchanges
    )
    for agent, waiting in enumerate(world.waiting):
        if waiting is None:
            continue
        exchange_id, until = waiting
        if incoming_for(team, member_id(agent)) and (
            protocol.decide_wait(team, member_id(agent), team.exchanges[exchange_id], world.now, until)
            is None
        ):
            found.append(("no-wait-blocked-by-pending-question", f"m{agent} stays blocked on {exchange_id}"))
    return found


# Twice as many explored worlds as systems: they differ in screens, clock or timers and share a system.
@functools.lru_cache(maxsize=1 << 16)
def _system_findings(system: System, limits: Limits) -> tuple[tuple[Violation, ...], tuple[Violation, ...]]:
    """What `always` finds from the system alone, in its order: the ledger's and each desk's invariants
    (before the spanning ones, which read the clock), then late answers still resumed and the holds."""
    ledger = system.ledger
    own = list(_ledger_findings(ledger, limits))
    for desk in system.desks.values():
        own.extend(_desk_findings(desk, limits))
    team = ledger.teams[TEAM]
    shared: list[Violation] = []
    for desk in system.desks.values():
        for notice in desk.notices.values():
            if notice.kind is NoticeKind.ANSWER:
                exchange = team.exchanges.get(notice.subject_id)
                if exchange is not None and exchange.answer is not None and exchange.answer.late:
                    shared.append(("no-continuation-from-late-answer", f"{notice.id} resumes a late answer"))
    shared.extend(_holds(system, team))
    return tuple(own), tuple(shared)


def _holds(system: System, team: Team) -> list[Violation]:
    """A paused team is held at every desk the owner steps itself, and released at every one when active:
    the routing's team-wide requests reach each, and a desk new to a paused team is held before its first
    notice. (A remote desk agrees once the link drains: `_agreement`.)"""
    paused = team.state is TeamState.PAUSED
    wrong = f"team {team.id} is {team.state}, yet {'not ' * paused}held at"
    return [
        ("paused-team-held-at-every-desk", f"{wrong} {m}")
        for m, desk in system.desks.items()
        if m not in system.remote and (team.id in desk.held_teams) != paused
    ]


def _settled(world: World) -> System:
    """The part of the system the spanning invariants (D8, D10) apply to now. They assume the owner's word has
    reached each desk: a remote desk catches up only when the link is drained, so until then it is left out
    (its own invariants still hold at every step). Notices of a team this ledger does not have are another
    owner's (a paired machine's), whose ledger the model does not follow."""
    if world.link is None or not world.system.remote:
        return world.system
    if world.link.drained:
        return _ledger_part(world.system)
    return _local_part(world.system)


@functools.lru_cache(maxsize=1 << 16)
def _ledger_part(system: System) -> System:
    teams = system.ledger.teams
    desks = Map(
        {
            machine: desk
            if all(n.team_id in teams for n in desk.notices.values())
            else replace(desk, notices=Map({k: n for k, n in desk.notices.items() if n.team_id in teams}))
            for machine, desk in system.desks.items()
        }
    )
    return replace(system, desks=desks)


@functools.lru_cache(maxsize=1 << 16)
def _local_part(system: System) -> System:
    return replace(system, desks=Map({m: desk for m, desk in system.desks.items() if m not in system.remote}))


def eventually(world: World, config: Config) -> list[Violation]:
    team = world.system.ledger.teams[TEAM]
    found: list[Violation] = [
        (
            "questions-end-after-deadline",
            f"{exchange.id} is still open at {world.now} past {exchange.deadline_at}",
        )
        for exchange in team.exchanges.values()
        if exchange.state is QuestionState.OPEN and exchange.deadline_at <= world.now
    ]
    found.extend(
        ("waits-end", f"m{agent} is still waiting on {waiting[0]}")
        for agent, waiting in enumerate(world.waiting)
        if waiting is not None and world.now >= waiting[1]
    )
    if world.link is not None and config.link is not None:
        found.extend(_agreement(world, config.link.remote, team))
    return found


def _agreement(world: World, remote: str, team: Team) -> list[Violation]:
    """Once nothing can move, the link is drained and the owner's view is exactly the remote desk's: every
    notice's state and reason as the desk last reported it, and the team held there iff paused here."""
    assert world.link is not None
    if not world.link.drained:
        return [("link-drains", "nothing can move, yet the relay still owes: " + str(ln.facts(world.link)))]
    found: list[Violation] = []
    desk = world.system.desks.get(remote)
    if desk is None:
        return found
    for notice in desk.notices.values():
        if notice.team_id != team.id:  # another owner's notice: its reports went there
            continue
        view = delivery_view(team, notice.id)
        desk_says = (notice.state.value, None if notice.reason is None else notice.reason.value)
        if view is None or (view.state, view.reason) != desk_says:
            owner_says = None if view is None else (view.state, view.reason)
            detail = f"{notice.id}: the owner sees {owner_says}, the desk has {desk_says}"
            found.append(("owner-agrees-with-remote-desk", detail))
    held = team.id in desk.held_teams
    if (team.state is TeamState.PAUSED) != held:
        detail = f"team {team.id} is {team.state} at the owner, {'' if held else 'not '}held at {remote}"
        found.append(("owner-agrees-with-remote-desk", detail))
    return found


def describe(world: World) -> dict[str, str]:
    """Flat facts for trace diffs: question and delivery states, screens, clock, shell work in flight."""
    facts: dict[str, str] = {"clock": str(world.now)}
    team = world.system.ledger.teams[TEAM]
    facts["team"] = team.state.value
    for exchange in team.exchanges.values():
        answer = exchange.answer
        facts[f"question {exchange.id}"] = exchange.state.value + (
            f", answered by {answer.author}{' (late)' if answer.late else ''}" if answer else ""
        )
    for _machine, desk in world.system.desks.items():
        for notice in desk.notices.values():
            facts[f"notice {notice.id}"] = (
                f"{notice.state} ({notice.reason})" if notice.reason else str(notice.state)
            )
    for agent, screen in enumerate(world.screens):
        facts[f"screen a{agent}"] = screen.value
    for notice_id, count in world.written.items():
        facts[f"pasted {notice_id}"] = str(count)
    for agent, waiting in enumerate(world.waiting):
        if waiting:
            facts[f"m{agent} waits"] = waiting[0]
    facts["shell due"] = ", ".join(n for _, n in sorted(world.due)) or "-"
    facts["in flight"] = ", ".join(n for _, n in sorted(world.inflight)) or "-"
    if world.link is not None:
        team_view = world.system.ledger.teams[TEAM]
        for machine, desk in world.system.desks.items():
            if machine in world.system.remote:
                for notice in desk.notices.values():
                    if notice.team_id != TEAM:
                        continue
                    view = delivery_view(team_view, notice.id)
                    seen = "nothing recorded" if view is None else view.state
                    reason = f" ({view.reason})" if view is not None and view.reason else ""
                    facts[f"owner's view of {notice.id}"] = seen + reason
        facts.update({f"relay: {path}": value for path, value in ln.facts(world.link).items()})
    for machine, grants in world.grants.items():
        for team_id, owner in grants.owners.items():
            members = ", ".join(f"{m} as {a}" for m, a in sorted(grants.members.get(team_id, Map()).items()))
            facts[f"grant at {machine}: team {team_id}"] = f"owner {owner}; introduced {members or '-'}"
    return facts


__all__ = [
    "ALWAYS",
    "EVENTUALLY",
    "HOSTILE_ALWAYS",
    "LINK_ALWAYS",
    "LINK_EVENTUALLY",
    "REAL",
    "Config",
    "PlannedAsk",
    "Protocol",
    "World",
    "always",
    "describe",
    "eventually",
    "initial_world",
    "successors",
]


def canonical_world(world: World) -> World:
    """The world with its write-only bookkeeping zeroed: team revisions and the times delivery views were
    last updated. No reducer decision reads them (they only count and stamp), so two worlds that differ only
    there behave alike from here on; without this, every order of the same reports is a new state."""
    return replace(world, system=_canonical_system(world.system))


_BESIDES_SYSTEM = attrgetter(*(field.name for field in attrs.fields(World) if field.name != "system"))


def canonical_fields(world: World) -> tuple[System, tuple[object, ...]]:
    """`canonical_world(world)`'s fields: equal for two worlds exactly when their canonical worlds are. A
    search fingerprints every successor it generates, and building each one's canonical World (then hashing
    it afresh) was a fifth of a link scenario's search."""
    return (_canonical_system(world.system), _BESIDES_SYSTEM(world))


# Successor states share their system, or most of its teams and desks, with their parent, so canonical forms
# are memoized.
@functools.lru_cache(maxsize=1 << 16)
def _canonical_system(system: System) -> System:
    ledger, desks = _canonical_journals(system.ledger, system.desks)
    durable = system.durable
    if durable is not None:
        durable = Durable(durable.home, *_canonical_journals(durable.ledger, durable.desks))
    return replace(system, ledger=ledger, desks=desks, durable=durable)


def _canonical_journals(ledger: Ledger, desks: Map[str, d.Desk]) -> tuple[Ledger, Map[str, d.Desk]]:
    teams = Map({team_id: _canonical_team(team) for team_id, team in ledger.teams.items()})
    plain = Map({machine: _canonical_desk(desk) for machine, desk in desks.items()})
    return replace(ledger, teams=teams), plain


@functools.lru_cache(maxsize=1 << 16)
def _canonical_team(team: Team) -> Team:
    return replace(
        team,
        revision=0,
        exchanges=_zeroed(team.exchanges, _plain_exchange),
        members=_zeroed(team.members, _plain_member),
    )


@functools.lru_cache(maxsize=1 << 16)
def _canonical_desk(desk: d.Desk) -> d.Desk:
    notices = _zeroed(desk.notices, _plain_notice)
    return desk if notices is desk.notices else replace(desk, notices=notices)


def _zeroed(records: Map[str, T], plain: Callable[[T], T]) -> Map[str, T]:
    """`records` with each record made plain; the same map when all already are. Only the changed entries are
    set: a desk or team keeps most records of its parent's, and a record's plain form is memoized."""
    changed = {key: after for key, record in records.items() if (after := plain(record)) is not record}
    return records.update(changed) if changed else records


# Neighbouring worlds share most records (the same objects), so each one's plain form is computed once.
@functools.lru_cache(maxsize=1 << 16)
def _plain_notice(notice: d.Notice) -> d.Notice:
    return notice if notice.updated_at == 0 else replace(notice, updated_at=0)


def _plain_view(view: DeliveryView | None) -> DeliveryView | None:
    return view if view is None or view.updated_at == 0 else DeliveryView(view.state, view.reason, 0)


@functools.lru_cache(maxsize=1 << 16)
def _plain_exchange(exchange: Exchange) -> Exchange:
    delivery, answer_delivery = _plain_view(exchange.delivery), _plain_view(exchange.answer_delivery)
    if delivery is exchange.delivery and answer_delivery is exchange.answer_delivery:
        return exchange
    return replace(exchange, delivery=delivery, answer_delivery=answer_delivery)


@functools.lru_cache(maxsize=1 << 16)
def _plain_member(member: Membership) -> Membership:
    introduction = _plain_view(member.introduction)
    return member if introduction is member.introduction else replace(member, introduction=introduction)
