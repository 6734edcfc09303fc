# Issue 19: behaviours of core/eval_stats.py that scripts/mutate_core.py found no test pinned: an empty
# report is refused with its own message (not the Wilson interval's), and pass@1 is reported when asked for.
from __future__ import annotations

from fractions import Fraction

import pytest

from harness.core.eval_stats import RunOutcome, summarize


def test_no_runs_is_refused_as_no_runs() -> None:
    """Without its own check an empty report fails later, in the Wilson interval, on counts nobody gave."""
    with pytest.raises(ValueError, match=r"^no runs to summarize$"):
        summarize([])


def test_asked_ks_keep_one_and_drop_the_impossible() -> None:
    outcomes = [RunOutcome(True, 1.0, None), RunOutcome(False, 1.0, None), RunOutcome(False, 1.0, None)]
    assert summarize(outcomes, ks=[0, 1, 3, 4]).pass_at == {1: Fraction(1, 3), 3: Fraction(1)}
