# The shipped scenarios: small worlds whose every interleaving the checker explores. Each one stresses a part
# of team.v1 the seed names: mutual asks, parent chains, delivery across a crash, pause/resume/cancel races,
# and the mutual wait that must never deadlock. Maintainers add one here to check a protocol change.
from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import attrs

from harness.core import delivery as d

from .checker import Transition, Violation
from .world import (
    ALWAYS,
    EVENTUALLY,
    REAL,
    Config,
    PlannedAsk,
    Protocol,
    World,
    always,
    canonical_world,
    describe,
    eventually,
    initial_world,
    successors,
)


@attrs.frozen
class WorldModel:
    """A scenario bound to a protocol (the real one, or a mutant): what `checker.explore` runs."""

    name: str
    description: str
    config: Config
    max_depth: int
    protocol: Protocol = REAL
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
        return canonical_world(state)

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
            max_depth=60,
        ),
        WorldModel(
            "delivery-crash-restart",
            "one question and its answer delivered into terminals that go busy, take a draft or open a "
            "dialog, while the daemon may crash at any step and writes may end ok, failed or uncertain.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1),),
                crashes=1,
                disturbances=1,
                fine_delivery=True,
                write_results=(d.WriteResult.OK, d.WriteResult.FAILED, d.WriteResult.UNCERTAIN),
                reads=True,
            ),
            max_depth=40,
        ),
        WorldModel(
            "pause-resume-cancel",
            "two questions racing the owner's pause and resume, the asker's cancel, inbox reads that "
            "suppress unsent notices, and late replies after a cancel or an expiry.",
            Config(
                agents=2,
                asks=(PlannedAsk(0, 1), PlannedAsk(1, 0)),
                pause=True,
                cancels=True,
                reads=True,
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
    )
}
