# `harness eval run FAMILY... --runs N --engines E,... --out DIR` and `harness eval report DIR`: the
# benchmark loop of io.eval_runner and the figures of core.eval_stats. `run` is a measurement, so it exits 0
# whatever the pass rate; bad input is one line (one JSON document with --json) with status 2, an I/O
# failure status 1.
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from harness.cli import output

eval_app = typer.Typer(no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
KOpt = Annotated[
    list[int] | None,
    typer.Option("--k", help="Show pass@k for this k (repeatable; default 1, 5, 10 where they fit, and n)."),
]


def _fail(json_out: bool, status: int, code: str, detail: str) -> NoReturn:
    output.emit_error(json_out, code, detail)
    raise SystemExit(status)


@eval_app.command("run")
def run_command(
    families: Annotated[
        list[Path], typer.Argument(metavar="FAMILY_DIR...", help="Task families: brief.md, setup, judge.")
    ],
    *,
    engines: Annotated[
        str,
        typer.Option(
            "--engines", help="Comma-separated: claude, codex, gemini (NAME=BIN for a binary), script:PATH."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="New directory for the run records and traces.")],
    runs: Annotated[int, typer.Option("--runs", help="Runs per family and engine.")] = 5,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds an engine run may take.")] = 1800.0,
    offline: Annotated[
        bool, typer.Option("--offline", help="Run the engine inside `unshare -n` (loopback only).")
    ] = False,
    model_server: Annotated[
        str | None,
        typer.Option(
            "--model-server",
            help="With --offline: a shell command started in the namespace before each engine run (a"
            " scripted model; $HARNESS_EVAL_FAMILY names the family), waited for on --model-port.",
        ),
    ] = None,
    model_port: Annotated[int, typer.Option("--model-port", help="Loopback port of --model-server.")] = 8765,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="session (default): each run a `run` session of the eval's own daemon, the engine in tmux;"
            " process: the engine as one non-interactive process (`claude -p`, `codex exec`, a script).",
        ),
    ] = "session",
    k: KOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run each task family N times per engine, each run in a fresh working copy (setup, engine, judge), by
    default the engine step a coordination session of its own; keep every run's record and traces under
    --out, then print the report."""
    from harness.io import eval_runner
    from harness.io.redaction_env import from_environment

    specs = [spec.strip() for spec in engines.split(",") if spec.strip()]
    try:
        plan = eval_runner.make_plan(
            families,
            specs,
            runs=runs,
            out=out,
            engine_timeout=timeout,
            offline=offline,
            model_server=model_server,
            model_port=model_port,
            mode=mode,
        )
        redactor = from_environment()

        def progress(record: dict[str, object]) -> None:
            if not json_out:
                line = f"{record['family']} {record['engine']} run {record['run']}: {record['status']}"
                output.say(f"{line} ({record['reason']}, {record['seconds']} s)")
                sys.stdout.flush()

        eval_runner.run_eval(plan, redactor, progress)
        result = eval_runner.report(plan.out, k)
    except eval_runner.EvalError as error:
        _fail(json_out, output.USAGE, "bad_request", str(error))
    except OSError as error:
        _fail(json_out, output.PROTOCOL_ERROR, "io_error", f"{error.strerror or error}: {error.filename}")
    _show(result, json_out)


@eval_app.command("report")
def report_command(
    out: Annotated[Path, typer.Argument(metavar="DIR", help="The --out directory of `harness eval run`.")],
    k: KOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per family and engine: pass@1 and pass@k (unbiased estimator, exact), the 95 % Wilson interval of
    pass@1, mean time and turns, and the traces of the failing runs."""
    from harness.io import eval_runner

    try:
        result = eval_runner.report(out, k)
    except eval_runner.EvalError as error:
        _fail(json_out, output.USAGE, "bad_request", str(error))
    except OSError as error:
        _fail(json_out, output.PROTOCOL_ERROR, "io_error", f"{error.strerror or error}: {error.filename}")
    _show(result, json_out)


def _show(result: dict[str, object], json_out: bool) -> None:
    if json_out:
        output.emit_json(result)
        return
    groups = result["groups"]
    assert isinstance(groups, list)
    for row in groups:
        figures = ", ".join(
            f"pass@{k} {value['value']:.3f}" for k, value in dict(row.get("passAtK") or {}).items()
        )
        low, high = row.get("pass1Interval") or (0.0, 0.0)
        line = (
            f"{row['family']} / {row['engine']}: {row['passed']}/{row['n']} passed"
            f" ({row['errors']} errors); {figures or 'no judged runs'};"
            f" pass@1 95% CI [{low:.3f}, {high:.3f}];"
            f" mean {row.get('meanSeconds')} s, {row.get('meanTurns')} turns"
        )
        output.say(line)
        for trace in row["failingTraces"]:
            output.say(f"  failing run trace: {trace}")
