# Mutation testing: do the tests notice when the code is wrong? Line coverage says a line ran; a surviving
# mutant says no test would fail if that line were wrong. This makes small AST mutants of a module (a
# comparison flipped, `and`/`or` swapped, a `not` dropped, `+`/`-` swapped, a constant changed, a statement
# deleted, a return made `return None`; strings with a space, and every literal part of an f-string that has
# one, are messages and stay), one mutant at a time, and runs the given tests against each:
#
#   .venv/bin/python scripts/mutate_core.py core/team.py tests/test_team_examples.py [more modules/tests]
#       [--sample N] [--seed S]
#
# Arguments that are files of a package folder (core/, io/, cli/, models/: pyproject's `package-dir`) are
# mutated; every other argument (options too, as `--deselect=tests/x.py::test_y`) goes to pytest, which
# runs `-x -q -p no:cacheprovider --hypothesis-seed=0` with no Hypothesis example database, so a run is
# reproducible. `--sample N` tries N mutants per module, drawn with `--seed`. It prints killed/survived per
# module and each survivor's line and description.
# Nothing in the checkout is modified: the test process loads the mutated source in place of the module
# (this file is also that pytest plugin, `-p mutate_core`), so the tests' own imports get the mutant.
# Mutants run sequentially; a mutant that hangs is stopped and counted killed (timeout).
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_ENV = "MUTATE_CORE_TARGET"  # "dotted.module=/path/to/mutated_source.py", read by the plugin half
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-p", "mutate_core")

Site = tuple[int, str, Callable[[], None]]  # (line, description, apply it to the tree it was found in)

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


def _setter(obj: object, field: str | int, value: object) -> Callable[[], None]:
    """Set `obj.field` (or `obj[field]` of a list of nodes) to `value`, when applied."""

    def apply() -> None:
        if isinstance(obj, list) and isinstance(field, int):
            obj[field] = value
        else:
            setattr(obj, str(field), value)

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


def mutants(source: str) -> list[tuple[int, str, str]]:
    """(line, description, mutated source) of every mutant of `source` that differs from it."""
    original = ast.unparse(ast.parse(source))
    found = []
    for index in range(sum(1 for _ in _sites(ast.parse(source)))):
        tree = ast.parse(source)  # a fresh tree per mutant: applying a site changes the tree in place
        line, description, apply = list(_sites(tree))[index]
        apply()
        mutated = ast.unparse(tree)
        if mutated != original:
            found.append((line, description, mutated))
    return found


def _package_folders() -> dict[str, str]:
    """pyproject's `package-dir` inverted: top-level folder -> the package it is installed as."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {folder: package for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items()}


def module_name(path: Path) -> str:
    """The dotted name `path` is imported as (core/team.py -> harness.core.team)."""
    relative = path.resolve().relative_to(ROOT)
    return ".".join([_package_folders()[relative.parts[0]], *relative.parts[1:-1], relative.stem])


def _run_tests(module: str, source: str, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """('passed', 'failed' or 'timeout', seconds taken, pytest's output) for the tests against `source`
    loaded as `module`."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as scratch:
        mutant = Path(scratch) / "mutant.py"
        mutant.write_text(source, encoding="utf-8")
        path = [str(ROOT / "scripts"), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, TARGET_ENV: f"{module}={mutant}", "PYTHONPATH": os.pathsep.join(path)}
        command = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return "timeout", timeout, ""
        result = "passed" if done.returncode == 0 else "failed"
        return result, time.monotonic() - started, done.stdout.decode(errors="replace")


def mutate(path: Path, tests: list[str], sample: int | None, seed: int) -> tuple[int, int]:
    """Run every mutant of `path` (or a sample); print the survivors; return (killed, tried)."""
    module, source = module_name(path), path.read_text(encoding="utf-8")
    baseline, took, output = _run_tests(module, source, tests, timeout=3600)
    if baseline != "passed":
        raise SystemExit(f"{output}\n{path}: the tests do not pass on the unmutated module ({baseline})")
    found = mutants(source)
    if sample is not None and sample < len(found):
        found = [found[i] for i in sorted(random.Random(seed).sample(range(len(found)), sample))]
    killed = 0
    for line, description, mutated in found:
        if _run_tests(module, mutated, tests, timeout=max(60.0, 10 * took))[0] == "passed":
            print(f"  survived {path}:{line}: {description}", flush=True)
        else:
            killed += 1
    score = 100 * killed / len(found) if found else 100.0
    print(f"{path}: {killed}/{len(found)} mutants killed ({score:.1f} %), {len(found) - killed} survived")
    return killed, len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description="Mutation testing of package modules against given tests.")
    parser.add_argument("paths", nargs="+", help="modules to mutate (core/x.py ...) and pytest arguments")
    parser.add_argument("--sample", type=int, help="mutants to try per module (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    options, pytest_options = parser.parse_known_args()  # e.g. `--deselect=tests/x.py::test_y` for pytest
    folders = _package_folders()
    modules = [Path(p) for p in options.paths if p.endswith(".py") and Path(p).parts[0] in folders]
    tests = [*(p for p in options.paths if Path(p) not in modules), *pytest_options]
    if not modules or not tests:
        parser.error("give at least one module of a package folder and at least one test")
    totals = [mutate(module, tests, options.sample, options.seed) for module in modules]
    killed, tried = sum(k for k, _ in totals), sum(t for _, t in totals)
    if len(modules) > 1:
        print(f"total: {killed}/{tried} mutants killed ({100 * killed / max(tried, 1):.1f} %)")


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
