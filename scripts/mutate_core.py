# Mutation testing: do the tests notice when the code is wrong? Line coverage says a line ran; a surviving
# mutant says no test would fail if that line were wrong. This makes small AST mutants of a module (a
# comparison flipped, `and`/`or` swapped, a `not` dropped, `+`/`-` swapped, a constant changed, a statement
# deleted, a return made `return None`; strings with a space, and every literal part of an f-string that has
# one, are messages and stay), one mutant at a time, and runs the module's tests against each:
#
#   .venv/bin/python scripts/mutate_core.py --core [--jobs 2] [--only core/x.py ...] [--sample N] [--seed S]
#       [--min-score PERCENT]
#   .venv/bin/python scripts/mutate_core.py core/team.py tests/test_team_examples.py [more modules/tests]
#       [--sample N] [--seed S] [--jobs N]
#
# --core mutates every module of CORE_TESTS (below: all of core/) against its entry there plus, when they
# exist, tests/test_mutants_<module>.py and tests/test_<module>_fire.py (<module>: the file's stem), with a
# seeded sample of CORE_SAMPLE mutants per module (all of them when it has fewer). Otherwise, arguments that
# are files of a package folder (core/, io/, cli/, models/: pyproject's `package-dir`) are mutated and every
# other argument (options too, as `--deselect=tests/x.py::test_y`) goes to pytest; pytest runs `-x -q -p
# no:cacheprovider --hypothesis-seed=0` with no Hypothesis example database, so a run is reproducible.
# Nothing in the checkout is modified: the test process loads the mutated source in place of the module
# (this file is also that pytest plugin, `-p mutate_core`), so the tests' own imports get the mutant.
#
# --jobs N runs N mutants at once, each in a forked child of a process that has pytest, Hypothesis and trio
# imported (a fresh interpreter spends 2 s of CPU importing them). Each module's tests are
# first run unmutated in the same run; a mutant's timeout is 10x that time (at least 30 s), and a mutant past
# it is killed with its process group and counted killed, but listed in its own column: a hang is a weaker
# kill than a failing assertion. Mutants listed in scripts/mutants_equivalent.toml (by module, function,
# description and the line as written, never by its number) are not run, not scored, and listed with their
# reason; a sampled mutant that is equivalent leaves the module fewer scored mutants rather than changing
# which ones are drawn.
# The report: per module found/tried/killed/timeouts/equivalent/survived/score, the total, every survivor
# (module:line function: description). Exit status 0 (it is a report), or 1 below --min-score.
#
# Sizing (measured 2026-12-01, the two cores shared with other work at a load of 8-10): core/ has 5,780
# mutants; --core's 40 per module (all of a smaller module's) makes 996. A mutant costs about 1 s of CPU
# (0.6 s with values' tests, 0.95 s with the session modules'), each module's unmutated run 2-3 s, and
# about 2 % of mutants hang until their timeout. So --core --jobs 2 takes about 15 minutes on two idle cores
# (estimated from these figures); under that load, 80 mutants of the session modules took 3.4 minutes and
# 4 per module (108 mutants, 27 unmutated runs) 11.3. A module missing from CORE_TESTS is named, not run.
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import os
import random
import signal
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, NoReturn

ROOT = Path(__file__).resolve().parent.parent
TARGET_ENV = "MUTATE_CORE_TARGET"  # "dotted.module=/path/to/mutated_source.py", read by the plugin half
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-p", "mutate_core")
# The plugins preloaded below cannot have their asserts rewritten in the child, which pytest warns about.
PRELOAD_ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
EQUIVALENT_FILE = ROOT / "scripts" / "mutants_equivalent.toml"
# Imported once before forking, never harness itself (the mutant must be the first harness.core.x loaded).
PRELOAD = ("pytest", "_pytest.python", "hypothesis", "trio", "pytest_trio", "attrs", "cattrs", "immutables",
           "trio_websocket", "nacl.bindings", "nacl.public", "nacl.signing")  # fmt: skip
CORE_SAMPLE = 40
BASELINE_TIMEOUT, MIN_TIMEOUT, TIMEOUT_FACTOR = 600.0, 30.0, 10.0

