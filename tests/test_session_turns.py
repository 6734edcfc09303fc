# The lead-turn bound of a session the daemon hosts (issue 21: "Bounded: lead turns"), against a real tmux
# pane: the fake TUI of tests/fake_tui.py, read by the real `claude` profile, is the lead; the test turns it
# busy and idle through its control fifo. Each busy screen after a rest is one turn the desk's look saw; the
# turn past `--lead-turns` traces `lead_turn_limit` and stops the session.
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.io.trace_files import read_trace, session_trace_dir
from tests.test_session_run import HARNESS, SESSION_SECONDS, daemon_home, harness, ok, until

FAKE_TUI = Path(__file__).with_name("fake_tui.py")
BOUND = 3  # --lead-turns


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield from daemon_home(tmp_path)


@pytest.fixture
def lead_pane(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A tmux server of this test running the fake TUI: (socket name, pane id, control fifo)."""
    socket = f"harness-turns-{os.getpid()}-{secrets.token_hex(4)}"
    control = tmp_path / "lead.control"
    os.mkfifo(control)
    program = [
        sys.executable,
        str(FAKE_TUI),
        "--control",
        str(control),
        "--log",
        str(tmp_path / "lead.jsonl"),
    ]
    argv = [
        "tmux",
        "-f",
        "/dev/null",
        "-L",
        socket,
        "new-session",
        "-d",
        "-s",
        "work",
        "-x",
        "100",
        "-y",
        "30",
    ]
    made = subprocess.run(
        [*argv, "-P", "-F", "#{pane_id}", *program], capture_output=True, text=True, check=True
    )
    try:
        yield socket, made.stdout.strip(), control
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)


def steer(control: Path, verb: str) -> None:
    with control.open("w") as fifo:
        fifo.write(verb + "\n")


def test_the_lead_turn_past_the_bound_stops_the_session(
    home: Path, lead_pane: tuple[str, str, Path], tmp_path: Path
) -> None:
    """Issue 21: "Bounded: lead turns"; seed 004: "orchestrator emits session_start, agent_start,
    protocol_violation, lead_turn_limit, and summary", and "stopped is broader: lead error, agent crash,
    abort path"."""
    socket, pane, control = lead_pane
    attach = ["agent", "attach", "--tmux", pane, "--socket", socket, "--engine", "claude", "--name", "lead"]
    ok(harness(home, *attach))
    brief = tmp_path / "brief.txt"
    brief.write_text("Work in turns.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    argv = [*HARNESS, "session", "run", "--mode", "run", "--id", "s-turns", "--lead", "lead=claude"]
    argv += ["--brief", str(brief), "--lead-turns", str(BOUND), "--home", str(home), "--json"]
    started = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def status() -> dict[str, Any]:
        code, view = harness(home, "session", "status", "s-turns")
        return view if code == 0 else {}

    def resting() -> bool:
        return status().get("leadSeen") in ("idle", "settling")

    # The desk's notices (the brief last) are turns of their own, short ones the look may or may not catch.
    log = tmp_path / "lead.jsonl"
    until("the brief", lambda: log.exists() and "Work in turns." in log.read_text(), started)
    until("a rest after the brief", resting, started, status)
    counted = status()["leadTurns"]
    steer(control, "hold")  # from here a turn is busy until the test says idle
    while counted < BOUND:
        steer(control, "busy")
        until(f"turn {counted + 1}", lambda n=counted: status().get("leadTurns") == n + 1, started, status)
        counted += 1
        steer(control, "idle")
        until("a rest", resting, started, status)
    assert (status()["state"], status()["leadTurns"]) == ("running", BOUND)  # at the bound, not past it
    steer(control, "busy")  # the turn past the bound
    out, err = started.communicate(timeout=SESSION_SECONDS)
    view = json.loads(out) if out.strip() else err
    assert started.returncode == 1, view
    assert (view["termination"], view["reason"], view["leadTurns"]) == ("stopped", "lead_turn_limit", BOUND)

    lines = [line.event for line in read_trace(session_trace_dir(home, "s-turns"))]
    [limit] = [event for event in lines if event["type"] == "lead_turn_limit"]
    assert (limit["lead"], limit["turns"]) == ("lead", BOUND)
    [summary] = [event for event in lines if event["type"] == "summary"]
    assert (summary["termination"], summary["success"], summary["leadTurns"]) == ("stopped", False, BOUND)
    assert lines.index(limit) < lines.index(summary)
