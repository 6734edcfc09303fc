# The session tools that are no team operation (issue 21): Announce, RollCall, RequestForComment and
# Acknowledge, as `harness session TOOL` leaves them for the runner -- a call file naming the tool and the
# digest of the caller's member key. Over the ledger double of tests/test_session_runner.py (the real team
# reducer, the test's clock, one `round` per poll), so each story is exact; the same tools run by real engines
# against a real daemon are at the end of tests/test_session_run.py.
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core import session as s
from harness.core.errors import Rejected
from harness.io import home as homes
from harness.io import session_files
from harness.io import session_runner as runner
from harness.io.team_delivery import harness_command
from tests.test_session_runner import SID, LedgerDouble, Story, kinds, plan, play

ALL_TOOLS = {"announce", "rollcall", "rfc", "acknowledge", "recess"}


def keys(made: runner.SessionRunner) -> None:
    """The key files the daemon writes for each member of the session's team (the double's keys)."""
    for seat in made.plan.seats():
        homes.write_member_key(made.home, SID, seat.name, f"key-{seat.name}")


async def call(made: runner.SessionRunner, tool: str, by: str, text: str = "", cid: str = "c1") -> Any:
    """What `harness session TOOL` does: leave the call, then (one poll later) read its result."""
    calls = session_files.session_dir(made.home, SID) / runner.CALLS_DIR
    digest = runner.key_digest(f"key-{by}")
    homes.write_private_json(
        calls / f"{cid}{runner.CALL_SUFFIX}", {"tool": tool, "text": text, "keyDigest": digest}
    )
    await made.round()
    assert not (calls / f"{cid}{runner.CALL_SUFFIX}").exists()  # each call is answered once
    return json.loads((calls / f"{cid}{runner.RESULT_SUFFIX}").read_text())


def with_limits(session_plan: runner.SessionPlan, **bounds: int) -> runner.SessionPlan:
    return runner.SessionPlan(
        session_plan.session_id,
        session_plan.mode,
        session_plan.lead,
        session_plan.participants,
        session_plan.brief,
        session_plan.machine_id,
        s.SessionLimits(**bounds),
    )


def run(tmp_path: Path, session_plan: runner.SessionPlan, story: Story) -> list[tuple[str, object, object]]:
    return kinds(play(tmp_path, session_plan, story))


def test_an_announcement_is_a_pulled_board_note_to_every_other_member_counted_against_the_budget(
    tmp_path: Path,
) -> None:
    """Issue 21: "Announce is an explicit, bounded, recorded broadcast note (never automatic, counted against
    a per-session budget)"; delivered as board notes, never pushed into a terminal."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        first = await call(made, "announce", "ann", "switching to Bun 1.2", "a1")
        assert first["result"] == {"id": "a1", "recipients": ["chair", "ben"], "announcementsLeft": 1}
        assert ledger.notes == [
            ("chair", "[announce] ann (session s1): switching to Bun 1.2"),
            ("ben", "[announce] ann (session s1): switching to Bun 1.2"),
        ]
        assert [f["id"] for a, f in ledger.calls if a == "board"] == ["s1.announce.a1.1", "s1.announce.a1.2"]
        # Questions are not notes: no ledger question was opened for the announcement.
        assert not [f for a, f in ledger.calls if a == "ask" and f["from"] != runner.ORCHESTRATOR_NAME]
        repeat = await call(made, "announce", "ann", "switching to Bun 1.2", "a1")
        assert repeat == first and len(ledger.notes) == 2  # a retried call is answered, not sent again
        await call(made, "announce", "chair", "halfway", "a2")
        over = await call(made, "announce", "ben", "one more", "a3")
        assert (over["error"], over["bound"]) == ("bound_exceeded", "announcements"), over
        assert len(ledger.notes) == 4  # the refused one reached nobody
        status = session_files.read_status(made.home, SID)
        assert status is not None
        assert [(a["id"], a["author"]) for a in status["announcements"]] == [("a1", "ann"), ("a2", "chair")]

    steps = run(tmp_path, with_limits(plan(s.Mode.FACILITATE, "ann", "ben"), announcements=2), story)
    assert [k[1] for k in steps if k[1] in ("announcement", "tool_refused")] == [
        "announcement",
        "announcement",
        "tool_refused",
    ]


def test_a_role_without_announce_and_a_key_of_no_member_are_refused(tmp_path: Path) -> None:
    """Spec table role-tools: a judge has only Conclude; a tool its role lacks is `unauthorized`."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        refused = await call(made, "announce", "chair", "the verdict is near", "a1")
        assert (refused["error"], refused["detail"]) == ("unauthorized", "a judge has no announce tool")
        stranger = await call(made, "rollcall", "mallory", cid="r1")
        assert stranger["error"] == "unauthorized" and "not one of session s1's members" in stranger["detail"]
        assert ledger.notes == [] and made._current().announcements == ()

    steps = run(tmp_path, plan(s.Mode.JUDGE), story)
    assert [k[1] for k in steps].count("tool_refused") == 2


