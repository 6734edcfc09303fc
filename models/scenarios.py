# The shipped scenarios: small worlds whose every interleaving the checker explores. Each one stresses a part
# of team.v1 the seed names: mutual asks, parent chains, delivery across a crash, pause/resume/cancel races,
# and the mutual wait that must never deadlock; and the board's races: two claims on one task, a dependency
# chain worked out of order, a reader paging while notes arrive. Maintainers add one here to check a change.
from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Sequence

import attrs

from harness.core import board as b
from harness.core import delivery as d

from .board_world import (
    BOARD_ALWAYS,
    BOARD_REAL,
    PAGING,
    BoardConfig,
    BoardProtocol,
    BoardWorld,
    PlannedTask,
    board_always,
    board_successors,
    describe_board_world,
    initial_board_world,
)
from .checker import Transition, Violation
from .hostile import HostilePeer
from .link import LinkBounds
from .symmetry import Renaming, canonical_key, plan_symmetries
from .world import (
    ALWAYS,
    EVENTUALLY,
    HOSTILE_ALWAYS,
    LINK_ALWAYS,
    LINK_EVENTUALLY,
    REAL,
    Config,
    PlannedAsk,
    Protocol,
    World,
    always,
    canonical_fields,
    canonical_world,
    describe,
    eventually,
    initial_world,
    successors,
)


@attrs.frozen(slots=False)  # slots off: `symmetries` is a cached property
class WorldModel:
    """A scenario bound to a protocol (the real one, or a mutant): what `checker.explore` runs."""

    name: str
    description: str
    config: Config
    max_depth: int
    protocol: Protocol = REAL
    symmetric: bool = False  # reduce by the plan's agent symmetries (see models/symmetry.py)
    always_properties: tuple[str, ...] = ALWAYS
    eventually_properties: tuple[str, ...] = EVENTUALLY

    def initial(self) -> World:
        return initial_world(self.config, self.protocol)

    def successors(self, state: World) -> Iterator[Transition[World]]:
        for label, world in successors(state, self.config, self.protocol):
            yield Transition(label, world, ())

    def always(self, state: World) -> Sequence[Violation]:
        return always(state, self.config, self.protocol)

    def eventually(self, state: World) -> Sequence[Violation]:
        return eventually(state, self.config)

    def canonical(self, state: World) -> Hashable:
        if self.symmetric:
            return canonical_key(canonical_world(state), self.symmetries)
        return canonical_fields(state)

    @functools.cached_property
    def symmetries(self) -> tuple[Renaming, ...]:
        return plan_symmetries(self.config)

    def describe(self, state: World) -> dict[str, str]:
        return describe(state)

    def with_protocol(self, protocol: Protocol) -> WorldModel:
        return attrs.evolve(self, protocol=protocol)


