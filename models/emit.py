# A counterexample is only useful if it stays fixed: this turns one into a pytest regression test that
# replays the exact action labels against the current reducers and fails while the bug is there.
from __future__ import annotations

import re

from .checker import Counterexample


def regression_test(scenario: str, counterexample: Counterexample, mutant: str | None = None) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", f"{scenario} {counterexample.property}".lower()).strip("_")
    labels = "".join(f"    {label!r},\n" for label in counterexample.labels)
    found = f" (found with mutant {mutant!r})" if mutant else ""
    return f"""# Regression test emitted by `harness check`{found}: scenario {scenario!r} broke
# {counterexample.property!r}: {counterexample.detail}
# It replays the shortest trace the checker found; it fails while the protocol still allows the violation.
from __future__ import annotations

from harness.models.checker import Model, Violation, replay
from harness.models.scenarios import BOARD_SCENARIOS, SCENARIOS

SCENARIO = {scenario!r}
LABELS = [
{labels}]


def check(model: Model[object]) -> list[Violation]:
    _states, violations = replay(model, LABELS)
    return violations


def test_{slug}() -> None:
    model = SCENARIOS[SCENARIO] if SCENARIO in SCENARIOS else BOARD_SCENARIOS[SCENARIO]
    assert check(model) == []
"""
