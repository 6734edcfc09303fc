# `harness check`: the model checker for maintainers. It explores every interleaving of the shipped scenarios
# over the real reducers (or a named mutant of them), prints progress and a summary per scenario, and on a
# violation the shortest trace with the state changes at each step, optionally as a regression test.
#
# Scenarios are independent searches, so with --jobs they run side by side, each in a worker process of its
# own (forked: no re-import; one scenario per worker, so each reports its own peak memory). Results are
# printed in catalogue order all the same, and the first violation in that order stops the run.
from __future__ import annotations

import functools
import json
import multiprocessing
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import attrs
import typer

# The models take longer to import than a command may take to start: only a check loads them.
if TYPE_CHECKING:
    from harness.models.board_world import BoardProtocol
    from harness.models.channel_world import ChannelModel
    from harness.models.checker import Counterexample, Result, S
    from harness.models.checker import Model as SearchModel
    from harness.models.scenarios import BoardModel, WorldModel
    from harness.models.world import Protocol

    Model = WorldModel | BoardModel | ChannelModel


@functools.cache
def all_scenarios() -> dict[str, Model]:
    from harness.models.channel_world import CHANNEL_SCENARIOS
    from harness.models.scenarios import BOARD_SCENARIOS, SCENARIOS

    return {**SCENARIOS, **BOARD_SCENARIOS, **CHANNEL_SCENARIOS}


@functools.cache
def all_mutants() -> dict[str, Protocol | BoardProtocol]:
    from harness.models.mutants import BOARD_MUTANTS, MUTANTS

    return {**MUTANTS, **BOARD_MUTANTS}


def __getattr__(name: str) -> object:
    """ALL_SCENARIOS and ALL_MUTANTS, loaded when first named (scripts/bench_checker.py names them)."""
    if name == "ALL_SCENARIOS":
        return all_scenarios()
    if name == "ALL_MUTANTS":
        return all_mutants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_command(
    *,
    scenarios: Annotated[
        list[str] | None, typer.Argument(metavar="[SCENARIO]...", help="Default: all.")
    ] = None,
    max_depth: Annotated[
        int | None, typer.Option("--max-depth", help="Override each scenario's depth bound.")
    ] = None,
    mutant: Annotated[
        str | None, typer.Option("--mutant", help="Check a deliberately broken protocol.")
    ] = None,
    emit_test: Annotated[
        Path | None, typer.Option("--emit-test", help="Write a violation as a pytest file.")
    ] = None,
    simulate_mode: Annotated[
        bool, typer.Option("--simulate", help="Random walks instead of exhaustive search.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --simulate (reproduces a run exactly).")] = 0,
    steps: Annotated[int, typer.Option("--steps", help="Steps of --simulate.")] = 10_000,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", min=1, help="Scenarios checked at once, each in its own process. Default: CPUs."
        ),
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="List scenarios and mutants.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Model-check the protocol: exit 0 when every property holds, 1 on a violation."""
    if list_only:
        _list(json_out)
        return
    names = scenarios or list(all_scenarios())
    unknown = [name for name in names if name not in all_scenarios()]
    if unknown or (mutant is not None and mutant not in all_mutants()):
        bad = ", ".join(unknown) if unknown else f"mutant {mutant}"
        typer.echo(f"error: unknown {bad}; `harness check --list` shows what exists", err=True)
        raise typer.Exit(2)
    runs = [
        Run(name, mutant, max_depth, simulate_mode, seed, steps, progress=not json_out)
        for name in names
        if _with_mutant(all_scenarios()[name], mutant) is not None
    ]
    started = time.perf_counter()
    reports: list[dict[str, Any]] = []
    failed: tuple[Model, Counterexample] | None = None
    with check_all(runs, jobs if jobs is not None else len(os.sched_getaffinity(0))) as results:
        for run, (result, peak_mb) in zip(runs, results, strict=False):
            report = _report(result, run.depth(), simulate_mode, peak_mb)
            reports.append(report)
            if not json_out:
                _print_summary(report)
            if result.violation is not None:
                model = _with_mutant(all_scenarios()[run.scenario], mutant)
                assert model is not None
                failed = (model, result.violation)
                if not json_out:
                    _print_violation(result.violation)
                break
    seconds = time.perf_counter() - started
    if not json_out and len(reports) > 1:
        typer.echo(f"{len(reports)} scenarios checked in {seconds:.1f} s")
    if failed is not None and emit_test is not None:
        from harness.models.emit import regression_test

        emit_test.write_text(regression_test(failed[0].name, failed[1], mutant), encoding="utf-8")
        if not json_out:
            typer.echo(f"wrote regression test {emit_test}")
    if json_out:
        document = {
            "ok": failed is None,
            "mutant": mutant,
            "seconds": round(seconds, 3),
            "scenarios": reports,
        }
        typer.echo(json.dumps(document, indent=2))
    raise typer.Exit(1 if failed is not None else 0)


@attrs.frozen
class Run:
    """One scenario's search, by names only: what a worker process is handed."""

    scenario: str
    mutant: str | None
    max_depth: int | None
    simulated: bool
    seed: int
    steps: int
    progress: bool

    def depth(self) -> int:
        return self.max_depth if self.max_depth is not None else all_scenarios()[self.scenario].max_depth


