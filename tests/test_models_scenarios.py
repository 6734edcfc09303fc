# The real protocol against every shipped scenario: no reachable state (within each scenario's depth bound)
# breaks a property. The figures are printed for the closing note; they are not asserted (shared machines).
from __future__ import annotations

import pytest

from harness.models.checker import explore
from harness.models.scenarios import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_real_protocol_holds_in_every_scenario(name: str) -> None:
    model = SCENARIOS[name]
    result = explore(model, model.max_depth)
    print(
        f"\n{name}: {result.states} states, {result.transitions} transitions, depth {result.depth}, "
        f"{'exhausted' if result.complete else f'bounded at {model.max_depth}'}, "
        f"{result.seconds:.1f} s, {result.rate:.0f} states/s"
    )
    assert result.violation is None, result.violation
    assert result.states > 100 and result.terminal_states + (not result.complete) > 0


def test_symmetry_folds_rotations_of_the_ring() -> None:
    model = SCENARIOS["three-agents-ring"]
    assert len(model.symmetries) == 2, "the ring's plan is invariant under its two non-trivial rotations"
    first = list(model.successors(model.initial()))
    keys = {model.canonical(transition.state) for transition in first}
    assert len(first) == 3 and len(keys) == 1, "the three first asks are one state up to rotation"
