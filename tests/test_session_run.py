# `harness session run` end to end (issue 21): real processes only. A `harness daemon start` on its own data
# directory, three scripted members (tests/test_session_agent.py) in the daemon's private tmux server
# (a socket file inside that directory), and the session runner as a person runs it. The facilitator asks
# both participants; one answers, the other ignores its ask and gets exactly one reminder, then a
# protocol_violation is traced and the asker released; the facilitator concludes.
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.io.trace_files import read_trace, session_trace_dir

HARNESS = [sys.executable, "-m", "harness.cli.main"]
MEMBER = Path(__file__).with_name("test_session_agent.py")
SESSION_SECONDS = 300  # a generous bound for a walk that takes under a minute on an idle machine


def harness(home: Path, *argv: str, timeout: float = 90, program: tuple[str, ...] = ()) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    done = subprocess.run(
        [*HARNESS, *argv, "--home", str(home), "--json", *(("--", *program) if program else ())],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def ok(result: tuple[int, Any]) -> Any:
    assert result[0] == 0, result
    return result[1]


def daemon_home(tmp_path: Path) -> Iterator[Path]:
    """A daemon started through the CLI on a new data directory; then stopped with its agents and their tmux
    server (the session tests' fixtures are this)."""
    home = tmp_path / "home"
    ok(harness(home, "daemon", "start"))
    try:
        yield home
    finally:
        harness(home, "daemon", "stop", "--agents")
        kill = ["tmux", "-S", str(home / "tmux" / "agents.sock"), "kill-server"]
        subprocess.run(kill, capture_output=True, check=False)


def until(what: str, check: Callable[[], Any], started: subprocess.Popen[str], last: Any = None) -> Any:
    """`check()`'s first true value within SESSION_SECONDS; the session run `started` must stay alive."""
    deadline = time.monotonic() + SESSION_SECONDS
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        assert started.poll() is None, started.communicate()
        time.sleep(0.2)
    started.kill()
    raise AssertionError(f"no {what} within {SESSION_SECONDS} s: {last() if last else ''}")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield from daemon_home(tmp_path)


def member(home: Path, name: str, behaviour: str, *asks: str) -> None:
    program = (sys.executable, str(MEMBER), "--name", name, "--behaviour", behaviour)
    program += tuple(arg for to in asks for arg in ("--ask", to))
    ok(
        harness(
            home,
            "agent",
            "start",
            "--engine",
            "scripted",
            "--name",
            name,
            "--cwd",
            str(home),
            program=program,
        )
    )


def pane(home: Path, name: str) -> str:
    argv = [
        "tmux",
        "-S",
        str(home / "tmux" / "agents.sock"),
        "capture-pane",
        "-p",
        "-J",
        "-t",
        f"agent-{name}",
    ]
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def test_a_facilitated_session_reminds_once_traces_the_violation_and_releases_the_asker(
    home: Path, tmp_path: Path
) -> None:
    """Seed 004: "On an unanswered owed Ask, the participant injects one synthetic reminder. It then emits
    protocol_violation. It unblocks the asker" -- here by ending the question in the ledger: "the question
    ends `expired` with reason `no_answer`, visible, never an invented answer" (issue 21)."""
    member(home, "chair", "lead", "ann", "ben")
    member(home, "ann", "answer")
    member(home, "ben", "ignore")
    brief = tmp_path / "brief.txt"
    brief.write_text("Find out which endpoint returns the daemon state; ask ann and ben, then conclude.\n")
    status, view = harness(
        home,
        "session", "run", "--mode", "facilitate", "--id", "s1", "--brief", str(brief),
        "--lead", "chair=scripted", "--agent", "ann=scripted", "--agent", "ben=scripted",
        "--reminder-after", "20", "--violation-after", "5",
        timeout=SESSION_SECONDS,
    )  # fmt: skip
    panes = {name: pane(home, name) for name in ("chair", "ann", "ben")}
    assert status == 0, (view, panes)
    assert (view["state"], view["termination"], view["reason"]) == ("ended", "concluded", "conclude by chair")
    asks = {ask["id"]: ask for ask in view["asks"]}
    assert asks["q-ann"]["state"] == "answered"
    assert (asks["q-ben"]["state"], asks["q-ben"]["reason"]) == ("released", "no_answer")
    assert view["reminders"] == ["q-ben"] and view["violations"] == ["q-ben"]
    assert view["summary"] == "concluded: q-ann answered; q-ben expired"  # what the lead's `status` showed

    # The ledger: ann's answer, ben's question ended without one, and the one reminder delivered to ben.
    team = ok(harness(home, "team", "get", "--team", "s1"))
    exchanges = {e["id"]: e for e in team["exchanges"]}
    assert exchanges["q-ann"]["state"] == "answered" and exchanges["q-ann"]["answer"]["author"] == "ann"
    ben = exchanges["q-ben"]
    assert (ben["state"], ben["reason"], ben["answer"]) == ("expired", "no_answer", None)
    reminders = [e for e in team["exchanges"] if ".reminder." in e["id"]]
    assert [(e["from"], e["to"], e["state"]) for e in reminders] == [("session", "ben", "cancelled")]
    assert "Reminder from session s1" in panes["ben"].replace("\n", "")

    # The session's trace: one seq order, every step of the story in it.
    lines = list(read_trace(session_trace_dir(home, "s1")))
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    steps = [(line.source, line.event["type"], line.event.get("exchangeId")) for line in lines]
    orchestrated = [step[1] for step in steps if step[0] == "orchestrator"]
    assert orchestrated[:4] == ["session_start", "agent_start", "agent_start", "agent_start"]
    assert orchestrated[-1] == "summary" and orchestrated.count("summary") == 1
    assert [step for step in steps if step[1] == "reminder"] == [("orchestrator", "reminder", "q-ben")]
    reminded = steps.index(("orchestrator", "reminder", "q-ben"))
    violation = steps.index(("orchestrator", "protocol_violation", "q-ben"))
    released = steps.index(("orchestrator", "asker_released", "q-ben"))
    asked = steps.index(("ledger", "ask", "q-ben"))
    assert asked < reminded < violation < released < steps.index(("orchestrator", "summary", None))
    assert ("ledger", "reply", "q-ann") in steps and ("ledger", "reply", "q-ben") not in steps
    [final] = [line.event for line in lines if line.event["type"] == "summary"]
    assert (final["termination"], final["success"], final["violations"]) == ("concluded", True, ["q-ben"])

    # `harness trace summary` reads it offline and prints the one violation.
    result = ok(harness(home, "trace", "summary", str(session_trace_dir(home, "s1"))))
    assert [(v["exchangeId"], v["memberId"], v["rule"]) for v in result["violations"]] == [
        ("q-ben", "ben", "no_answer")
    ]
    timed = {e["exchangeId"]: e for e in result["exchanges"]}
    assert timed["q-ann"]["sinceAsk"]["answered"] >= 0 and timed["q-ben"]["reason"] == "no_answer"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    readable = subprocess.run(
        [*HARNESS, "trace", "summary", str(session_trace_dir(home, "s1"))],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "1 protocol violations" in readable.stdout and "no_answer" in readable.stdout

    # status reads it after the runner is gone; stop refuses an ended session.
    shown = ok(harness(home, "session", "status", "s1"))
    assert (shown["termination"], shown["runnerGone"]) == ("concluded", False)
    code, refused = harness(home, "session", "stop", "s1")
    assert code == 1 and refused["error"] == "conflict"


@pytest.mark.parametrize(
    ("argv", "detail"),
    [
        (["--mode", "chat", "--lead", "a=scripted"], "unknown mode"),
        (["--mode", "judge", "--lead", "a"], "NAME=ENGINE"),
        (["--mode", "judge", "--lead", "a=vim"], "unknown engine"),
        (["--mode", "judge", "--lead", "session=scripted"], "not 'session'"),
        (["--mode", "facilitate", "--lead", "a=scripted", "--agent", "a=scripted"], "named twice"),
        (["--mode", "judge", "--lead", "a=scripted", "--agent", "b=scripted"], "takes none participants"),
        (["--mode", "supervise", "--lead", "a=scripted"], "takes one participants"),
        (["--mode", "judge", "--lead", "a=scripted", "--id", "../x"], "--id"),
    ],
)
def test_bad_session_arguments_are_one_line_usage_errors(
    tmp_path: Path, argv: list[str], detail: str
) -> None:
    brief = tmp_path / "brief.txt"
    brief.write_text("judge this\n")
    code, error = harness(tmp_path / "home", "session", "run", *argv, "--brief", str(brief))
    assert code == 2 and error["error"] == "bad_request" and detail in error["detail"], error


def test_a_brief_past_its_bound_or_missing_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("x" * 7_000)
    argv = ["session", "run", "--mode", "judge", "--lead", "a=scripted", "--brief"]
    code, error = harness(tmp_path / "home", *argv, str(big))
    assert code == 2 and error["error"] == "bound_exceeded", error
    code, error = harness(tmp_path / "home", *argv, str(tmp_path / "absent.txt"))
    assert code == 2 and "cannot read the brief" in error["detail"], error


def test_status_of_an_unknown_session_is_not_found(tmp_path: Path) -> None:
    code, error = harness(tmp_path / "home", "session", "status", "nope")
    assert code == 1 and error["error"] == "not_found", error


GOOD_STATUS = json.dumps(
    {
        "sessionId": "good",
        "mode": "judge",
        "lead": "j",
        "state": "running",
        "trace": "t",
        "asks": [],
        "reminders": [],
        "violations": [],
    }
).encode()


def test_a_damaged_status_is_corrupt_state_and_hides_no_other_session(tmp_path: Path) -> None:
    """A status file that is not a status (garbage, an object of another shape, a directory) is refused with
    `corrupt_state` for that session, listed as unreadable beside the others, and a data directory that is a
    file has no sessions: never a traceback (the CLI fuzz found `NotADirectoryError` there)."""
    home = tmp_path / "home"
    for session_id, status in (("garbage", b"\xff{"), ("shape", b"{}"), ("good", GOOD_STATUS)):
        (home / "sessions" / session_id).mkdir(parents=True)
        (home / "sessions" / session_id / "status.json").write_bytes(status)
    (home / "sessions" / "folder" / "status.json").mkdir(parents=True)
    for session_id in ("garbage", "shape", "folder"):
        code, error = harness(home, "session", "status", session_id)
        assert code == 1 and error["error"] == "corrupt_state", error
    listed = ok(harness(home, "session", "status"))["sessions"]
    states = {view["sessionId"]: view.get("state") for view in listed}
    assert states == {
        "folder": "unreadable",
        "garbage": "unreadable",
        "good": "running",
        "shape": "unreadable",
    }
    shown = subprocess.run(
        [*HARNESS, "session", "status", "--home", str(home)], check=False, capture_output=True, text=True
    )
    assert shown.returncode == 0 and "session garbage: unreadable" in shown.stdout, shown
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    code, error = harness(a_file, "session", "status", "good")
    assert code == 1 and error["error"] == "not_found", error


def background_session(home: Path, tmp_path: Path, session_id: str) -> subprocess.Popen[str]:
    """A judge session whose judge never concludes, run as a person runs it, in the background."""
    member(home, "judge", "ignore")
    brief = tmp_path / "brief.txt"
    brief.write_text("Judge the patch.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    argv = [*HARNESS, "session", "run", "--mode", "judge", "--id", session_id, "--lead", "judge=scripted"]
    argv += ["--brief", str(brief), "--home", str(home), "--json"]
    started = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + SESSION_SECONDS
    while time.monotonic() < deadline:
        code, view = harness(home, "session", "status", session_id)
        if code == 0 and view["state"] == "running":
            assert view["runnerGone"] is False
            return started
        assert started.poll() is None, started.communicate()
        time.sleep(0.5)
    started.kill()
    raise AssertionError("the session did not start")


def ended(started: subprocess.Popen[str]) -> tuple[int, Any]:
    out, err = started.communicate(timeout=SESSION_SECONDS)
    return started.returncode, json.loads(out) if out.strip() else err


def test_harness_session_stop_aborts_a_running_session(home: Path, tmp_path: Path) -> None:
    started = background_session(home, tmp_path, "s-stop")
    assert ok(harness(home, "session", "stop", "s-stop")) == {"sessionId": "s-stop", "stopRequested": True}
    code, view = ended(started)
    assert code == 1, view
    assert (view["termination"], view["reason"]) == ("stopped", "abort: stopped by `harness session stop`")
    brief = ok(harness(home, "team", "status", "s-stop.brief", "--team", "s-stop"))
    assert (brief["state"], brief["reason"]) == ("cancelled", "stopped")  # the judge owes its brief no more


def test_an_engine_that_exits_stops_its_session(home: Path, tmp_path: Path) -> None:
    started = background_session(home, tmp_path, "s-crash")
    kill = ["tmux", "-S", str(home / "tmux" / "agents.sock"), "kill-session", "-t", "agent-judge"]
    subprocess.run(kill, check=True)
    code, view = ended(started)
    assert code == 1, view
    assert (view["termination"], view["reason"]) == (
        "stopped",
        "agent_crashed: judge: its engine's pane is gone",
    )


def test_a_lead_runs_the_session_tools_its_introduction_taught(home: Path, tmp_path: Path) -> None:
    """Issue 21: Announce is "an explicit, bounded, recorded broadcast note", delivered as pulled board notes;
    RollCall returns each participant's observation, owed asks and last activity; a tool the role lacks
    (RequestForComment for a facilitator) is refused with a stable code. Run by a real engine in tmux."""
    member(home, "chair", "tools", "ann")
    member(home, "ann", "ignore")
    member(home, "ben", "ignore")
    brief = tmp_path / "brief.txt"
    brief.write_text("Tell the team to read the board, see who is here, then conclude.\n")
    status, view = harness(
        home,
        "session", "run", "--mode", "facilitate", "--id", "s2", "--brief", str(brief),
        "--lead", "chair=scripted", "--agent", "ann=scripted", "--agent", "ben=scripted",
        timeout=SESSION_SECONDS,
    )  # fmt: skip
    panes = {name: pane(home, name) for name in ("chair", "ann", "ben")}
    assert status == 0, (view, panes)
    said = json.loads(view["summary"])
    assert said == {
        "announce": ["ann", "ben"],
        "rfc": "unauthorized",
        "owed": {"chair": [], "ann": ["q-ann"], "ben": []},
    }, panes["chair"]
    [note] = view["announcements"]
    assert (note["id"], note["author"], note["text"]) == ("a1", "chair", "kickoff: read the board")
    asks = {ask["id"]: (ask["state"], ask["reason"]) for ask in view["asks"]}
    assert asks == {"q-ann": ("cancelled", "session s2 concluded: conclude by chair")}

    # Pulled, never pushed: the note waits in each participant's board mailbox, and no pane shows it.
    for name in ("ann", "ben"):
        page = ok(harness(home, "team", "board", "notes", "--member", name, "--team", "s2"))
        texts = [n["text"] for n in page["result"]["notes"]]
        assert texts == ["[announce] chair (session s2): kickoff: read the board"], page
        assert "kickoff" not in panes[name]

    lines = list(read_trace(session_trace_dir(home, "s2")))
    steps = [(line.event["type"], line.event.get("tool"), line.event.get("code")) for line in lines]
    assert ("announcement", None, None) in steps and (
        "tool_refused",
        "request_for_comment",
        "unauthorized",
    ) in steps
    assert [step for step in steps if step[0] == "tool_call"] == [
        ("tool_call", "announce", None),
        ("tool_call", "roll_call", None),
    ]

    # The tools are a member's: without a member key, or after the session ended, they are refused.
    code, error = harness(home, "session", "rollcall", "s2")
    assert code == 2 and error["error"] == "bad_request" and "--key-file" in error["detail"], error
    key_file = home / "keys" / "s2" / "ann.key"
    code, error = harness(home, "session", "announce", "s2", "late", "--key-file", str(key_file))
    assert code == 1 and error["error"] == "conflict", error
