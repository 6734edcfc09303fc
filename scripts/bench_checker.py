#!/usr/bin/env python3
# Benchmark of `harness check`: states per second of each scenario, and the whole catalogue's time, each as a
# ratio against a baseline measured in the same run (the machine is shared and noisy: ratios, not seconds).
# Per-scenario rates are per CPU second; the catalogue compares wall times (what --jobs shortens), so load
# from other processes during either half skews that ratio: run it on a quiet machine.
#
# The baseline is the plain search: symmetric scenarios keyed by `symmetry.reference_key` (the serialization
# the fast key is specified by, without its hash-consing) and the scenarios checked one after another; the
# optimised search is what `harness check` runs: the hash-consed key and `--jobs` worker processes. Every
# measurement runs in a freshly forked process, so neither side inherits the other's warm memos.
from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Hashable
from typing import Any

import attrs

from harness.cli.check import ALL_SCENARIOS, Run, check_all
from harness.models.checker import explore
from harness.models.scenarios import WorldModel
from harness.models.symmetry import reference_key
from harness.models.world import World, canonical_world


class PlainWorldModel(WorldModel):
    """A scenario keyed by the reference serialization instead of the hash-consed key."""

    def canonical(self, state: World) -> Hashable:
        if self.symmetric:
            return reference_key(canonical_world(state), self.symmetries)
        return super().canonical(state)


def plain(model: Any) -> Any:
    if not isinstance(model, WorldModel):
        return model  # board scenarios have no symmetry: the same search either way
    return PlainWorldModel(*(getattr(model, field.name) for field in attrs.fields(WorldModel)))


def search(args: tuple[str, int | None, bool]) -> tuple[int, float, float, bool]:
    """(states, CPU seconds, wall seconds, exhausted) of one scenario's search, plain or optimised. Rates
    are per CPU second: the other processes on a shared machine then skew them far less."""
    name, max_depth, baseline = args
    model = plain(ALL_SCENARIOS[name]) if baseline else ALL_SCENARIOS[name]
    started = time.process_time()
    result = explore(model, max_depth if max_depth is not None else model.max_depth)
    assert result.violation is None, f"{name}: {result.violation}"
    return result.states, time.process_time() - started, result.seconds, result.complete


def in_child(args: tuple[str, int | None, bool]) -> tuple[int, float, float, bool]:
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(search, (args,))


def catalogue(names: list[str], max_depth: int | None, jobs: int) -> float:
    runs = [Run(name, None, max_depth, False, 0, 0, progress=False) for name in names]
    started = time.perf_counter()
    with check_all(runs, jobs) as results:
        for run, (result, _peak) in zip(runs, results, strict=True):
            assert result.violation is None, f"{run.scenario}: {result.violation}"
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenarios", nargs="*", help="default: every scenario")
    parser.add_argument("--max-depth", type=int, help="override each scenario's depth bound (quick runs)")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    names = args.scenarios or list(ALL_SCENARIOS)
    print("states per CPU second of each scenario's search, plain and optimised:")
    print(f"{'scenario':30} {'states':>8} {'plain/s':>9} {'fast/s':>9} {'ratio':>6}  scope")
    plain_total = 0.0
    for name in names:
        states, plain_seconds, plain_wall, complete = in_child((name, args.max_depth, True))
        fast_states, fast_seconds, _wall, _ = in_child((name, args.max_depth, False))
        assert fast_states == states, f"{name}: {fast_states} states against the baseline's {states}"
        plain_total += plain_wall
        scope = "exhausted" if complete else "bounded"
        print(
            f"{name:30} {states:8,} {states / plain_seconds:9,.0f} {states / fast_seconds:9,.0f} "
            f"{plain_seconds / fast_seconds:5.1f}x  {scope}"
        )
    whole = catalogue(names, args.max_depth, args.jobs)
    print(
        f"catalogue, wall time: plain, one after another {plain_total:.1f} s; "
        f"optimised, --jobs {args.jobs}: {whole:.1f} s ({plain_total / whole:.1f}x)"
    )


if __name__ == "__main__":
    main()
