# Issue 17, "a newcomer's first hour", on the command line: a first team in one try (`team init`), readable
# output that fits 80 columns with names and short ids that are taken back as input, and commands that start
# without importing what they do not need (counted in modules, never timed).
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from harness.cli import output
from harness.cli.app import app, team_app
from harness.cli.commands import SPECS
from harness.cli.fast import TEAM_OTHERS, TOP
from harness.io import session_files, trace_files
from tests.test_cli_e2e import HARNESS, Daemon

HEAVY = (
    "typer",
    "trio",
    "trio_websocket",
    "hypothesis",
    "textual",
    "nacl",
)  # packages; and harness.io.daemon


def run(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    env.update(HARNESS_HOME=str(home), COLUMNS="80")
    return subprocess.run(
        [*HARNESS, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def imported(home: Path, *args: str, status: int | None = None) -> set[str]:
    """The modules a new `harness ARGS` process imports (from `python -X importtime`); with `status`, the
    process must have ended with it (so the modules are those of the whole command, not of a part)."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    env.update(HARNESS_HOME=str(home), COLUMNS="80")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status is None or done.returncode == status, done.stderr[-2000:]
    lines = [line.split("|")[-1] for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.strip() for line in lines}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "home")
    running.start()
    yield running
    running.terminate()


def _team(daemon: Daemon, workdir: Path) -> dict[str, Any]:
    """A team made the way a newcomer is told to: `init` then `create`, each once."""
    workdir.mkdir()
    args = ("team", "init", "--name", "first", "--member", "alice=a1", "--member", "bob=b1")
    out = ok(run(daemon.home, *args, "--role", "bob=reviewer", cwd=workdir))
    assert "next: harness team create --file team.json" in out
    ok(run(daemon.home, "team", "create", "--file", "team.json", cwd=workdir))
    team: dict[str, Any] = json.loads((workdir / "team.json").read_text())
    return team


def test_a_first_team_in_one_try(daemon: Daemon, tmp_path: Path) -> None:
    """Issue 17: "creating a first team took two tries"; `init` writes a valid file for this machine."""
    team = _team(daemon, tmp_path / "w")
    machine = json.loads(ok(run(daemon.home, "daemon", "status", "--json")))["machineId"]
    assert [(m["machineId"], m["agentId"], m["name"], m["role"]) for m in team["members"]] == [
        (machine, "a1", "alice", ""),
        (machine, "b1", "bob", "reviewer"),
    ]
    members = json.loads(ok(run(daemon.home, "team", "--team", team["id"], "members", "--json")))["members"]
    assert [m["name"] for m in members] == ["alice", "bob"]
    # never overwritten; a name without an id must be a registered agent; nothing registered is explained
    again = run(daemon.home, "team", "init", "--member", "carol=c1", cwd=tmp_path / "w")
    assert again.returncode == 2 and "team.json exists" in again.stderr
    alone = run(daemon.home, "team", "init", "--member", "carol", "--out", "-")
    assert alone.returncode == 2 and "--member carol=AGENT_ID" in alone.stderr
    empty = run(daemon.home, "team", "init", "--out", "-")
    assert empty.returncode == 2 and "no agent is registered" in empty.stderr


def test_help_explains_agent_id_and_fits_80_columns(tmp_path: Path) -> None:
    for command in ("init", "create", "add"):
        text = ok(run(tmp_path, "team", command, "--help"))
        assert "agentId names an agent" in text and "wait `offline`" in text.replace("\n  ", " "), command
    for args in (["--help"], [], ["team", "--help"], *(["team", name, "--help"] for name in SPECS)):
        text = ok(run(tmp_path, *args))
        assert max(len(line) for line in text.splitlines()) <= 80, args


def test_the_help_tables_are_the_typer_commands() -> None:
    click_app = typer.main.get_group(app)
    assert set(click_app.commands) == set(TOP)
    assert set(typer.main.get_group(team_app).commands) == set(SPECS) | set(TEAM_OTHERS)


def test_readable_output_fits_80_columns_with_names_and_prefixes_taken_back(
    daemon: Daemon, tmp_path: Path
) -> None:
    team = _team(daemon, tmp_path / "w")
    home, at = daemon.home, ("team", "--team", team["id"][:5])  # the team id by a prefix too
    long_text = "a question long enough to need cutting at eighty columns " * 3
    for text in (long_text, "second"):
        ok(run(home, *at, "ask", "bob", text, "--from", "alice"))
    exchanges = json.loads(ok(run(home, *at, "status", "--json")))["exchanges"]
    ids = [e["id"] for e in exchanges]
    table = ok(run(home, *at, "get"))
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 80
    for question in ids:  # each id whole on one line, by its 8-character prefix; never broken
        assert question not in table and any(line.startswith(question[:8] + " ") for line in lines)
    assert any(" alice " in line and " bob " in line for line in lines if line.startswith(ids[0][:8]))
    wide = ok(run(home, *at, "status", "--wide"))
    assert all(question in wide for question in ids) and long_text.strip() in wide
    # a prefix names the question for status, reply and cancel; too short a prefix is refused with the ids
    shown = ok(run(home, *at, "status", ids[0][:6]))
    assert shown.startswith(f"Question {ids[0]}") and "alice -> bob" in shown
    ok(run(home, *at, "reply", ids[0][:6], "done", "--member", "bob"))
    ok(run(home, *at, "cancel", ids[1][:7]))
    states = {e["id"]: e["state"] for e in json.loads(ok(run(home, *at, "status", "--json")))["exchanges"]}
    assert states == {ids[0]: "answered", ids[1]: "cancelled"}
    for operation in ("abcdef01", "abcdef02"):
        ok(run(home, *at, "ask", "bob", "again", "--from", "alice", "--id", operation))
    refused = run(home, *at, "status", "abcdef")
    assert refused.returncode == 2 and "abcdef01" in refused.stderr and "abcdef02" in refused.stderr
    assert "abcdef02" in ok(run(home, *at, "status", "abcdef02"))  # a whole id that is a prefix of none


def test_short_ids_are_unique_prefixes() -> None:
    ids = ["abcdef0123", "abcdef0199", "ffff0000aa", "abc"]
    assert output.short_ids(ids) == {
        "abcdef0123": "abcdef012",
        "abcdef0199": "abcdef019",
        "ffff0000aa": "ffff0000",
        "abc": "abc",
    }
    assert output.short_ids(ids, wide=True)["abcdef0123"] == "abcdef0123"
    assert output._fit([3, 50, 40], 60) == [3, 29, 28]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["team", "--help"],
        ["team", "ask", "--help"],
        ["daemon", "status"],
        ["agent", "list"],
        ["team", "--team", "t", "members"],
        ["team", "--team", "t", "ask", "bob", "hi", "--json"],
        ["team", "--team", "t", "--machine", "m", "members"],  # issue 18: --machine as cheap as local
    ],
)
def test_common_commands_import_only_what_they_need(tmp_path: Path, args: list[str]) -> None:
    """Issue 17: `daemon status` and `--help` took 2.7-4.4 s, as the Typer path imports everything."""
    modules = imported(tmp_path / "no-daemon", *args)
    assert "harness.cli.fast" in modules  # the measurement saw the command's imports
    assert not {m for m in modules if m.split(".")[0] in HEAVY}, args
    assert not [m for m in modules if m.startswith(("harness.io.daemon", "harness.models"))], args


def test_typer_commands_still_import_typer(tmp_path: Path) -> None:
    """The counting above can fail: a command the fast path leaves to Typer (a usage error) imports it."""
    assert "typer" in imported(tmp_path, "daemon", "status", "--nope")


READ_COMMANDS = [
    (["doctor"], "harness.io.doctor"),
    (["trace", "summary", "--team", "t1"], "harness.io.trace_files"),
    (["trace", "summary", "TRACE_FILE"], "harness.io.trace_files"),
    (["session", "status"], "harness.io.session_files"),
]


@pytest.mark.parametrize(("args", "reader"), READ_COMMANDS)
def test_read_commands_start_without_trio(tmp_path: Path, args: list[str], reader: str) -> None:
    """Issue 17 asks for 0.25 s cold, and trio alone took 100-240 ms of it: a command that only reads the data
    directory (stores, a trace, session status files) must not import the async stack that writes them."""
    home = tmp_path / "home"
    lines = b"".join(trace_files.encode_line("ledger", n, {"type": "tick", "at": n}) for n in (1, 2))
    team_trace = trace_files.team_trace_dir(home, "t1")
    team_trace.mkdir(parents=True)
    (team_trace / trace_files.file_name(1)).write_bytes(lines)
    (tmp_path / "trace.ndjson").write_bytes(lines)
    session = session_files.session_dir(home, "s1")
    session.mkdir(parents=True)
    texts = {"sessionId": "s1", "mode": "discuss", "lead": "alice", "state": "ended", "trace": "t"}
    status = {**texts, "asks": [], "reminders": [], "violations": []}
    (session / session_files.STATUS_FILE).write_text(json.dumps(status))
    argv = [str(tmp_path / "trace.ndjson") if arg == "TRACE_FILE" else arg for arg in args]
    modules = imported(home, *argv, status=0)
    assert reader in modules  # the measurement saw the command read
    assert "trio" not in {m.split(".")[0] for m in modules}, args


@pytest.mark.parametrize("team", ["", "..", "../../etc", "a/b"])
def test_doctor_refuses_a_team_that_is_not_a_team_id(tmp_path: Path, team: str) -> None:
    """Found by the 2,000-example fuzz: `doctor --team ''` inspected the ledgers directory itself as a store
    and reported it damaged; a path in --team named a directory outside the data directory to read."""
    done = run(tmp_path / "home", "doctor", "--team", team)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith("harness: bad_request: --team") and done.stderr.count("\n") == 1, done
    shown = json.loads(run(tmp_path / "home", "doctor", "--team", team, "--json").stdout)
    assert shown["error"] == "bad_request"


def test_doctor_of_a_team_this_data_directory_lacks_is_not_found(tmp_path: Path) -> None:
    """Found by the fuzz: `doctor --team ID` of an absent team printed a whole report of one damaged store."""
    done = run(tmp_path / "home", "doctor", "--team", "t-absent")
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("harness: not_found: no team 't-absent'") and done.stderr.count("\n") == 1


def test_doctor_shows_a_data_directorys_and_a_stores_names_terminal_safe(tmp_path: Path) -> None:
    """Found by an adversarial review: `doctor` printed the data directory (an argument, HARNESS_HOME) and
    the name of a directory under teams/ledgers with their bytes: OSC 0 set the terminal's title, OSC 52
    wrote its clipboard, CSI coloured the rest. Every line is now shown as `daemon status` shows its path."""
    home = tmp_path / "home\x1b]0;TITLE\x07"
    ledgers = home / "teams" / "ledgers"
    ledgers.mkdir(parents=True)
    home.chmod(0o700)
    (ledgers / "x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[31m").mkdir(mode=0o700)
    done = run(home, "doctor")
    assert done.returncode in (0, 1) and done.stderr == "", done
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout, done.stdout
    assert "x\u241b]52;c;" in done.stdout and "home\u241b]0;" in done.stdout, done.stdout  # shown, not obeyed


def test_a_remote_watch_from_a_data_directory_that_is_a_file_is_unreachable(tmp_path: Path) -> None:
    """Found by the fuzz at 2,000 examples per command: `team watch --machine M --home FILE` read the owner
    token under the file and ended in the last-resort `internal` handler (NotADirectoryError)."""
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    done = run(a_file, "team", "--team", "t1", "--home", str(a_file), "--machine", "m", "watch", "--json")
    assert done.returncode == output.UNREACHABLE and done.stderr == "", done
    assert json.loads(done.stdout)["error"] == "unreachable", done
