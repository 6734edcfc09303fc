# An explicit-state model checker in the Stateright style: it explores the real reducers (through a Model
# that wraps them), not a copy of the protocol, so a broken transition in core is a broken transition here.
#
# Breadth-first search over fingerprints (the hash of each state's canonical form, after symmetry reduction)
# with parent links, so the first violation found comes with a shortest action sequence that reaches it. The
# trace is rebuilt by replaying the labels from the initial state, which also proves it reproduces. A
# fingerprint is a 64-bit hash: as in TLC, a collision could hide a state; at the sizes explored here the
# chance is below one in a billion.
from __future__ import annotations

import contextlib
import gc
import random
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

S = TypeVar("S")

Violation = tuple[str, str]  # (property name, what broke)


@attrs.frozen
class Transition(Generic[S]):
    label: str  # unique among one state's successors; a trace is a list of these
    state: S
    violations: tuple[Violation, ...] = ()  # properties of the step itself (an effect it must not have had)


class Model(Protocol[S]):
    """What the checker needs from a scenario over some state type S."""

    @property
    def name(self) -> str: ...

    @property
    def always_properties(self) -> tuple[str, ...]:
        """Checked on every state ("no-exception" is always checked besides these)."""
        ...

    @property
    def eventually_properties(self) -> tuple[str, ...]: ...

    def initial(self) -> S: ...

    def successors(self, state: S) -> Iterable[Transition[S]]: ...

    def always(self, state: S) -> Sequence[Violation]: ...

    def eventually(self, state: S) -> Sequence[Violation]:
        """Checked on terminal states: nothing is enabled any more (not states cut by the depth bound)."""
        ...

    def canonical(self, state: S) -> Hashable:
        """The state up to symmetry: interchangeable agents renamed into one representative order."""
        ...

    def describe(self, state: S) -> dict[str, str]:
        """A flat path -> value description, for the per-step diff of a counterexample."""
        ...


@attrs.frozen
class TraceStep:
    number: int
    label: str
    changes: tuple[tuple[str, str | None, str | None], ...]  # (path, before, after)


@attrs.frozen
class Counterexample:
    property: str
    detail: str
    labels: tuple[str, ...]
    steps: tuple[TraceStep, ...]