SCENARIOS: dict[str, WorldModel] = {
    model.name: model
    for model in (
        WorldModel(
            "two-agents-ask-each-other",
            "m0 and m1 ask each other; replies by the addressee and by the wrong member, or none at all; "
            "lost RPC replies retried with the same operation id; notices and answers delivered; deadlines "
            "passing.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1), PlannedAsk(1, 0)),
                wrong_replies=True,
                ignores=True,
                retries=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=40,
        ),
        WorldModel(
            "three-agents-parent-chain",
            "m0 asks m1, m1 follows up to m2, m2 follows up to m0: a parent chain of three across three "
            "agents on two machines, with wrong-member replies.",
            Config(
                agents=3,
                machines=2,
                asks=(PlannedAsk(0, 1), PlannedAsk(1, 2, parent=0), PlannedAsk(2, 0, parent=1)),
                wrong_replies=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=10,  # ~24k states; the whole space (>10^5 states) is for `--max-depth` or `--simulate`
        ),
        WorldModel(
            "three-agents-ring",
            "m0 asks m1, m1 asks m2, m2 asks m0; each answers or never does; notices and answers delivered. "
            "The plan is the same after rotating the agents, so the search keeps one world per rotation.",
            Config(
                agents=3,
                asks=(PlannedAsk(0, 1), PlannedAsk(1, 2), PlannedAsk(2, 0)),
                ignores=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=9,  # rotations folded: ~41k states; deeper with `--max-depth` (60k at 10)
            symmetric=True,
        ),
        WorldModel(
            "delivery-crash-restart",
            "one question delivered into a terminal that goes busy, takes a draft or opens a dialog, while "
            "the daemon may crash at any step, writes may end ok, failed or uncertain, and inbox reads "
            "suppress what is unsent.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1, notify=False),),
                crashes=1,
                disturbances=1,
                fine_delivery=True,
                write_results=(d.WriteResult.OK, d.WriteResult.FAILED, d.WriteResult.UNCERTAIN),
                reads=True,
            ),
            max_depth=40,
        ),
        WorldModel(
            "machine-crash-restart",
            "m0 asks m1 and is answered, each notice delivered look by look into terminals that may go busy, "
            "while the owner's machine may crash at any step: its journals keep only what was durable, "
            "and every step that rode (a look, a tick, the owner's requests of its own desk, the end of a "
            "write and the turn after it, this desk's reports) since their last fsync is lost "
            "(core/riding.py). The terminals keep what they show, so a notice that reached one must not be "
            "typed again.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1, notify=False),),
                machine_crashes=1,
                disturbances=1,
                fine_delivery=True,
                reads=True,
                write_results=(d.WriteResult.OK, d.WriteResult.UNCERTAIN),
            ),
            max_depth=40,
        ),
        WorldModel(
            "pause-resume-cancel",
            "a question racing the owner's pause and resume, the asker's cancel, inbox reads that suppress "
            "unsent notices, an addressee that may never answer, and late replies after a cancel or expiry.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1),),
                ignores=True,
                pause=True,
                cancels=True,
                reads=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=40,
        ),
        WorldModel(
            "join-a-paused-team",
            "the owner pauses the team and resumes it, at any step, and adds m1 on mach1, a machine new to "
            "the team; m1 asks m0 once it is in. m1's introduction and question are owed while the team may "
            "be paused: the routing holds a machine new to a paused team before its first notice, as the "
            "daemon does (core/routing.py).",
            Config(
                agents=2,
                asks=(PlannedAsk(1, 0),),
                pause=True,
                joiner=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=40,
        ),
        WorldModel(
            "wait-deadlock",
            "m0 and m1 each ask the other and then block in `wait`: each incoming question must break the "
            "other's wait, so neither waits for its full timeout while it owes an answer.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1), PlannedAsk(1, 0)),
                waits=True,
                write_results=(d.WriteResult.OK,),
            ),
            max_depth=40,
        ),
        WorldModel(
            "two-machines-lossy-link",
            "m0 on the owner's machine asks m1 on machine mach1, whose desk the owner reaches only "
            "through the relay: the owner's requests (submit, withdraw) go one way and the desk's delivery "
            "reports the other, each through an ordered outbox retried with the same request id, while the "
            "relay reorders frames and, twice at most, loses a frame or an answer, repeats a frame, or is "
            "slow enough that a sender retries early. The asker may cancel, the addressee reply, deadlines "
            "pass.",
            Config(
                agents=2,
                machines=2,
                asks=(PlannedAsk(0, 1),),
                cancels=True,
                write_results=(d.WriteResult.OK,),
                link=LinkBounds("mach1", losses=1, retries=1, duplicates=1, faults=2),
            ),
            max_depth=40,  # exhausted at depth 18: ~78k states
            always_properties=ALWAYS + LINK_ALWAYS,
            eventually_properties=EVENTUALLY + LINK_EVENTUALLY,
        ),
        WorldModel(
            "two-machines-hostile-peer",
            "the lossy-link story (m0 on the owner's machine asks m1 on mach1 through the relay and may "
            "cancel; m1 replies) while mach2, also paired with mach1, hands mach1's desk at any step "
            "question and answer notices for a1 outside its grant, an introduction of a1 into the owner's "
            "team and a question for it, a hold or withdrawal of that team or its question, and every "
            "owner's request it sees on the relay, as its own. The relay once loses a frame or an answer, "
            "repeats a frame, or is slow enough for an early retry; the owner and mach1 may pair again while "
            "it holds frames of the old pairing, which it hands over later. Every request reaching mach1's "
            "desk passes the desk's grant (core/remote_grant.py).",
            Config(
                agents=2,
                machines=2,
                asks=(PlannedAsk(0, 1),),
                cancels=True,
                write_results=(d.WriteResult.OK,),
                link=LinkBounds("mach1", losses=1, retries=1, duplicates=1, faults=1, repairs=1),
                hostile=HostilePeer(),
            ),
            max_depth=40,  # exhausted at depth 17: ~72k states
            always_properties=ALWAYS + LINK_ALWAYS + HOSTILE_ALWAYS,
            eventually_properties=EVENTUALLY + LINK_EVENTUALLY,
        ),
    )
}