def test_rollcall_shows_each_members_screen_the_asks_it_owes_and_its_last_activity(tmp_path: Path) -> None:
    """Issue 21: "RollCall returns each participant's observation (idle, busy, draft, dialog, offline), owed
    asks and last activity"; the observation is the desk's (`agent_show`), an engine with no pane offline."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        ledger.observed.update({"agent-chair": "idle", "agent-ann": "busy", "agent-ben": "settling"})
        ledger.now += 1_000
        asked_at = ledger.now
        ledger.ask("q1", "chair", "ann")
        await made.round()
        gone.add("ben")  # its pane is gone (the runner has not looked yet, so the session still runs)
        ledger.now += 500
        result = (await call(made, "rollcall", "chair", cid="r1"))["result"]
        seen = {
            m["name"]: (m["role"], m["observed"], m["owed"], m["lastActivityAt"]) for m in result["members"]
        }
        assert seen == {
            "chair": ("facilitator", "idle", [], asked_at),  # its ask; a roll call changes nothing
            "ann": ("facilitated_agent", "busy", ["q1"], made._current().started_at),
            "ben": ("facilitated_agent", "offline", [], made._current().started_at),
        }
        ledger.observed["agent-chair"] = None  # nothing seen yet of its terminal
        again = (await call(made, "rollcall", "ann", cid="r2"))["result"]["members"]
        assert again[0]["observed"] == "offline"

    run(tmp_path, plan(s.Mode.FACILITATE, "ann", "ben"), story)


def test_request_for_comment_and_acknowledge_in_a_discuss_session(tmp_path: Path) -> None:
    """Seed 004: "The lead and agents can also call Acknowledge to post brief messages directly to the thread"
    and "RequestForComment ... queues an intent to open a new Discussion thread ... These intents accumulate
    in ctx.rfcs[]. They stay separate from the thread replies in ctx.replies[]." """

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        rfc = await call(made, "rfc", "ann", "Should the daemon own sessions?", "rfc-1")
        assert rfc["result"] == {"id": "rfc-1", "tool": "request_for_comment"}
        lead_rfc = await call(made, "rfc", "chair", "not mine to ask", "rfc-2")
        assert (lead_rfc["error"], lead_rfc["detail"]) == (
            "unauthorized",
            "a discuss_lead has no request_for_comment tool",
        )
        assert (await call(made, "acknowledge", "chair", "noted, thanks", "ack-1"))["result"]["id"] == "ack-1"
        assert (await call(made, "acknowledge", "ann", "on it", "ack-2"))["result"]["id"] == "ack-2"
        empty = await call(made, "acknowledge", "ann", "  ", "ack-3")
        assert (empty["error"], empty["detail"]) == ("bad_request", "acknowledgement is empty")
        status = session_files.read_status(made.home, SID)
        assert status is not None
        assert [(r["id"], r["author"], r["text"]) for r in status["rfcs"]] == [
            ("rfc-1", "ann", "Should the daemon own sessions?")
        ]
        assert [(p["id"], p["kind"], p["author"]) for p in status["thread"]] == [
            ("ack-1", "acknowledge", "chair"),
            ("ack-2", "acknowledge", "ann"),
        ]
        assert ledger.notes == []  # neither is a broadcast

    steps = run(tmp_path, plan(s.Mode.DISCUSS, "ann", "ben"), story)
    assert [k[1] for k in steps if k[1] == "thread_post"] == ["thread_post", "thread_post"]


