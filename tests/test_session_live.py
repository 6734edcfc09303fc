# A facilitate session with three real engines (issue 21, "What it must show"): Claude Code facilitates, Codex
# and Gemini CLI take part, offline against the scripted fake model in the live acceptance's namespace
# (tests/live/team.py: one `unshare -n` namespace with the daemon, a fake model per engine, one tmux server).
# The session runner (io/session_runner.py) runs here, talking to that daemon as its owner through the
# namespace's thread, as the daemon's session keeper runs it in-process. The facilitator asks both
# participants; Codex answers; Gemini CLI ignores its ask, gets exactly one reminder, then a
# protocol_violation is traced and the asker released; the facilitator concludes by replying to its brief.
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core import session as s
from harness.core.redaction import redactor
from harness.io import session_files
from harness.io import session_runner as runner
from harness.io.profiles import is_plain_shell
from harness.io.tmux import pane_foreground
from harness.io.trace import TraceWriter
from harness.io.trace_files import read_trace
from tests.engines.launch import install_problem
from tests.live.scripts import INTRODUCTION, SAVE_PREFIX, THINK
from tests.live.team import LiveTeam, SeatSpec, launch_team

pytestmark = pytest.mark.engines

SID = "s-live"
LEAD, ANSWERS, IGNORES = "claude-lead", "codex-peer", "gemini-peer"
ENDPOINT = "GET /v1/state"
WAIT_ALL = "wait_all.py"
# Codex must answer well before its reminder would be due; Gemini's reminder and violation then come within
# one command of the facilitator's turn (an engine's shell tool allows two minutes).
LIMITS = s.SessionLimits(reminder_after_ms=40_000, violation_after_ms=15_000)
SESSION_SECONDS = 400.0

# The facilitator's helper in its workdir: wait until every named question has ended (answered, or released
# by the session), then print how each ended.
WAIT_ALL_PY = """\
import json, subprocess, sys, time

def state(question):
    done = subprocess.run(["./team.sh", "status", question, "--json"], capture_output=True, text=True)
    return json.loads(done.stdout).get("state")

end = time.time() + 110
while time.time() < end and any(state(q) == "open" for q in sys.argv[1:]):
    time.sleep(1)
print("; ".join(f"{q} {state(q)}" for q in sys.argv[1:]))
"""


def step(when: str, run: list[str] | str, final: str) -> dict[str, Any]:
    return {"when_regex": when, "run": run, "final": final, "description": "Session step", "delay": THINK}


def learn() -> dict[str, Any]:
    return step(INTRODUCTION, SAVE_PREFIX, "Ready: I know my team commands.")


def facilitator() -> dict[str, Any]:
    asks = [
        f"./team.sh ask {peer} 'Which endpoint returns the daemon state?' --id q-{peer}"
        for peer in (ANSWERS, IGNORES)
    ]
    conclude = [
        f"python3 {WAIT_ALL} q-{ANSWERS} q-{IGNORES}",
        "./team.sh reply {{qid|q}} 'concluded: both asked'",
    ]
    brief = rf"Question (?P<qid>{SID}\.brief) from session:"
    return {
        "rules": [learn(), step(brief, [*asks, *conclude], "Concluded the session.")],
        "default": "Noted.",
    }


def answerer() -> dict[str, Any]:
    question = rf"Question (?P<qid>q-[\w.-]+) from (?P<asker>{LEAD}):"
    reply = step(question, f"./team.sh reply {{{{qid|q}}}} '{ENDPOINT}'", "Answered {{qid}}.")
    return {"rules": [learn(), reply], "default": "Noted."}


def ignorer() -> dict[str, Any]:
    return {"rules": [learn()], "default": "Noted; I will not answer."}


@pytest.fixture
def live() -> Iterator[list[LiveTeam]]:
    problem = install_problem()
    if problem is not None:
        pytest.skip(f"engines not available: {problem}")
    teams: list[LiveTeam] = []
    yield teams
    for team in teams:
        team.stop()