@attrs.frozen
class BoardModel:
    """A board scenario bound to a board reducer (the real one, or a mutant): what `checker.explore` runs."""

    name: str
    description: str
    config: BoardConfig
    max_depth: int
    protocol: BoardProtocol = BOARD_REAL
    always_properties: tuple[str, ...] = BOARD_ALWAYS
    eventually_properties: tuple[str, ...] = ()

    def initial(self) -> BoardWorld:
        return initial_board_world(self.config, self.protocol)

    def successors(self, state: BoardWorld) -> Iterator[Transition[BoardWorld]]:
        return board_successors(state, self.config, self.protocol)

    def always(self, state: BoardWorld) -> Sequence[Violation]:
        return board_always(state.board, self.config.limits)

    def eventually(self, state: BoardWorld) -> Sequence[Violation]:
        return ()

    def canonical(self, state: BoardWorld) -> Hashable:
        return state

    def describe(self, state: BoardWorld) -> dict[str, str]:
        return describe_board_world(state)

    def with_protocol(self, protocol: BoardProtocol) -> BoardModel:
        return attrs.evolve(self, protocol=protocol)


DEV = b.Addressee(b.AddresseeKind.ROLE, "dev")

# Kept apart from SCENARIOS: a board scenario runs a board reducer, not the team protocol (see cli/check.py).
BOARD_SCENARIOS: dict[str, BoardModel] = {
    model.name: model
    for model in (
        BoardModel(
            "board-claim-race",
            "m0 and m1, both holding the dev role, race to claim task t1 that is for dev, while m2, who does "
            "not hold it, tries too; each may start, complete and release it, and the owner may release a "
            "claim naming either of them or cancel the task.",
            BoardConfig(
                members=("m0", "m1", "m2"),
                roles=(("dev", ("m0", "m1")),),
                tasks=(PlannedTask("t1", owner=DEV),),
                workers=("m0", "m1", "m2"),
                owner_releases=True,
                owner_cancels=True,
                attempts=2,
            ),
            max_depth=40,
        ),
        BoardModel(
            "board-dependency-chain",
            "t3 depends on t2, which depends on t1; m0 and m1 try to claim, start, complete and release each "
            "of them in any order, the later ones before the earlier are done, and the owner may cancel any "
            "of them.",
            BoardConfig(
                members=("m0", "m1"),
                tasks=(PlannedTask("t1"), PlannedTask("t2", ("t1",)), PlannedTask("t3", ("t2",))),
                workers=("m0", "m1"),
                owner_cancels=True,
            ),
            max_depth=40,
        ),
        BoardModel(
            "board-paging-reader",
            "s sends r four notes one at a time while r pages its mailbox two notes a page, with "
            "unreadOnly or without, following each page's nextOffset until it is None, then starting again: "
            "every pass must show r every note it had not read before the pass.",
            BoardConfig(
                members=("r", "s"),
                sender="s",
                reader="r",
                notes=4,
                reads=6,
                limits=b.BoardLimits(page_notes=2),
            ),
            max_depth=40,
            always_properties=(*BOARD_ALWAYS, PAGING),
        ),
    )
}