# Each module's tests (files of tests/): pure core tests (no daemon, tmux or subprocess), the fast ones; one
# line per module. Hypothesis stateful machines (test_*_stateful.py) take a minute each and are left out.
CORE_TESTS: dict[str, tuple[str, ...]] = {
    "core/actions.py": ("test_actions.py", "test_cli_fast.py", "test_spec_trust.py", "test_team_examples.py"),
    "core/board.py": ("test_board_examples.py", "test_spec_board.py"),
    "core/board_invariants.py": ("test_board_examples.py", "test_spec_board.py"),
    "core/board_recovery.py": ("test_board_examples.py",),
    "core/bounded_json.py": ("test_bounded_json.py",),
    "core/channels.py": ("test_channels.py",),
    "core/codec.py": ("test_codec.py", "test_team_examples.py"),
    "core/commands.py": ("test_codec.py", "test_team_examples.py"),
    "core/delivery.py": ("test_delivery_examples.py", "test_delivery_spec.py"),
    "core/delivery_invariants.py": ("test_invariants_fire.py", "test_delivery_examples.py"),
    "core/effects.py": ("test_team_letter.py", "test_notice_text.py"),
    "core/errors.py": ("test_team_examples.py", "test_spec_team.py"),
    "core/eval_stats.py": ("test_eval_stats.py",),
    "core/fast_structure.py": ("test_fast_structure.py", "test_codec.py", "test_mutants_codec.py"),
    "core/glob_match.py": ("test_glob_match.py",),
    "core/invariants.py": ("test_team_examples.py", "test_spec_team.py"),
    "core/limits.py": ("test_team_examples.py", "test_spec_team.py", "test_delivery_spec.py"),
    "core/outcome.py": ("test_team_examples.py",),
    "core/queries.py": ("test_team_examples.py", "test_team_letter.py"),
    "core/records.py": ("test_values.py", "test_team_examples.py", "test_spec_team.py"),
    "core/redaction.py": (),
    "core/remote_grant.py": ("test_remote_grant.py",),
    "core/routing.py": (
        "test_team_letter.py", "test_remote_grant.py", "test_mutants_system.py", "test_routing.py"
    ),
    "core/session.py": ("test_session_examples.py", "test_spec_session.py"),
    "core/session_invariants.py": ("test_session_examples.py", "test_spec_session.py"),
    "core/system.py": (
        "test_team_letter.py", "test_notice_text.py", "test_remote_grant.py", "test_riding.py",
        "test_models_link.py",
    ),
    "core/riding.py": ("test_riding.py",),
    "core/team.py": ("test_team_examples.py", "test_team_letter.py", "test_spec_team.py"),
    "core/team_delta.py": ("test_team_delta.py",),
    "core/terminal_text.py": ("test_terminal_text.py",),
    "core/values.py": ("test_values.py",),
}  # fmt: skip

Site = tuple[int, str, Callable[[], Callable[[], None]]]  # (line, description, apply -> undo) on one tree

# Each operator and what a mutant puts in its place (a comparison flips at its boundary or its sense).
_SWAP: dict[type[ast.AST], type[ast.AST]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.And: ast.Or,
    ast.Or: ast.And, ast.Add: ast.Sub, ast.Sub: ast.Add,
}  # fmt: skip
_SYMBOL: dict[type[ast.AST], str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
    ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.And: "and", ast.Or: "or", ast.Add: "+",
    ast.Sub: "-",
}  # fmt: skip
_DELETABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.If, ast.For, ast.While, ast.With,
              ast.Try, ast.Raise, ast.Assert)  # fmt: skip
_NOT_CODE = frozenset({"annotation", "returns", "format_spec", "decorator_list"})  # declarations, not logic