def test_recess_by_the_discuss_lead_concludes_and_cancels_every_ask_in_flight(tmp_path: Path) -> None:
    """Seed 004: "ctx.concluded is explicit Conclude/Adjourn/Recess. It also cancels in-flight Asks, so askers
    see why nobody will answer their question." Recess is the discuss lead's alone (the seed's role x tool
    table): a participant's is refused and changes nothing."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        ledger.ask("q1", "chair", "ann")
        ledger.ask("q2", "ben", "chair")
        await made.round()
        refused = await call(made, "recess", "ann", "let us stop", "r-ann")
        assert (refused["error"], refused["detail"]) == ("unauthorized", "a discuss_agent has no recess tool")
        assert made._current().state is s.SessionState.RUNNING
        recess = await call(made, "recess", "chair", "back after lunch", "r-1")
        assert recess["result"] == {"id": "r-1", "tool": "recess"}
        ended = made._current()
        assert (ended.termination, ended.reason, ended.summary) == (
            s.Termination.CONCLUDED,
            "recess by chair",
            "back after lunch",
        )
        await made.finish()
        for question_id in ("q1", "q2"):
            asked = ledger.team.exchanges[question_id]
            assert (asked.state.value, asked.reason, asked.answer) == ("cancelled", "recessed", None)
            assert ended.asks[question_id].reason == "session s1 concluded: recess by chair"
        assert ledger.team.exchanges["s1.brief"].state.value == "cancelled"  # the lead owes its brief no more

    steps = run(tmp_path, plan(s.Mode.DISCUSS, "ann", "ben"), story)
    assert [k[1] for k in steps if k[0] == "orchestrator"][-1] == "summary"
    assert ("orchestrator", "tool_refused", None) in steps


def test_recess_is_not_a_facilitators_tool(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        refused = await call(made, "recess", "chair", "pause", "r-1")
        assert (refused["error"], refused["detail"]) == ("unauthorized", "a facilitator has no recess tool")
        assert made._current().state is s.SessionState.RUNNING

    run(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


def test_acknowledge_outside_discuss_mode_is_refused(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        refused = await call(made, "acknowledge", "chair", "ok", "ack-1")
        assert (refused["error"], refused["detail"]) == (
            "unauthorized",
            "a supervisor has no acknowledge tool",
        )

    run(tmp_path, plan(s.Mode.SUPERVISE, "ann"), story)


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"{not json", "not readable JSON"),
        (b"[]", "a call names one tool of"),
        (b'{"tool": "conclude", "keyDigest": "x"}', "a call names one tool of"),
        (b'{"tool": "announce", "keyDigest": 7}', "64 hex digits"),
        (b'{"tool": "announce", "keyDigest": "\\u00e9"}', "64 hex digits"),  # no crash comparing it
        (b'{"tool": "announce", "keyDigest": "' + b"a" * 64 + b'", "text": ["a"]}', "a string 'text'"),
        (b'{"tool": "announce", "keyDigest": "' + b"a" * 64 + b'", "text": "\\ud800"}', "unpaired surrogate"),
        (b'{"tool": "announce", "text": "' + b"x" * runner.CALL_BYTES + b'"}', "larger than"),
        (b"[" * (runner.CALL_BYTES - 1), "nested deeper than"),  # past the parser's recursion limit
        (b'{"tool": "announce", "keyDigest": "' + b"a" * 64 + b'", "n": 1e999}', "out of range"),
    ],
)
def test_a_hostile_call_file_gets_a_one_line_refusal_and_changes_nothing(
    tmp_path: Path, content: bytes, detail: str
) -> None:
    """A call file is the runner's input from a terminal: anything but the shape a command writes is refused
    with `bad_request`, read at most CALL_BYTES, and the session is unchanged."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        calls = session_files.session_dir(made.home, SID) / runner.CALLS_DIR
        before = made._current()
        (calls / f"c1{runner.CALL_SUFFIX}").write_bytes(content)
        (calls / f"..bad name{runner.CALL_SUFFIX}").write_bytes(b"{}")
        await made.round()
        result = json.loads((calls / f"c1{runner.RESULT_SUFFIX}").read_text())
        assert result["error"] == "bad_request" and detail in result["detail"], result
        assert sorted(p.name for p in calls.iterdir()) == [f"c1{runner.RESULT_SUFFIX}"]  # both consumed
        assert made._current() == before and ledger.notes == []

    run(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


ROUND_SECONDS = 30  # a generous deadline for one poll that answers two call files


def release_a_reader_blocked_on(fifo: Path) -> None:
    """Open the FIFO's writing end, without waiting, so a reader blocked opening it goes on (and reads
    nothing); with no reader, or no FIFO left, there is nothing to release."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_call_file_that_is_not_a_regular_file_is_refused_without_stalling_the_daemon(
    tmp_path: Path, kind: str
) -> None:
    """Review finding (r10): "A FIFO (or any non-regular file) placed as a call file in the session's
    `calls/` directory blocks the daemon's event loop: io/session_runner.py does a blocking `path.open` on
    the trio loop with no regular-file check." Such a call (a FIFO nobody writes, a symlink to a call file
    elsewhere, a directory) is refused like any bad call file, within the poll; an honest call left beside
    it is still answered. Were the loop blocked, a watchdog thread releases it only after the deadline,
    so the test fails on the deadline instead of hanging."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        calls = session_files.session_dir(made.home, SID) / runner.CALLS_DIR
        hostile = calls / f"c-evil{runner.CALL_SUFFIX}"
        honest = {"tool": "rollcall", "text": "", "keyDigest": runner.key_digest("key-ann")}
        if kind == "fifo":
            os.mkfifo(hostile, 0o600)
        elif kind == "symlink":
            elsewhere = made.home / "elsewhere.json"
            homes.write_private_json(elsewhere, honest)
            hostile.symlink_to(elsewhere)
        else:
            hostile.mkdir()
        homes.write_private_json(calls / f"c-ok{runner.CALL_SUFFIX}", honest)
        before = made._current()
        watchdog = threading.Timer(ROUND_SECONDS + 1, release_a_reader_blocked_on, (hostile,))
        watchdog.start()
        try:
            with trio.fail_after(ROUND_SECONDS):
                await made.round()
        finally:
            watchdog.cancel()
        refused = json.loads((calls / f"c-evil{runner.RESULT_SUFFIX}").read_text())
        assert refused == {"error": "bad_request", "detail": "the call file is not a regular file"}, refused
        answered = json.loads((calls / f"c-ok{runner.RESULT_SUFFIX}").read_text())
        assert [m["name"] for m in answered["result"]["members"]] == ["chair", "ann"], answered
        assert not hostile.exists() and not hostile.is_symlink()  # refused once, not at every poll
        assert made._current() == before

    run(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


def test_a_result_path_a_member_blocked_leaves_that_call_unanswered_and_the_session_on(
    tmp_path: Path,
) -> None:
    """A helper's reading of the runner: a non-empty directory at `calls/CALL.result.json` made the result's
    write fail with an OSError nothing caught, and the runner task died (failed.json). That call goes
    unanswered; the next is answered."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        calls = session_files.session_dir(made.home, SID) / runner.CALLS_DIR
        honest = {"tool": "rollcall", "text": "", "keyDigest": runner.key_digest("key-ann")}
        blocked = calls / f"c-blocked{runner.RESULT_SUFFIX}"
        blocked.mkdir()
        (blocked / "inside").write_text("x")
        homes.write_private_json(calls / f"c-blocked{runner.CALL_SUFFIX}", honest)
        with trio.fail_after(ROUND_SECONDS):
            await made.round()
        assert not (calls / f"c-blocked{runner.CALL_SUFFIX}").exists()  # taken once, not at every poll
        homes.write_private_json(calls / f"c-ok{runner.CALL_SUFFIX}", honest)
        with trio.fail_after(ROUND_SECONDS):
            await made.round()
        answered = json.loads((calls / f"c-ok{runner.RESULT_SUFFIX}").read_text())
        assert [m["name"] for m in answered["result"]["members"]] == ["chair", "ann"], answered

    run(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


def test_a_session_never_announces_without_an_explicit_call(tmp_path: Path) -> None:
    """Issue 21: "no Announce without an explicit call": asks, answers, a reminder, a release and a
    conclusion send no board note."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ann")
        ledger.ask("q2", "chair", "ben")
        await made.round()
        ledger.reply("q1", "ann")
        for _ in range(4):
            ledger.now += 10_000
            await made.round()
        ledger.reply("s1.brief", "chair", "done")
        await made.round()
        await made.finish()
        assert made._current().violations == ("q2",)

    steps = run(tmp_path, plan(s.Mode.FACILITATE, "ann", "ben"), story)
    assert "announcement" not in [k[1] for k in steps]