def test_a_facilitate_session_of_three_real_engines(live: list[LiveTeam], tmp_path: Path) -> None:
    """Seed 004: "On an unanswered owed Ask, the participant injects one synthetic reminder. It then emits
    protocol_violation. It unblocks the asker" -- with the real engines, never with an invented answer."""
    specs = [
        SeatSpec(LEAD, "claude", "facilitator", facilitator()),
        SeatSpec(ANSWERS, "codex", "facilitated agent", answerer()),
        SeatSpec(IGNORES, "gemini", "facilitated agent", ignorer()),
    ]
    team = launch_team(specs, skip_permissions=True)
    live.append(team)
    (team.seats[LEAD].run.workdir / WAIT_ALL).write_text(WAIT_ALL_PY, encoding="utf-8")
    team.register_agents()
    seats = {name: runner.Seat(name, seat.agent_id) for name, seat in team.seats.items()}
    plan = runner.SessionPlan(
        SID,
        s.Mode.FACILITATE,
        seats[LEAD],
        (seats[ANSWERS], seats[IGNORES]),
        "Ask codex-peer and gemini-peer which endpoint returns the daemon state, then conclude.",
        team.machine_id,
        LIMITS,
    )

    def call(action: str, fields: dict[str, Any]) -> Any:
        return team.rpc(action, team_id=None if action == "create" else SID, fields=fields)

    async def alive(name: str) -> bool:
        command = await pane_foreground(str(team.socket), team.seats[name].pane)
        return command is not None and not is_plain_shell(command)

    async def main() -> s.Session:
        redacting = redactor({})
        writer = await TraceWriter.open(tmp_path / "trace", redacting)
        try:

            async def owner(action: str, fields: dict[str, Any]) -> Any:
                return await trio.to_thread.run_sync(partial(call, action, fields))

            with trio.fail_after(SESSION_SECONDS):
                made = runner.SessionRunner(
                    plan, tmp_path / "home", owner, writer, alive=alive, redactor=redacting, poll_seconds=0.5
                )
                return await made.run()
        finally:
            await writer.aclose()

    started = time.monotonic()
    ended = trio.run(main)
    took = time.monotonic() - started
    view = session_files.read_status(tmp_path / "home", SID)
    assert view is not None
    assert (ended.termination, ended.reason) == (s.Termination.CONCLUDED, f"conclude by {LEAD}"), view
    asks = {ask["id"]: ask for ask in view["asks"]}
    assert asks[f"q-{ANSWERS}"]["state"] == "answered"
    assert (asks[f"q-{IGNORES}"]["state"], asks[f"q-{IGNORES}"]["reason"]) == ("released", "no_answer")
    assert view["reminders"] == [f"q-{IGNORES}"] and view["violations"] == [f"q-{IGNORES}"]
    assert ended.summary == "concluded: both asked"

    ledger = {e["id"]: e for e in team.team(SID)["exchanges"]}
    assert ledger[f"q-{ANSWERS}"]["answer"]["text"] == ENDPOINT  # the engine's own reply, through the daemon
    ignored = ledger[f"q-{IGNORES}"]
    assert ignored["answer"] is None and (ignored["state"], ignored["reason"]) == ("expired", "no_answer")
    reminders = [e for e in ledger.values() if ".reminder." in e["id"]]
    assert [(e["to"], (e["delivery"] or {}).get("state")) for e in reminders] == [(IGNORES, "accepted")], (
        reminders
    )

    lines = list(read_trace(tmp_path / "trace"))
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    steps = [(line.source, line.event["type"], line.event.get("exchangeId")) for line in lines]
    ignored = f"q-{IGNORES}"
    order = [
        ("ledger", "ask", ignored),
        ("orchestrator", "reminder", ignored),
        ("orchestrator", "protocol_violation", ignored),
        ("orchestrator", "asker_released", ignored),
        ("orchestrator", "summary", None),
    ]
    assert [steps.index(step) for step in order] == sorted(steps.index(step) for step in order)
    assert [k for k in steps if k[1] == "reminder"] == [("orchestrator", "reminder", ignored)]
    summary = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "trace", "summary", str(tmp_path / "trace"), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(summary.stdout)
    assert [(v["exchangeId"], v["memberId"], v["rule"]) for v in result["violations"]] == [
        (ignored, IGNORES, "no_answer")
    ]
    timed = {e["exchangeId"]: e for e in result["exchanges"]}
    assert timed[f"q-{ANSWERS}"]["sinceAsk"]["answered"] > 0
    print(f"live session: {took:.0f} s, {len(lines)} trace lines")