def _swapped(op: ast.AST, where: ast.AST) -> str:
    """The swap, and the expression it is made in (a line may hold several of the same operator)."""
    shown = ast.unparse(where)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[_SWAP[type(op)]]}` in `{shown}`"


def _is_docstring(node: ast.AST) -> bool:
    value = node.value if isinstance(node, ast.Expr) else None
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def _is_dunder_all(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
    )


def _is_message(node: ast.AST) -> bool:
    """An f-string with prose in it: its literal parts (even `)` or `:`) are wording like a spaced string."""
    return isinstance(node, ast.JoinedStr) and any(
        isinstance(part, ast.Constant) and " " in str(part.value) for part in node.values
    )


def _setter(obj: object, field: str | int, value: object) -> Callable[[], Callable[[], None]]:
    """Set `obj.field` (or `obj[field]` of a list of nodes) to `value`, when applied; applying returns the
    undo, so that one parsed tree serves every mutant of a module."""

    def put(new: object) -> None:
        if isinstance(obj, list) and isinstance(field, int):
            obj[field] = new
        else:
            setattr(obj, str(field), new)

    def apply() -> Callable[[], None]:
        old = obj[field] if isinstance(obj, list) and isinstance(field, int) else getattr(obj, str(field))
        put(value)
        return lambda: put(old)

    return apply


def _constant(value: object) -> tuple[object, str] | None:
    if isinstance(value, bool):
        return not value, f"constant {value} -> {not value}"
    if isinstance(value, int):
        return value + 1, f"constant {value} -> {value + 1}"
    if isinstance(value, str) and " " not in value:  # prose (a message, a detail) is wording, not logic
        new = "" if value else "mutant"
        return new, f"constant {value!r} -> {new!r}"
    return None


def _node_sites(node: ast.AST) -> Iterator[Site]:
    """The mutants of `node` itself, not of its children."""
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            ops = [*node.ops[:i], _SWAP[type(op)](), *node.ops[i + 1 :]]
            yield line, _swapped(op, node), _setter(node, "ops", ops)
    elif isinstance(node, ast.BoolOp | ast.BinOp | ast.AugAssign) and type(node.op) in _SWAP:
        yield line, _swapped(node.op, node), _setter(node, "op", _SWAP[type(node.op)]())
    elif isinstance(node, ast.Constant) and (changed := _constant(node.value)) is not None:
        yield line, changed[1], _setter(node, "value", changed[0])
    elif isinstance(node, ast.Return) and node.value is not None and ast.unparse(node.value) != "None":
        yield line, "return value -> None", _setter(node, "value", None)


def _child_sites(holder: object, key: str | int, child: ast.AST) -> Iterator[Site]:
    """The mutants that replace `child` where it sits (`holder.key` or `holder[key]`)."""
    if isinstance(child, ast.UnaryOp) and isinstance(child.op, ast.Not):
        yield child.lineno, "drop `not`", _setter(holder, key, child.operand)
    declaration = isinstance(child, ast.AnnAssign) and child.value is None  # a field of a record class
    if (
        isinstance(holder, list)
        and isinstance(child, _DELETABLE)
        and not (_is_docstring(child) or declaration)
    ):
        first = ast.unparse(child).splitlines()[0]
        yield child.lineno, f"delete `{first}`", _setter(holder, key, ast.copy_location(ast.Pass(), child))


def _sites(node: ast.AST) -> Iterator[Site]:
    """Every mutant of `node`'s tree, in a fixed order, skipping docstrings, annotations and `__all__`."""
    yield from _node_sites(node)
    for field, value in ast.iter_fields(node):
        if field in _NOT_CODE:
            continue
        children = enumerate(value) if isinstance(value, list) else [(field, value)]
        for key, child in children:
            if _is_message(node) and isinstance(child, ast.Constant):
                continue
            if isinstance(child, ast.AST) and not _is_docstring(child) and not _is_dunder_all(child):
                yield from _child_sites(value if isinstance(value, list) else node, key, child)
                yield from _sites(child)


class Mutant(NamedTuple):
    line: int
    function: str  # the innermost enclosing `def` as Class.method, or <module>: with `description` and
    description: str  # `code`, the mutant's name in mutants_equivalent.toml, which survives edits elsewhere
    code: str  # the mutated line as written (stripped): two mutants alike in a function differ here
    occurrence: int  # 1, 2, ...: among the mutants alike in function, description and code, in source order
    source: str


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function in `tree`."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if not isinstance(child, ast.ClassDef):
                yield child.lineno, child.end_lineno or child.lineno, prefix + child.name
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def mutants(source: str) -> list[Mutant]:
    """Every mutant of `source` that differs from it, in a fixed order."""
    tree = ast.parse(source)
    original = ast.unparse(tree)
    lines = source.splitlines()
    spans = list(_functions(tree))
    found = []
    seen: dict[tuple[str, str, str], int] = {}
    for line, description, apply in list(_sites(tree)):
        undo = apply()
        mutated = ast.unparse(tree)
        undo()
        if mutated != original:
            inner = [(first, name) for first, last, name in spans if first <= line <= last]
            name = (max(inner)[1] if inner else "<module>", description, lines[line - 1].strip())
            seen[name] = seen.get(name, 0) + 1
            found.append(Mutant(line, *name, seen[name], mutated))
    return found


def _package_folders() -> dict[str, str]:
    """pyproject's `package-dir` inverted: top-level folder -> the package it is installed as."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {folder: package for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items()}


def module_name(path: Path) -> str:
    """The dotted name `path` is imported as (core/team.py -> harness.core.team)."""
    relative = path.resolve().relative_to(ROOT)
    return ".".join([_package_folders()[relative.parts[0]], *relative.parts[1:-1], relative.stem])


def core_tests(module: str) -> list[str]:
    """CORE_TESTS' entry for `module` (core/x.py) and the tests named after it that exist."""
    stem = Path(module).stem
    named = [f"test_mutants_{stem}.py", f"test_{stem}_fire.py"]
    tests = [*CORE_TESTS[module], *(test for test in named if (ROOT / "tests" / test).is_file())]
    return [f"tests/{test}" for test in dict.fromkeys(tests)]


def equivalents() -> dict[tuple[str, str, str, str, int], str]:
    """mutants_equivalent.toml: (module, function, mutant description, line as written, occurrence) -> why
    no test can tell that one mutant apart. The line keeps an entry from excusing a sibling alike in name
    ("return value -> None" of another `return` of the function) that a test may well tell apart; the
    occurrence (default 1) does the same on one line (`init=False, repr=False`: two "False -> True")."""
    entries = tomllib.loads(EQUIVALENT_FILE.read_text(encoding="utf-8")).get("equivalent", [])
    return {
        (e["module"], e["function"], e["mutant"], e["code"], e.get("occurrence", 1)): e["reason"]
        for e in entries
    }


# --- running tests: a forked child of this process per run -----------------------------------------------


class Run(NamedTuple):
    module: str  # core/x.py
    mutant: Mutant | None  # None: the unmutated module (the baseline)
    tests: list[str]
    timeout: float


class Result(NamedTuple):
    outcome: str  # passed, failed or timeout
    seconds: float
    output: str


def _child(run: Run, scratch: Path, log: Path) -> NoReturn:
    """In the forked child: pytest against the mutant, loaded in place of the module (never returns)."""
    code = 3
    try:
        os.setpgid(0, 0)  # its own group, so a timeout kills whatever the tests started too
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        path = ROOT / run.module
        source = path.read_text(encoding="utf-8") if run.mutant is None else run.mutant.source
        target = scratch / f"{os.getpid()}.py"
        target.write_text(source, encoding="utf-8")
        os.environ[TARGET_ENV] = f"{module_name(path)}={target}"
        sys.path.insert(0, str(ROOT / "scripts"))
        os.chdir(ROOT)
        import pytest

        code = int(pytest.main([*PYTEST_ARGS, *PRELOAD_ARGS, *run.tests]))
    except BaseException:  # a broken mutant may raise anything; the log says what, and the child must exit
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_all(runs: list[Run], jobs: int, done: Callable[[Run, Result], None]) -> None:
    """Run `runs`, `jobs` at a time, each in a forked child of this process, which has the test tools
    imported already (a fresh interpreter spends seconds importing pytest, Hypothesis and trio; a fork,
    milliseconds); call `done` as each ends. A child past its timeout is killed with its process group."""
    for name in PRELOAD:
        importlib.import_module(name)
    if any(name == "harness" or name.startswith("harness.") for name in sys.modules):
        raise RuntimeError("a preloaded module imported harness: the mutant could not replace it")
    pending = list(reversed(runs))
    running: dict[int, tuple[Run, float, Path]] = {}
    with tempfile.TemporaryDirectory(prefix="mutants-") as scratch:
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    run, log = pending.pop(), Path(scratch) / f"{len(pending)}.log"
                    pid = os.fork()
                    if pid == 0:
                        _child(run, Path(scratch), log)
                    with contextlib.suppress(OSError):  # the child does it too; whichever runs first
                        os.setpgid(pid, pid)
                    running[pid] = (run, time.monotonic(), log)
                pid, status = os.waitpid(-1, os.WNOHANG)
                now = time.monotonic()
                if pid == 0:
                    overdue = [p for p, (run, started, _) in running.items() if now - started > run.timeout]
                    for late in overdue:
                        _kill(late)
                        run, started, log = running.pop(late)
                        done(run, Result("timeout", now - started, ""))
                    time.sleep(0.02)
                    continue
                run, started, log = running.pop(pid)
                outcome = "passed" if os.waitstatus_to_exitcode(status) == 0 else "failed"
                output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
                done(run, Result(outcome, now - started, output))
        finally:  # interrupted: no child outlives the run
            for pid in running:
                _kill(pid)


def _kill(pid: int) -> None:
    """Kill a running child and its process group, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


# --- the report ---------------------------------------------------------------------------------------------


class Tally:
    """One module's mutants and what became of them."""

    def __init__(self, module: str, found: int) -> None:
        self.module, self.found = module, found
        self.tried = self.killed = self.timeouts = 0
        self.equivalent: list[tuple[Mutant, str]] = []
        self.survivors: list[Mutant] = []

    def count(self, mutant: Mutant, result: Result) -> None:
        self.tried += 1
        if result.outcome == "passed":
            self.survivors.append(mutant)
        else:
            self.killed += 1
            self.timeouts += result.outcome == "timeout"

    def row(self) -> list[str]:
        score = 100 * self.killed / self.tried if self.tried else 100.0
        numbers = [self.found, self.tried + len(self.equivalent), self.killed, self.timeouts]
        numbers += [len(self.equivalent), len(self.survivors)]
        return [self.module, *map(str, numbers), f"{score:.1f}"]


def report(tallies: list[Tally], unrun: dict[str, str], seconds: float) -> float:
    """Print the table, the survivors and the equivalents; return the total score."""
    total = Tally("total", sum(t.found for t in tallies))
    for tally in tallies:
        total.tried, total.killed = total.tried + tally.tried, total.killed + tally.killed
        total.timeouts += tally.timeouts
        total.equivalent += tally.equivalent
        total.survivors += tally.survivors
    header = ["module", "found", "tried", "killed", "timeout", "equiv", "survived", "score %"]
    rows = [header, *(t.row() for t in tallies), total.row()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print(f"\nmutation score ({seconds / 60:.1f} min; killed counts timeouts, equivalents are not scored)")
    for first, *numbers in rows:
        cells = (cell.rjust(width) for cell, width in zip(numbers, widths[1:], strict=True))
        print("  ".join([first.ljust(widths[0]), *cells]))
    for module, why in unrun.items():
        print(f"not run: {module}: {why}")
    print(f"\nsurvivors ({len(total.survivors)}):")
    for tally in tallies:
        for m in tally.survivors:
            print(f"  {tally.module}:{m.line} {m.function}: {m.description}")
    if total.equivalent:
        print(f"\nequivalent, excluded ({len(total.equivalent)}, {EQUIVALENT_FILE.name}):")
        for tally in tallies:
            for m, reason in tally.equivalent:
                print(f"  {tally.module}:{m.line} {m.function}: {m.description} -- {reason}")
    return 100 * total.killed / total.tried if total.tried else 100.0


def mutate(plan: dict[str, list[str]], sample: int | None, seed: int, jobs: int) -> float:
    """Mutate each module of `plan` (core/x.py -> its tests) and print the report; return the score."""
    started = time.monotonic()
    known = equivalents()
    baselines: dict[str, Result] = {}
    run_all([Run(m, None, tests, BASELINE_TIMEOUT) for m, tests in plan.items()], jobs,
            lambda run, result: baselines.__setitem__(run.module, result))  # fmt: skip
    unrun = {m: f"the tests do not pass unmutated ({r.outcome}):\n{r.output[-2000:]}"
             for m, r in baselines.items() if r.outcome != "passed"}  # fmt: skip
    tallies, runs = {}, []
    for module, tests in plan.items():
        if module in unrun:
            continue
        found = mutants((ROOT / module).read_text(encoding="utf-8"))
        tallies[module] = tally = Tally(module, len(found))
        if sample is not None and sample < len(found):
            found = [found[i] for i in sorted(random.Random(seed).sample(range(len(found)), sample))]
        timeout = max(MIN_TIMEOUT, TIMEOUT_FACTOR * baselines[module].seconds)
        for mutant in found:
            reason = known.get((module, mutant.function, mutant.description, mutant.code, mutant.occurrence))
            if reason is None:
                runs.append(Run(module, mutant, tests, timeout))
            else:
                tally.equivalent.append((mutant, reason))
        print(
            f"{module}: {len(found)} of {tally.found} mutants, tests "
            f"{baselines[module].seconds:.1f} s unmutated, timeout {timeout:.0f} s",
            file=sys.stderr,
        )
    left = Counter(run.module for run in runs)

    def done(run: Run, result: Result) -> None:
        assert run.mutant is not None
        tallies[run.module].count(run.mutant, result)
        left[run.module] -= 1
        if not left[run.module]:
            print(f"{run.module}: done ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    run_all(runs, jobs, done)
    return report(list(tallies.values()), unrun, time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description="Mutation testing of package modules against given tests.")
    parser.add_argument("paths", nargs="*", help="modules to mutate (core/x.py ...) and pytest arguments")
    parser.add_argument("--core", action="store_true", help="every module of core/ against CORE_TESTS")
    parser.add_argument("--only", action="append", default=[], help="with --core: just this module")
    parser.add_argument("--sample", type=int, help=f"mutants per module (default: {CORE_SAMPLE} with --core, "
                        "else all)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--min-score", type=float, help="exit 1 if the total score is below this")
    options, pytest_options = parser.parse_known_args()  # e.g. `--deselect=tests/x.py::test_y` for pytest
    if (options.sample or 0) < 0 or options.jobs < 1:
        parser.error("--sample must be at least 0 and --jobs at least 1")
    if options.core:
        chosen = options.only or sorted(CORE_TESTS)
        if unknown := [m for m in chosen if m not in CORE_TESTS]:
            parser.error(f"not in CORE_TESTS: {' '.join(unknown)}")
        plan = {m: [*core_tests(m), *pytest_options] for m in chosen}
        in_core = {f"core/{path.name}" for path in (ROOT / "core").glob("*.py") if path.name != "__init__.py"}
        if not options.only and (missing := sorted(in_core - set(CORE_TESTS))):
            print(f"not in CORE_TESTS, so not mutated: {' '.join(missing)}", flush=True)
        sample = CORE_SAMPLE if options.sample is None else options.sample
    else:
        folders = _package_folders()
        modules = [p for p in options.paths if p.endswith(".py") and Path(p).parts[0] in folders]
        tests = [*(p for p in options.paths if p not in modules), *pytest_options]
        if not modules or not tests:
            parser.error("give --core, or at least one module of a package folder and at least one test")
        plan, sample = {m: tests for m in modules}, options.sample
    score = mutate(plan, sample, options.seed, options.jobs)
    sys.exit(1 if options.min_score is not None and score < options.min_score else 0)


# --- the pytest plugin half (`-p mutate_core`, loaded in the test process) -------------------------------


def pytest_load_initial_conftests() -> None:
    """Before any conftest or test imports it, put the mutated source in place of the target module."""
    target = os.environ.get(TARGET_ENV)
    if not target:
        return
    module, source = target.split("=", 1)
    if module in sys.modules:
        raise RuntimeError(f"{module} was imported before the mutant could replace it")
    parent, _, name = module.rpartition(".")
    __import__(parent)
    spec = importlib.util.spec_from_file_location(module, source)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    setattr(sys.modules[parent], name, loaded)
    from hypothesis import settings

    settings.register_profile("mutants", database=None)
    settings.load_profile("mutants")


if __name__ == "__main__":
    main()
