# A session hosted by the daemon survives the daemon's crash (issue 21): real processes only, as in
# tests/test_session_run.py. The daemon is SIGKILLed between a participant's one reminder and its protocol
# violation, then started again; it resumes the session from its journal, and the ledger and the trace hold
# each step exactly once, in one seq order.
from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.io import home as homes
from harness.io.trace_files import read_trace, session_trace_dir
from tests.test_session_run import HARNESS, SESSION_SECONDS, daemon_home, harness, member, ok, pane, until


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield from daemon_home(tmp_path)


def test_a_session_resumes_after_the_daemon_is_killed_between_the_reminder_and_the_release(
    home: Path, tmp_path: Path
) -> None:
    """Issue 21: "a participant with an owed ask gets exactly one reminder notice, then a
    `protocol_violation` event, then the asker is released" -- across a SIGKILL of the daemon that hosts the
    session: no reminder twice, no release repeated, the trace's seq monotonic."""
    member(home, "chair", "lead", "ben")
    member(home, "ben", "ignore")
    brief = tmp_path / "brief.txt"
    brief.write_text("Ask ben which endpoint returns the daemon state, then conclude.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    argv = [*HARNESS, "session", "run", "--mode", "facilitate", "--id", "s1", "--brief", str(brief)]
    argv += ["--lead", "chair=scripted", "--agent", "ben=scripted", "--home", str(home), "--json"]
    argv += ["--reminder-after", "3", "--violation-after", "25"]
    started = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def reminded() -> dict[str, Any] | None:
        code, view = harness(home, "session", "status", "s1")
        return view if code == 0 and view["reminders"] == ["q-ben"] else None

    view = until("reminder", reminded, started)
    assert view["violations"] == [] and view["state"] == "running", view
    daemon_pid = view["pid"]
    os.kill(daemon_pid, signal.SIGKILL)
    until("dead daemon", lambda: not homes.pid_alive(daemon_pid), started)
    cut = ok(harness(home, "session", "status", "s1"))
    assert (cut["state"], cut["violations"], cut["runnerGone"]) == ("running", [], True), cut

    ok(harness(home, "daemon", "start"))
    out, err = started.communicate(timeout=SESSION_SECONDS)
    view = json.loads(out) if out.strip() else err
    assert started.returncode == 0, (view, pane(home, "chair"), pane(home, "ben"))
    assert (view["termination"], view["reason"]) == ("concluded", "conclude by chair")
    assert view["reminders"] == ["q-ben"] and view["violations"] == ["q-ben"]
    assert view["summary"] == "concluded: q-ben expired"

    # The ledger: one reminder notice, and ben's question ended once, without an answer.
    team = ok(harness(home, "team", "get", "--team", "s1"))
    reminders = [e for e in team["exchanges"] if ".reminder." in e["id"]]
    assert [(e["from"], e["to"]) for e in reminders] == [("session", "ben")]
    ben = next(e for e in team["exchanges"] if e["id"] == "q-ben")
    assert (ben["state"], ben["reason"], ben["answer"]) == ("expired", "no_answer", None)

    # The trace: each step once, the resumption between the reminder and the violation, seq unbroken.
    lines = list(read_trace(session_trace_dir(home, "s1")))
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    kinds = [line.event["type"] for line in lines if line.source == "orchestrator"]
    for kind in ("session_start", "reminder", "session_resumed", "protocol_violation", "asker_released"):
        assert kinds.count(kind) == 1, (kind, kinds)
    assert kinds.count("summary") == 1 and kinds[-1] == "summary"
    order = [kinds.index(k) for k in ("reminder", "session_resumed", "protocol_violation", "asker_released")]
    assert order == sorted(order), kinds


def test_a_session_the_daemon_cannot_form_is_a_one_line_error_of_session_run(
    home: Path, tmp_path: Path
) -> None:
    """The daemon hosts the session; what stops it forming (here its team id is another team's) reaches the
    person who ran `session run` as one line with the ledger's code, not a wait without end."""
    member(home, "judge", "ignore")
    machine = (home / "machine-id").read_text().strip()
    agent_id = ok(harness(home, "agent", "show", "judge"))["agentId"]
    spec = tmp_path / "team.json"
    members = [{"machineId": machine, "agentId": agent_id, "name": "judge"}]
    spec.write_text(json.dumps({"id": "s-taken", "name": "by hand", "members": members}))
    ok(harness(home, "team", "create", "--file", str(spec)))
    brief = tmp_path / "brief.txt"
    brief.write_text("Judge the patch.\n")
    code, error = harness(
        home, "session", "run", "--mode", "judge", "--id", "s-taken", "--lead", "judge=scripted",
        "--brief", str(brief), timeout=SESSION_SECONDS,
    )  # fmt: skip
    assert code == 1 and error["error"] == "conflict", error
    assert error["detail"].startswith("session s-taken could not run: "), error
    code, again = harness(
        home, "session", "run", "--mode", "judge", "--id", "s-taken", "--lead", "judge=scripted",
        "--brief", str(brief),
    )  # fmt: skip
    assert code == 1 and again["error"] == "conflict" and "exists already" in again["detail"], again