@pytest.mark.parametrize("mode", list(s.Mode))
def test_each_introduction_teaches_exactly_its_roles_tools(mode: s.Mode) -> None:
    """Spec table role-tools: an introduction offers a role's tools that have a command, and no other."""
    participants = () if s.MODES[mode][2] is s.Participants.NONE else ("ann",)
    session_plan = plan(mode, *participants)
    started = s.step(None, s.Start(0, SID, mode, "chair", participants))
    assert not isinstance(started, Rejected)
    command = f"{harness_command()} session"
    words = {"announce": s.Tool.ANNOUNCE, "rollcall": s.Tool.ROLL_CALL, "rfc": s.Tool.REQUEST_FOR_COMMENT}
    words |= {"acknowledge": s.Tool.ACKNOWLEDGE, "recess": s.Tool.RECESS}
    for name in ("chair", *participants):
        text = runner.introduction(session_plan, started.state, name, "--home H --key-file K")
        role = started.state.members[name].role
        taught = {word for word in ALL_TOOLS if f"`{command} {word} {SID}" in text}
        assert taught == {word for word, tool in words.items() if tool in s.ROLE_TOOLS[role]}, (role, text)
    assert set(runner.TOOL_USAGE) == set(s.Tool)  # every tool has a command (spec table tool-commands)


