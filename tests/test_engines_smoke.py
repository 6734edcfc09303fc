# The real engines, offline, end to end: each pinned CLI (Claude Code, Codex, Gemini CLI) starts in its own
# network namespace and tmux server against the scripted fake model, takes a pasted prompt, runs the shell
# command the script gives it (the test approves the permission dialog as a human would, with the key the
# dialog names), and the command's effect shows up on disk. This is the ground the live acceptance of the
# delivery desk stands on: if these fail, the engine recipe (tests/engines/launch.py) is broken, not the desk.
# Select with `-m engines`; they skip, saying why, only when the engines cannot be installed or run here.
from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest

from tests.engines.launch import ENGINES, EngineRun, install_problem, launch, looks_dialog, looks_idle

pytestmark = pytest.mark.engines

# The key a person presses to approve each engine's permission dialog ("yes, once"; Grok CLI's `1. Yes` is
# preselected and has no key of its own).
APPROVE = {"claude": "1", "codex": "y", "gemini": "1", "grok": "Enter"}
PER_ENGINE_TIMEOUT = 90.0


@pytest.fixture(scope="session")
def engines_installed() -> None:
    problem = install_problem()
    if problem is not None:
        print(f"engine tests skipped: {problem}")
        pytest.skip(f"engines not available: {problem}")


@pytest.fixture
def started(engines_installed: None) -> Iterator[dict[str, EngineRun]]:
    runs: dict[str, EngineRun] = {}
    yield runs
    for run in runs.values():
        run.stop()


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_runs_scripted_shell_command(engine: str, started: dict[str, EngineRun]) -> None:
    token = secrets.token_hex(8)
    script = {
        "rules": [
            {
                "when": "write the smoke token",
                "run": f"echo {token} > out.txt",
                "final": "Wrote the smoke token.",
                "description": "Write the smoke token to out.txt",
                "escalate": True,  # Codex: ask for approval, as the other two do for this command
            }
        ]
    }
    deadline = time.monotonic() + PER_ENGINE_TIMEOUT
    run = launch(engine, script=script, idle_timeout=60)
    started[engine] = run
    print(f"{engine} {run.version}: idle {run.seconds_to_idle:.1f} s after start")

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    out = run.workdir / "out.txt"
    run.paste("Please write the smoke token into out.txt.")
    screen = run.wait_for(lambda s: looks_dialog(s) or out.exists(), timeout=left(), what="permission dialog")
    if not out.exists():
        assert looks_dialog(screen)
        run.send_keys(APPROVE[engine])
    run.wait_for(lambda s: out.exists() and out.read_text().strip() == token, timeout=left(), what="out.txt")
    assert out.read_text().strip() == token

    run.wait_stable(
        lambda s: looks_idle(engine, s) and "Wrote the smoke token" in s,
        timeout=left(),
        what="idle screen after the final text",
        stable_for=1.0,
    )
    turns = [e for e in run.fake.log() if not e.get("side") and e.get("rule") == 0]
    assert [(t["action"], t["steps"]) for t in turns] == [("tool", 0), ("text", 1)], turns
    assert turns[0]["command"] == f"echo {token} > out.txt"


def test_stop_ends_every_process_of_the_run(engines_installed: None) -> None:
    run = launch("codex", idle_timeout=60)
    try:
        pids = run.processes()
        assert run.pids["fake_model"] in pids and run.pids["tmux_server"] in pids and run.pids["pane"] in pids
    finally:
        run.stop()
    assert run.processes() == []
    assert not run.root.exists()
