# `harness demo`: the whole loop on this machine, without a model and without setting anything up. A
# throw-away daemon, a private tmux server (`-L harness-demo-PID`) with two scripted agents
# (`harness.cli.demo_agent`, registered as engine `scripted`: programs that take each line as a message; a
# shell never is one), a team of the two: each gets its introduction pasted into its pane, `mobile` asks
# `daemons` a question with the team commands it just learned, the notice is pasted into `daemons`' pane only
# when that pane is idle, `daemons` answers with `reply`, and the answer notice resumes `mobile`. Delivery
# states are printed as they change, then both panes. Everything it started (daemon, tmux server, temporary
# data directory) is stopped before it returns.
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TEAM = "demo"
QUESTION = "Which endpoint returns the daemon's state?"
ANSWER = "GET /v1/daemon/state (see io/daemon.py)"
DEADLINE = 60.0  # seconds for the whole walk; it takes about fifteen
AGENTS = (
    ("mobile", "Phone client", ["--ask", QUESTION, "--to", "daemons"]),
    ("daemons", "Daemon APIs", ["--answer", ANSWER]),
)


def run_demo() -> None:
    import trio

    if shutil.which("tmux") is None:
        print("harness demo needs tmux (3.2 or later) on PATH", file=sys.stderr)
        raise SystemExit(1)
    with tempfile.TemporaryDirectory(prefix="harness-demo-") as tmp:
        trio.run(_demo, Path(tmp))


async def _demo(home: Path) -> None:
    import trio

    from harness.io.agents import AgentRegistry
    from harness.io.daemon import Daemon
    from harness.io.desk_runner import RunnerTiming
    from harness.io.tmux import TmuxTerminals

    made: list[TmuxTerminals] = []

    def terminals(registry: AgentRegistry) -> TmuxTerminals:
        made.append(TmuxTerminals.from_registry(registry))
        return made[-1]

    socket = f"harness-demo-{os.getpid()}"
    timing = RunnerTiming(poll_ms=200)
    daemon = Daemon(home, terminals=terminals, runner_timing=timing, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            await trio.to_thread.run_sync(_script, home, daemon.socket_path, daemon.machine_id, socket)
        finally:
            with trio.CancelScope(shield=True):
                for made_terminals in made:
                    await made_terminals.aclose()
                await _stop_tmux(socket)
                daemon.stop()


async def _stop_tmux(socket: str) -> None:
    """Stop our tmux server: by its socket, then by its PID; remove the socket file tmux leaves."""
    from harness.io.tmux import kill_server

    found = subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "#{pid} #{socket_path}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    await kill_server(socket)
    if len(found) == 2:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(found[0]), signal.SIGTERM)
        Path(found[1]).unlink(missing_ok=True)


def _say(text: str) -> None:
    print(text, flush=True)


def _script(home: Path, daemon_socket: Path, machine_id: str, socket: str) -> None:
    import trio

    from harness.io import home as homes
    from harness.io.client import Client
    from harness.io.tmux import new_session

    token = homes.read_owner_token(home)
    started = time.monotonic()
    with Client(daemon_socket) as client:
        _say(f"== a daemon for {home} at {daemon_socket}, a private tmux server -L {socket}")
        for name, role, extra in AGENTS:
            command = [sys.executable, "-m", "harness.cli.demo_agent", "--name", name, *extra]
            start = functools.partial(
                new_session, socket, name, command, width=120, height=40, config="/dev/null"
            )
            pane = trio.from_thread.run(start)
            client.request(
                "agent_register",
                owner_token=token,
                fields={
                    "agentId": f"agent-{name}",
                    "name": name,
                    "engine": "scripted",
                    "tmux": {"socket": socket, "target": pane},
                    "startedBy": "daemon",
                },
            )
            _say(f"== agent {name} ({role}) started in pane {pane} and registered")
        members = [
            {"machineId": machine_id, "agentId": f"agent-{name}", "name": name, "role": role}
            for name, role, _ in AGENTS
        ]
        client.request("create", owner_token=token, fields={"id": TEAM, "name": "Demo", "members": members})
        _say("== team 'Demo' created: each member's introduction waits for an idle prompt")
        seen: dict[str, str] = {}
        while time.monotonic() - started < DEADLINE:
            team = client.request("get", team_id=TEAM, owner_token=token)
            for line in _events(team):
                key = line.split(":")[0]
                if seen.get(key) != line:
                    seen[key] = line
                    _say(f"  [{time.monotonic() - started:5.1f}s] {line}")
            if "Continuing my task" in _pane(socket, "mobile"):
                break
            time.sleep(0.2)
        else:
            _say(f"== the walk did not finish within {DEADLINE:g} s")
        for name, _, _ in AGENTS:
            _say(f"\n== pane {name}\n{_pane(socket, name)}")
        _say(f"\n== done in {time.monotonic() - started:.1f} s")


def _events(team: dict[str, Any]) -> list[str]:
    names = {member["id"]: member["name"] for member in team["members"]}
    lines = []
    for member in team["members"]:
        intro = member.get("introduction") or {}
        if intro.get("state"):
            lines.append(f"introduction to {member['name']}: {intro['state']}")
    for exchange in team["exchanges"]:
        delivery = exchange.get("delivery") or {}
        who = f"{names.get(exchange['from'])} -> {names.get(exchange['to'])}"
        lines.append(f"question {exchange['id']} ({who}): {exchange['state']}")
        lines.append(f"question {exchange['id']} notice: {delivery.get('state')}")
        if exchange.get("answer"):
            answer = exchange["answer"]
            lines.append(f"answer to {exchange['id']}: {answer['text']!r} by {names.get(answer['author'])}")
            notice = exchange.get("answerDelivery") or {}
            lines.append(f"answer notice to the asker: {notice.get('state')}")
    return lines


def _pane(socket: str, session: str) -> str:
    done = subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-J", "-t", session],
        capture_output=True,
        text=True,
        check=False,
    )
    return "\n".join(line for line in done.stdout.rstrip().splitlines())
