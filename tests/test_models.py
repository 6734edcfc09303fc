# The model checker must look: every mutant is caught in the scenario named for it, the emitted regression
# test fails on the broken protocol and passes on the real one, simulation is reproducible by its seed, and
# a reducer that raises is reported with its trace. (The real protocol over every scenario is
# tests/test_models_scenarios.py.)
from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import attrs
import pytest

from harness.models.checker import Transition, Violation, explore, replay, simulate
from harness.models.emit import regression_test
from harness.models.mutants import CAUGHT_BY, MUTANTS
from harness.models.scenarios import SCENARIOS


def test_every_mutant_names_a_shipped_scenario() -> None:
    assert set(CAUGHT_BY) == set(MUTANTS)
    assert set(CAUGHT_BY.values()) <= set(SCENARIOS)
    assert len(MUTANTS) >= 6


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_each_mutant_is_caught_with_a_replayable_trace(mutant: str) -> None:
    model = SCENARIOS[CAUGHT_BY[mutant]].with_protocol(MUTANTS[mutant])
    result = explore(model, model.max_depth)
    assert result.violation is not None, f"{mutant} went unnoticed in {model.name}"
    _states, violations = replay(model, result.violation.labels)
    assert result.violation.property in {name for name, _ in violations}
    assert len(result.violation.steps) == len(result.violation.labels)


def _load(source: str, tmp_path: Path) -> ModuleType:
    path = tmp_path / "test_emitted.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("test_emitted", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_emitted_regression_test_fails_on_the_mutant_and_passes_on_the_real_protocol(tmp_path: Path) -> None:
    scenario = SCENARIOS["wait-deadlock"]
    broken = scenario.with_protocol(MUTANTS["wait-ignores-incoming"])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None
    module = _load(regression_test(scenario.name, result.violation, "wait-ignores-incoming"), tmp_path)
    assert module.check(broken), "the emitted test must fail on the broken protocol"
    assert module.check(scenario) == [], "and pass on the real one"
    module.test_wait_deadlock_no_wait_blocked_by_pending_question()


def test_simulation_is_reproducible_by_seed() -> None:
    model = SCENARIOS["pause-resume-cancel"]
    first = simulate(model, seed=7, steps=400, max_depth=30)
    again = simulate(model, seed=7, steps=400, max_depth=30)
    other = simulate(model, seed=8, steps=400, max_depth=30)
    assert first.violation is None
    assert (first.states, first.terminal_states, first.depth) == (
        again.states,
        again.terminal_states,
        again.depth,
    )
    assert first.transitions + first.terminal_states == 400, "every step either moves or restarts a walk"
    assert (other.states, other.depth) != (
        first.states,
        first.depth,
    ) or other.terminal_states != first.terminal_states


def test_simulation_finds_a_mutant_too() -> None:
    model = SCENARIOS["two-agents-ask-each-other"].with_protocol(MUTANTS["accept-non-addressee-reply"])
    result = simulate(model, seed=1, steps=5_000, max_depth=40)
    assert result.violation is not None and result.violation.property == "no-answer-by-non-addressee"


@attrs.frozen
class Counter:
    """A toy model whose reducer raises at 3: the checker must report it, not crash."""

    name: str = "counter"
    always_properties: tuple[str, ...] = ("below-ten",)
    eventually_properties: tuple[str, ...] = ()

    def initial(self) -> int:
        return 0

    def successors(self, state: int) -> Iterator[Transition[int]]:
        if state == 3:
            raise KeyError("reducer bug")
        if state < 5:
            yield Transition(f"+1 from {state}", state + 1)

    def always(self, state: int) -> Sequence[Violation]:
        return [] if state < 10 else [("below-ten", str(state))]

    def eventually(self, state: int) -> Sequence[Violation]:
        return []

    def canonical(self, state: int) -> int:
        return state

    def describe(self, state: int) -> dict[str, str]:
        return {"n": str(state)}


def test_a_raising_reducer_is_a_violation_with_its_trace() -> None:
    result = explore(Counter(), 10)
    assert result.violation is not None
    assert result.violation.property == "no-exception" and "reducer bug" in result.violation.detail
    assert result.violation.labels == ("+1 from 0", "+1 from 1", "+1 from 2")
    assert result.violation.steps[0].changes == (("n", "0", "1"),)


def test_replay_stops_at_a_step_the_protocol_refuses() -> None:
    states, violations = replay(
        SCENARIOS["two-agents-ask-each-other"], ["m0 asks m1 q0", "no such step", "x"]
    )
    assert len(states) == 2 and violations == []