def cli(home: Path, *argv: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "session", *argv, "--home", str(home), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize(
    ("argv", "code", "error", "detail"),
    [
        (["announce", "s1", "hi"], 2, "bad_request", "acts as a member"),
        (["announce", "s1", "--key-file", "KEY"], 2, "bad_request", "not both and not neither"),
        (["announce", "s1", "hi", "--text-file", "KEY", "--key-file", "KEY"], 2, "bad_request", "not both"),
        (["rfc", "s1", "hi", "--key-file", "KEY", "--id", "../x"], 2, "bad_request", "--id"),
        (["rollcall", "s1", "--key-file", "KEY", "--wait", "nan"], 2, "bad_request", "--wait"),
        (["rollcall", "../s1", "--key-file", "KEY"], 2, "bad_request", "not a session id"),
        (["rollcall", "nope", "--key-file", "KEY"], 1, "not_found", "no session 'nope'"),
        (["acknowledge", "gone", "ok", "--key-file", "KEY"], 1, "conflict", "is not running"),
        (["recess", "gone", "--key-file", "KEY"], 2, "bad_request", "not both and not neither"),
        (["recess", "gone", "pause", "--key-file", "KEY"], 1, "conflict", "is not running"),
    ],
)
def test_a_session_tool_refuses_bad_input_with_one_line_and_a_stable_code(
    tmp_path: Path, argv: list[str], code: int, error: str, detail: str
) -> None:
    """Bad input is a one-line error with a stable code, never a traceback, and leaves no call behind."""
    home = tmp_path / "home"
    key = tmp_path / "ann.key"
    key.write_text("key-ann\n")
    gone = session_files.session_dir(home, "gone")
    gone.mkdir(parents=True)
    view = {
        **{"sessionId": "gone", "mode": "discuss", "lead": "ann", "trace": "t", "asks": [], "reminders": []},
        **{"violations": [], "state": "running", "pid": 2**22 + 12_345},  # a runner that died
    }
    homes.write_private_json(gone / session_files.STATUS_FILE, view)
    status, result = cli(home, *[str(key) if word == "KEY" else word for word in argv])
    assert (status, result["error"]) == (code, error) and detail in result["detail"], result
    assert not (gone / runner.CALLS_DIR).exists()


def test_a_call_left_as_the_session_ends_is_answered_and_then_calls_are_closed(tmp_path: Path) -> None:
    """Spec table session-gate: announce in `ended` is a conflict; the runner answers what was left before
    it finished, then says in its status that no call will be answered (so a command stops waiting)."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        keys(made)
        ledger.reply("s1.brief", "chair", "done")
        assert (await made.round()).termination is s.Termination.CONCLUDED
        calls = session_files.session_dir(made.home, SID) / runner.CALLS_DIR
        call = {"tool": "announce", "text": "too late", "keyDigest": runner.key_digest("key-ann")}
        homes.write_private_json(calls / f"a1{runner.CALL_SUFFIX}", call)
        status = session_files.read_status(made.home, SID)
        assert status is not None and status["callsClosed"] is False
        await made.finish()
        result = json.loads((calls / f"a1{runner.RESULT_SUFFIX}").read_text())
        assert result["error"] == "conflict" and ledger.notes == [], result
        status = session_files.read_status(made.home, SID)
        assert status is not None and status["callsClosed"] is True

    run(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)
