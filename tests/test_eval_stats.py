# core.eval_stats against hand computations and published Wilson intervals, and the estimator's laws.
from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.eval_stats import RunOutcome, default_ks, pass_at_k, summarize, wilson


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 3, 1, Fraction(3, 5)),
        (5, 3, 2, 1 - Fraction(1, 10)),  # C(2,2)/C(5,2) = 1/10
        (5, 3, 3, Fraction(1)),  # C(2,3) = 0: three draws cannot all miss
        (5, 2, 2, 1 - Fraction(3, 10)),  # C(3,2)/C(5,2) = 3/10
        (5, 2, 3, 1 - Fraction(1, 10)),  # C(3,3)/C(5,3) = 1/10
        (5, 0, 5, Fraction(0)),
        (10, 1, 5, Fraction(1, 2)),  # C(9,5)/C(10,5) = 126/252
    ],
)
def test_pass_at_k_by_hand(n: int, c: int, k: int, expected: Fraction) -> None:
    assert pass_at_k(n, c, k) == expected


def test_pass_at_k_is_exact_where_floats_are_not() -> None:
    """C(200,100) has 59 digits: the estimator stays an exact fraction (1 - C(193,100)/C(200,100))."""
    assert pass_at_k(200, 7, 100) == 1 - Fraction(comb(193, 100), comb(200, 100))


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_laws(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert values[0] == Fraction(c, n)
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert values[-1] == (1 if c else 0)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("c", "n", "low", "high"),
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0), (3, 5, 0.2307, 0.8824)],
)
def test_wilson_matches_published_intervals(c: int, n: int, low: float, high: float) -> None:
    assert wilson(c, n) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_wilson_refuses_no_runs() -> None:
    with pytest.raises(ValueError, match="n > 0"):
        wilson(0, 0)


def test_summary_means_and_default_ks() -> None:
    outcomes = [
        RunOutcome(True, 1.0, 3),
        RunOutcome(False, 2.0, None),
        RunOutcome(True, 3.0, 5),
        RunOutcome(False, 6.0, 4),
    ]
    summary = summarize(outcomes)
    assert (summary.n, summary.passed) == (4, 2)
    assert summary.pass_at == {1: Fraction(1, 2), 4: Fraction(1)}
    assert summary.mean_seconds == 3.0
    assert summary.mean_turns == 4.0  # the run without turns is left out, not counted as 0
    assert summarize(outcomes, ks=[2, 9]).pass_at == {2: 1 - Fraction(1, 6)}
    assert default_ks(12) == (1, 5, 10, 12)
    assert summarize([RunOutcome(False, 1.0, None)]).mean_turns is None