@attrs.define
class Result:
    scenario: str
    states: int = 0
    transitions: int = 0
    depth: int = 0
    complete: bool = False  # True: every reachable state within the depth bound was explored
    terminal_states: int = 0
    seconds: float = 0.0
    properties: tuple[str, ...] = ()
    violation: Counterexample | None = None

    @property
    def rate(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float(self.states)


Progress = Callable[[Result], None]


def fingerprint(model: Model[S], state: S) -> int:
    return hash(model.canonical(state))


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    """A search allocates millions of immutable, acyclic values that live on in its memos and frontier: the
    cyclic collector finds nothing among them, yet rescanning them took a third of a search's time, and
    even one young collection per 100,000 new values still took a tenth (each one scans them all once).
    So the collector is off while a search runs: reference counting frees every value a search drops (a
    search of each shipped scenario left no cyclic garbage behind; tests/test_checker_speedups.py checks
    one). It comes back when the search ends, after what survived is frozen out of its sight: the full
    collection that came due right after it rescanned them all for nothing (2.8 s after a 22 s search of
    three-agents-parent-chain)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@_rare_collections()
def explore(
    model: Model[S], max_depth: int, progress: Progress | None = None, progress_every: float = 1.0
) -> Result:
    """Breadth-first search of all states reachable within `max_depth` steps; stops at the first violation."""
    started = time.perf_counter()
    result = Result(model.name, properties=model.always_properties + model.eventually_properties)
    root = model.initial()
    root_fp = fingerprint(model, root)
    parents: dict[int, tuple[int, str] | None] = {root_fp: None}
    frontier: deque[tuple[S, int, int]] = deque([(root, root_fp, 0)])
    result.states = 1
    cut = False
    next_report = started + progress_every

    def fail(found: Violation, fp: int, extra: str | None = None) -> Result:
        labels = _labels_to(parents, fp) + ((extra,) if extra is not None else ())
        result.depth = max(result.depth, len(labels))
        result.violation = counterexample(model, labels, found)
        result.seconds = time.perf_counter() - started
        return result

    found = next(iter(model.always(root)), None)
    if found:
        return fail(found, root_fp)
    while frontier:
        state, fp, depth = frontier.popleft()
        result.depth = max(result.depth, depth)
        successors = _successors(model, state)
        if isinstance(successors, tuple):
            return fail(successors, fp)
        if not successors:
            result.terminal_states += 1
            found = next(iter(model.eventually(state)), None)
            if found:
                return fail(found, fp)
            continue
        if depth >= max_depth:
            cut = True
            continue
        for transition in successors:
            result.transitions += 1
            if transition.violations:
                return fail(transition.violations[0], fp, transition.label)
            child_fp = fingerprint(model, transition.state)
            if child_fp in parents:
                continue
            parents[child_fp] = (fp, transition.label)
            result.states += 1
            found = next(iter(model.always(transition.state)), None)
            if found:
                return fail(found, child_fp)
            frontier.append((transition.state, child_fp, depth + 1))
        if progress is not None and time.perf_counter() >= next_report:
            result.seconds = time.perf_counter() - started
            progress(result)
            next_report += progress_every
    result.complete = not cut
    result.seconds = time.perf_counter() - started
    return result


@_rare_collections()
def simulate(model: Model[S], seed: int, steps: int, max_depth: int) -> Result:
    """Random walks from the initial state (restarting at terminal states or `max_depth`), reproducible by
    `seed`: for configurations too large to exhaust."""
    started = time.perf_counter()
    rng = random.Random(seed)
    result = Result(model.name, properties=model.always_properties + model.eventually_properties)
    labels: list[str] = []
    state = model.initial()
    for _ in range(steps):
        successors = _successors(model, state)
        if isinstance(successors, tuple):
            result.violation = counterexample(model, tuple(labels), successors)
            break
        if not successors or len(labels) >= max_depth:
            if not successors:
                result.terminal_states += 1
                found = next(iter(model.eventually(state)), None)
                if found:
                    result.violation = counterexample(model, tuple(labels), found)
                    break
            state, labels = model.initial(), []
            continue
        transition = successors[rng.randrange(len(successors))]
        labels.append(transition.label)
        result.transitions += 1
        result.states += 1
        result.depth = max(result.depth, len(labels))
        found = (
            transition.violations[0]
            if transition.violations
            else next(iter(model.always(transition.state)), None)
        )
        if found:
            result.violation = counterexample(model, tuple(labels), found)
            break
        state = transition.state
    result.seconds = time.perf_counter() - started
    return result


def replay(model: Model[S], labels: Sequence[str]) -> tuple[list[S], list[Violation]]:
    """Apply `labels` in order from the initial state. Stops early (without error) at a label that is not
    enabled: a fixed protocol may refuse a step the broken one took. Returns the states and violations."""
    state = model.initial()
    states = [state]
    violations = list(model.always(state))
    for label in labels:
        successors = _successors(model, state)
        if isinstance(successors, tuple):
            violations.append(successors)
            break
        transition = next((t for t in successors if t.label == label), None)
        if transition is None:
            break
        violations.extend(transition.violations)
        state = transition.state
        states.append(state)
        violations.extend(model.always(state))
    if len(states) == len(labels) + 1:
        successors = _successors(model, state)
        if isinstance(successors, tuple):
            violations.append(successors)
        elif not successors:
            violations.extend(model.eventually(state))
    return states, violations


def counterexample(model: Model[S], labels: tuple[str, ...], found: Violation) -> Counterexample:
    states, _ = replay(model, labels)
    steps = []
    for number, (label, before, after) in enumerate(zip(labels, states, states[1:], strict=False), start=1):
        old, new = model.describe(before), model.describe(after)
        changes = tuple(
            (path, old.get(path), new.get(path))
            for path in sorted(old.keys() | new.keys())
            if old.get(path) != new.get(path)
        )
        steps.append(TraceStep(number, label, changes))
    return Counterexample(found[0], found[1], labels, tuple(steps))


def _successors(model: Model[S], state: S) -> list[Transition[S]] | Violation:
    """The enabled transitions, or the violation that a reducer raised instead of answering: any exception
    other than the protocol's own rejections is a bug, and the trace to the state that provoked it is the
    report."""
    try:
        return list(model.successors(state))
    except Exception as error:
        return ("no-exception", f"{type(error).__name__}: {error}")


def _labels_to(parents: dict[int, tuple[int, str] | None], fp: int) -> tuple[str, ...]:
    labels: list[str] = []
    link = parents[fp]
    while link is not None:
        fp, label = link
        labels.append(label)
        link = parents[fp]
    return tuple(reversed(labels))
