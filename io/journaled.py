# What the runners of the team ledger, the delivery desk and the boards share around their pure reducers:
# a stamp for each command that never goes back in time, the step checked against the reducer's invariants
# (a daemon that checks them stops the state a violating command would have made; it never applies it), and,
# for the ledger and the desk, the rebuild of a state from its checkpoint and journal through the same
# reducer. Each runner keeps its own persist-before-act order, which differs for a reason: the ledger
# pipelines group commits across teams, the desk (one state for the machine) steps under a lock and lets
# some entries ride, and a board writes the records of its seed's journal contract.
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import attrs

from harness.core.codec import from_json
from harness.core.errors import Rejected
from harness.core.outcome import Accepted
from harness.io.journal_files import Recovery

# Told a broken invariant (code, detail) and what broke it, says why the runner stops; the daemon counts it.
Violated = Callable[[str, tuple[str, str]], str]


class ReplayError(Exception):
    """A checkpoint or journal entry that does not rebuild the state: the store is corrupt."""


class Stamped(Protocol):
    @property
    def at(self) -> int: ...


State = TypeVar("State")
Command = TypeVar("Command", bound=Stamped)
Limits = TypeVar("Limits")


@attrs.frozen
class Reducer(Generic[State, Command, Limits]):
    """A pure reducer as a runner journals it: its step, and the invariants a step must keep."""

    step: Callable[[State, Command, Limits], Accepted[State] | Rejected]
    violations: Callable[[State, Command, Accepted[State] | Rejected, Limits], list[tuple[str, str]]]


class Stepper(Generic[State, Command, Limits]):
    """One runner's stamping and checked stepping of its reducer."""

    def __init__(
        self,
        reducer: Reducer[State, Command, Limits],
        limits: Limits,
        clock: Callable[[], int],
        violated: Violated | None,  # None: invariants are not checked
    ) -> None:
        self.reducer = reducer
        self.limits = limits
        self._clock = clock
        self._violated = violated
        self.last_at = 0  # the latest time given to a command (or seen in a replay)

    def peek(self) -> int:
        """The time a command stepped now would get, without giving it."""
        return max(self.last_at, self._clock())

    def stamp(self) -> int:
        """The time of a command stepped now: the clock, never behind a command before."""
        self.last_at = self.peek()
        return self.last_at

    def stamped(self, command: Command) -> Command:
        return attrs.evolve(command, at=self.stamp())  # type: ignore[misc]

    def checked(
        self, state: State, command: Command, where: str
    ) -> tuple[Accepted[State] | Rejected, str | None]:
        """The step's outcome, and why the runner must stop instead of applying it (an invariant the step
        breaks, when they are checked) or None."""
        outcome = self.reducer.step(state, command, self.limits)
        if self._violated is not None:
            broken = self.reducer.violations(state, command, outcome, self.limits)
            if broken:
                return outcome, self._violated(f"{type(command).__name__} {where}", broken[0])
        return outcome, None


def restored(recovery: Recovery, state_type: type[State], what: str) -> State | None:
    """The state the store's checkpoint holds, or None without one."""
    if recovery.checkpoint is None:
        return None
    loaded = from_json(recovery.checkpoint, state_type)
    if isinstance(loaded, Rejected):
        raise ReplayError(f"checkpoint {recovery.checkpoint_seq} is not a {what}: {loaded.detail}")
    return loaded


def replay_entries(
    reducer: Reducer[State, Command, Limits],
    state: State,
    recovery: Recovery,
    decode: Callable[[Any], Command | Rejected],
    *,
    limits: Limits,
    stranger: Callable[[Command], str | None] = lambda command: None,
) -> tuple[State, int]:
    """`state` (the checkpoint's) stepped through the journal's entries, each under `limits` (those of the
    day it was admitted: see `replay_limits`), and the latest command time seen. A command that does not
    decode, is `stranger` (says why it is not this store's) or is refused raises ReplayError."""
    last_at = 0
    for entry in recovery.entries:
        command = decode(entry.body)
        if isinstance(command, Rejected):
            raise ReplayError(f"journal entry {entry.seq} is not a command: {command.detail}")
        why = stranger(command)
        if why is not None:
            raise ReplayError(f"journal entry {entry.seq} {why}")
        outcome = reducer.step(state, command, limits)
        if isinstance(outcome, Rejected):
            raise ReplayError(
                f"journal entry {entry.seq} was refused on replay ({outcome.code}: {outcome.detail})"
            )
        state = outcome.state
        last_at = max(last_at, command.at)
    return state, last_at
