# Agents are managed to the end (issue 17): `agent stop` ends the engine `agent start` started (its tmux
# session), `agent remove` forgets an agent and stops it, and `daemon stop --agents` leaves no tmux server
# behind. Real processes: a `harness daemon start` on its own data directory, agents in the daemon's own
# tmux server (a socket file inside that directory), the CLI as a user runs it.
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HARNESS = [sys.executable, "-m", "harness.cli.main"]


def harness(home: Path, group: str, command: str, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    argv = [*HARNESS, group, command, "--home", str(home), "--json", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, check=False)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def ok(result: tuple[int, Any]) -> Any:
    assert result[0] == 0, result
    return result[1]


def sessions(socket: Path) -> list[str]:
    """The sessions of the agents' tmux server; [] when no server runs."""
    argv = ["tmux", "-S", str(socket), "list-sessions", "-F", "#{session_name}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.stdout.split() if done.returncode == 0 else []


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    ok(harness(home, "daemon", "start"))
    try:
        yield home
    finally:
        harness(home, "daemon", "stop", "--agents")
        kill = ["tmux", "-S", str(home / "tmux" / "agents.sock"), "kill-server"]
        subprocess.run(kill, capture_output=True, check=False)


def start(home: Path, name: str) -> dict[str, Any]:
    program = ["--", "sleep", "600"]
    started: dict[str, Any] = ok(
        harness(home, "agent", "start", "--engine", "scripted", "--name", name, "--cwd", str(home), *program)
    )
    return started


def test_stop_ends_the_engine_and_remove_forgets_the_agent(home: Path) -> None:
    socket = home / "tmux" / "agents.sock"
    start(home, "alpha")
    start(home, "beta")
    assert sorted(sessions(socket)) == ["agent-alpha", "agent-beta"]
    assert ok(harness(home, "agent", "stop", "alpha"))["stopped"] is True
    assert sessions(socket) == ["agent-beta"]
    listed = {a["name"] for a in ok(harness(home, "agent", "list"))["agents"]}
    assert listed == {"alpha", "beta"}  # a stopped agent stays registered: its notices wait offline
    removed = ok(harness(home, "agent", "remove", "beta"))
    assert removed["removed"] is True and removed["stopped"] is True
    assert sessions(socket) == []
    assert [a["name"] for a in ok(harness(home, "agent", "list"))["agents"]] == ["alpha"]


def test_daemon_stop_with_agents_leaves_no_tmux_server(home: Path) -> None:
    socket = home / "tmux" / "agents.sock"
    start(home, "gamma")
    assert sessions(socket) == ["agent-gamma"]
    stopped = ok(harness(home, "daemon", "stop", "--agents"))
    assert stopped["stopped"] is True and stopped["agentsRunning"] == 0
    assert sessions(socket) == []
    alive = subprocess.run(["tmux", "-S", str(socket), "has-session"], capture_output=True, check=False)
    assert alive.returncode != 0


def test_daemon_stop_without_agents_says_they_still_run(home: Path) -> None:
    socket = home / "tmux" / "agents.sock"
    start(home, "delta")
    assert ok(harness(home, "daemon", "stop"))["agentsRunning"] == 1
    assert sessions(socket) == ["agent-delta"]  # left running, as said; the fixture ends it


def test_a_program_that_exits_at_once_is_refused_and_nothing_is_registered(home: Path) -> None:
    """An engine that exits before it can be reached (a missing key, a bad flag) is not registered as an
    agent whose notices would wait forever: `agent start` says so with `offline` and the program's exit
    status, and leaves no tmux session. Its pane outlives it long enough to be read, even when it was the
    server's only one (the server's remain-on-exit is set before the session exists)."""
    socket = home / "tmux" / "agents.sock"
    program = ["--", "sh", "-c", "echo 'no API key found' >&2; exit 3"]
    code, refused = harness(
        home, "agent", "start", "--engine", "scripted", "--name", "quick", "--cwd", str(home), *program
    )
    assert (code, refused["error"]) == (1, "offline"), refused
    assert refused["detail"] == (
        "sh exited at once (status 3); nothing was registered (run it in a terminal to see why)"
    )
    assert ok(harness(home, "agent", "list"))["agents"] == []
    assert sessions(socket) == []
