# `harness eval` over input it does not control (review 18, F1, F4, F9): an OUT directory may come from
# elsewhere (a FIFO run record hung `eval report`, a sparse 3 GiB one cost its size in memory), an engine
# prints what it likes (`{"turns": 9...9}` ended `eval run` and every later report with an OverflowError), a
# record may be edited (seconds 1e308), and `--timeout nan` meant no timeout at all. Commands that could hang
# run as subprocesses with a generous bound and an address-space limit, so a regression fails, not hangs.
from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

from harness.cli.main import run
from harness.io import eval_runner
from tests.test_cli_e2e import HARNESS
from tests.test_eval_run import CAREFUL, FAMILIES, script

ADDRESS_SPACE = 1 << 30
# The most turns and seconds a run record may hold (io/eval_runner.py MAX_TURNS, MAX_SECONDS).
MAX_TURNS = 10**6
MAX_SECONDS = 10**9


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def harness(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "HARNESS_HOME": str(tmp_path / "home")},
        preexec_fn=_limited,
    )


def _record(**fields: object) -> bytes:
    record = {
        "family": "fam", "engine": "script:e", "run": 0, "status": "passed", "reason": "judge exit 0",
        "seconds": 1.5, "turns": 3, "setupExit": 0, "engineExit": 0, "judgeExit": 0, "trace": "t",
    }  # fmt: skip
    return json.dumps({**record, **fields}).encode()


def _runs(tmp_path: Path) -> Path:
    runs = tmp_path / "out" / "runs" / "fam" / "script-e"
    runs.mkdir(parents=True)
    return runs


def test_a_fifo_run_record_is_refused_naming_it_never_a_hang(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    (runs / "0.json").write_bytes(_record())
    os.mkfifo(runs / "1.json")
    done = harness(tmp_path, "eval", "report", str(tmp_path / "out"), "--json")
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)
    assert error["error"] == "bad_request" and str(runs / "1.json") in error["detail"], error
    assert "a FIFO where a regular file belongs" in error["detail"]


def test_a_sparse_run_record_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    with (runs / "0.json").open("wb") as file:
        file.truncate(3 << 30)
    done = harness(tmp_path, "eval", "report", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("harness: bad_request:") and done.stderr.count("\n") == 1
    assert str(runs / "0.json") in done.stderr
    assert f"larger than the {eval_runner.MAX_RECORD_BYTES} bytes" in done.stderr


def test_a_symlinked_run_record_is_not_followed(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    (tmp_path / "elsewhere.json").write_bytes(_record())
    (runs / "0.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(eval_runner.EvalError, match="a symbolic link"):
        eval_runner.report(tmp_path / "out")


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ('{"turns": ' + "9" * 4000 + "}", None),
        ('{"num_turns": -1}', None),
        (f'{{"turns": {MAX_TURNS + 1}}}', None),
        (f'{{"turns": {MAX_TURNS}}}', MAX_TURNS),
        ('{"turns": 0}', 0),
        ('{"turns": true}\n', None),
        ('{"turns": 4}\n{"turns": ' + "9" * 4000 + "}\n", None),  # the last word is the engine's, unknown
    ],
)
def test_turns_outside_any_run_are_unknown(stdout: str, expected: int | None) -> None:
    assert eval_runner.turns(stdout) == expected


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"seconds": 1e308}, "seconds are not within"),
        ({"seconds": -1}, "seconds are not within"),
        ({"seconds": "1"}, "seconds are not a number"),
        ({"seconds": True}, "seconds are not a number"),
        ({"turns": 10**400}, "turns are not within"),
        ({"turns": -3}, "turns are not within"),
        ({"turns": 2.5}, "turns are not a whole number"),
        ({"turns": False}, "turns are not a whole number"),
    ],
)
def test_a_record_whose_figures_no_run_has_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, object], why: str
) -> None:
    """Two records of seconds 1e308 (or one of turns 10**400) made the mean overflow: `internal:
    OverflowError` for every report of that OUT. Now the record is refused, by name, as not a run record."""
    runs = _runs(tmp_path)
    (runs / "0.json").write_bytes(_record(**fields))
    (runs / "1.json").write_bytes(_record(**fields))
    assert run(["eval", "report", str(tmp_path / "out"), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "bad_request"
    assert str(runs / "0.json") in error["detail"] and why in error["detail"], error


def test_records_within_range_still_report(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    (runs / "0.json").write_bytes(_record(seconds=MAX_SECONDS, turns=MAX_TURNS))
    (runs / "1.json").write_bytes(_record(seconds=0, turns=None, status="failed"))
    (runs / "2.json").write_bytes(_record(seconds=0.0, turns=None, status="error"))
    groups = eval_runner.report(tmp_path / "out")["groups"]
    assert isinstance(groups, list)
    (row,) = groups
    assert row["n"] == 2 and row["errors"] == 1
    assert row["meanSeconds"] == MAX_SECONDS / 2 and row["meanTurns"] == MAX_TURNS


def test_an_engine_reporting_absurd_turns_leaves_them_unknown_and_the_eval_ends_with_its_report(
    tmp_path: Path,
) -> None:
    engine = script(tmp_path / "boast.sh", "echo working\necho '{\"turns\": " + "9" * 4000 + "}'\n")
    out = tmp_path / "eval"
    done = harness(
        tmp_path, "eval", "run", str(FAMILIES / "fix-typo"), "--runs", "2", "--engines", engine,
        "--out", str(out), "--mode", "process", "--json", timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = json.loads(done.stdout)["groups"]
    assert row["n"] == 2 and row["meanTurns"] is None
    record = json.loads((out / "runs" / "fix-typo" / "script-boast" / "0.json").read_text())
    assert record["turns"] is None
    again = harness(tmp_path, "eval", "report", str(out), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["groups"][0]["meanTurns"] is None


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "0", "-1"])
def test_a_timeout_that_is_no_positive_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    """`--timeout nan` passed `<= 0` (NaN compares false) and the engine ran with no timeout at all."""
    out = tmp_path / "eval"
    argv = ["eval", "run", str(FAMILIES / "fix-typo"), "--engines", CAREFUL, "--out", str(out)]
    assert run([*argv, "--mode", "process", "--timeout", timeout, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "bad_request" and "--timeout" in error["detail"]
    assert not out.exists()