def check_one(run: Run) -> tuple[Result, int]:
    """Run one scenario's search; with the peak memory (MB) of the process that ran it."""
    model = _with_mutant(all_scenarios()[run.scenario], run.mutant)
    assert model is not None, "runs are only made for scenarios the mutant applies to"
    depth = run.depth()
    progress = _progress if run.progress else None
    result = _search(model, run, depth, progress)  # type: ignore[misc]  # one state type per model
    return result, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _search(model: SearchModel[S], run: Run, depth: int, progress: Callable[[Result], None] | None) -> Result:
    from harness.models.checker import explore, simulate

    return simulate(model, run.seed, run.steps, depth) if run.simulated else explore(model, depth, progress)


@contextmanager
def check_all(runs: list[Run], jobs: int) -> Iterator[Iterator[tuple[Result, int]]]:
    """Each run's result, in the runs' order: here, one after the other, or from `jobs` worker processes.
    Leaving early (a violation, an interrupt) stops the workers still searching."""
    if jobs == 1 or len(runs) < 2:
        yield (check_one(run) for run in runs)
        return
    with multiprocessing.get_context("fork").Pool(min(jobs, len(runs)), maxtasksperchild=1) as pool:
        yield pool.imap(check_one, runs)  # the pool's exit terminates whatever still runs


def _with_mutant(model: Model, mutant: str | None) -> Model | None:
    """`model` running mutant `mutant` (None: the real reducers); None when the mutant is of the other
    machine (a team mutant cannot run in a board scenario)."""
    from harness.models.channel_world import ChannelModel
    from harness.models.mutants import BOARD_MUTANTS, MUTANTS
    from harness.models.scenarios import BoardModel

    if mutant is None:
        return model
    if isinstance(model, ChannelModel):  # the mutants break team or board reducers, not the channel plan
        return None
    if isinstance(model, BoardModel):
        return model.with_protocol(BOARD_MUTANTS[mutant]) if mutant in BOARD_MUTANTS else None
    return model.with_protocol(MUTANTS[mutant]) if mutant in MUTANTS else None


def _progress(result: Result) -> None:
    print(
        f"  {result.scenario}: {result.states:,} states, depth {result.depth}, {result.rate:,.0f} states/s",
        file=sys.stderr,
        flush=True,
    )


def _report(result: Result, depth: int, simulated: bool, peak_mb: int) -> dict[str, Any]:
    violation = result.violation
    return {
        "scenario": result.scenario,
        "mode": "simulate" if simulated else "explore",
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "maxDepth": depth,
        "complete": result.complete,
        "terminalStates": result.terminal_states,
        "seconds": round(result.seconds, 3),
        "statesPerSecond": round(result.rate),
        "peakRssMb": peak_mb,
        "properties": list(result.properties),
        "held": violation is None,
        "violation": None
        if violation is None
        else {
            "property": violation.property,
            "detail": violation.detail,
            "trace": [
                {
                    "step": step.number,
                    "action": step.label,
                    "changes": [{"path": p, "before": b, "after": a} for p, b, a in step.changes],
                }
                for step in violation.steps
            ],
        },
    }


def _print_summary(report: dict[str, Any]) -> None:
    verdict = "all properties held" if report["held"] else "VIOLATION"
    scope = "exhausted" if report["complete"] else f"to depth {report['maxDepth']}"
    typer.echo(
        f"{report['scenario']}: {verdict}; {report['states']:,} states, "
        f"{report['transitions']:,} transitions, "
        f"depth {report['depth']} ({report['mode']}, {scope}), {report['seconds']:.1f} s, "
        f"{report['statesPerSecond']:,} states/s, peak {report['peakRssMb']} MB"
    )
    if report["held"]:
        typer.echo(f"  properties: {', '.join(report['properties'])}")


def _print_violation(violation: Counterexample) -> None:
    typer.echo(f"  property {violation.property!r} broken: {violation.detail}")
    for step in violation.steps:
        typer.echo(f"  {step.number:3}. {step.label}")
        for path, before, after in step.changes:
            typer.echo(f"         {path}: {_shown(before)} -> {_shown(after)}")


def _shown(value: str | None) -> str:
    return "-" if value is None else value


def _describe(protocol: Protocol | BoardProtocol) -> str:
    from harness.models.board_world import BoardProtocol

    if isinstance(protocol, BoardProtocol):
        return (protocol.description or protocol.step.__doc__ or "").strip()
    return (protocol.description or protocol.step.__doc__ or protocol.decide_wait.__doc__ or "").strip()


def _list(json_out: bool) -> None:
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "scenarios": {name: model.description for name, model in all_scenarios().items()},
                    "mutants": {name: _describe(protocol) for name, protocol in all_mutants().items()},
                },
                indent=2,
            )
        )
        return
    typer.echo("scenarios:")
    for name, model in all_scenarios().items():
        typer.echo(f"  {name}: {model.description}")
    typer.echo("mutants:")
    for name in all_mutants():
        typer.echo(f"  {name}")
