# `harness eval report` turns N runs of a task family by one engine into the figures that say whether an
# agent change helped: pass@k with the unbiased estimator of Chen et al. (1 - C(n-c, k) / C(n, k)),
# computed exactly with integers and fractions so that a test can compare it with a hand computation,
# a Wilson score interval for pass@1 (it stays inside [0, 1] and is honest at 0/n and n/n, where the
# normal approximation collapses to a point), and the mean time and turns of the runs.
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

# The two-sided 95 % normal quantile.
Z95: Final = 1.959963984540054


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One run: whether its judge passed it, how long it took, and its turns when the engine told them."""

    passed: bool
    seconds: float
    turns: int | None


def pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The probability that at least one of k runs drawn without replacement from n runs, c of which
    passed, passed: 1 - C(n-c, k) / C(n, k), exactly."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def wilson(c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate of c out of n runs."""
    if not 0 <= c <= n or n == 0:
        raise ValueError(f"a Wilson interval needs 0 <= c <= n and n > 0 (n={n}, c={c})")
    p = c / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def default_ks(n: int) -> tuple[int, ...]:
    """The k a report shows when none are asked for: 1, 5 and 10 where they fit, and n."""
    return tuple(sorted({k for k in (1, 5, 10, n) if 1 <= k <= n}))


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of the runs of one family by one engine."""

    n: int
    passed: int
    pass_at: dict[int, Fraction]
    pass1_interval: tuple[float, float]
    mean_seconds: float
    mean_turns: float | None  # over the runs whose turns are known; None when no run told them


def summarize(outcomes: Sequence[RunOutcome], ks: Iterable[int] | None = None) -> Summary:
    """The Summary of `outcomes` (at least one), with pass@k for each of `ks` up to n."""
    n = len(outcomes)
    if n == 0:
        raise ValueError("no runs to summarize")
    c = sum(outcome.passed for outcome in outcomes)
    chosen = default_ks(n) if ks is None else tuple(sorted({k for k in ks if 1 <= k <= n}))
    turns = [outcome.turns for outcome in outcomes if outcome.turns is not None]
    return Summary(
        n=n,
        passed=c,
        pass_at={k: pass_at_k(n, c, k) for k in chosen},
        pass1_interval=wilson(c, n),
        mean_seconds=math.fsum(outcome.seconds for outcome in outcomes) / n,
        mean_turns=math.fsum(turns) / len(turns) if turns else None,
    )
