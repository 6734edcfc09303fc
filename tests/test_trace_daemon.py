# The daemon writes every team's trace (issue 21, "One trace"): a real daemon with scripted terminals runs
# ask -> delivered -> accepted -> reply -> continuation, and the team's trace under <home>/traces/team-<id>/
# holds those events in seq order, `harness trace summary --team` times them, no member key or owner token
# reaches the trace bytes, a restart continues seq, and a trace that cannot be written stops nothing.
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.cli.main import run
from harness.core.redaction import redactor
from harness.io import home as homes
from harness.io import trace
from harness.io.board_runner import TRACED_FIELDS
from harness.io.daemon import Daemon
from harness.io.ledger_runner import END_REASONS
from harness.io.terminal_port import ScreenState
from tests.spec_tables import read_table
from tests.test_daemon import Api
from tests.test_desk_runner import (
    FakeTerminals,
    answer_delivery,
    desk_daemon,
    intro,
    is_,
    local_team,
    question_delivery,
    until,
)

WAIT = 30  # seconds: generous, for a loaded two-core machine

S = ScreenState
SPEC = "trace-v1.md"
SECRET_NOTE = "the note text stays on the board"


def _member_ids(daemon: Daemon) -> dict[str, str]:
    team = daemon.durable.teams["t1"]
    return {member.name: member_id for member_id, member in team.members.items()}


def _lines(home: Path) -> list[trace.TraceLine]:
    return list(trace.read_trace(trace.team_trace_dir(home, "t1")))


def _first(lines: list[trace.TraceLine], source: str, **fields: object) -> trace.TraceLine:
    return next(
        line
        for line in lines
        if line.source == source and all(line.event.get(k) == v for k, v in fields.items())
    )


def _trace_bytes(home: Path) -> bytes:
    return b"".join(path.read_bytes() for path in trace.trace_files(trace.team_trace_dir(home, "t1")))


async def test_the_daemon_traces_an_exchange_in_seq_order_and_summary_times_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """"the team's trace then holds those events in seq order, `harness trace summary --team T --home H
    --json` prints the timings for that exchange, and a member key or the owner token never appears in the
    trace bytes; a daemon restart continues seq"."""
    fake = FakeTerminals({"agent-alice": S.IDLE, "agent-bob": S.IDLE})
    fake.turned.update({"agent-alice", "agent-bob"})  # every pasted notice is taken up as a turn
    async with desk_daemon(tmp_path, fake) as daemon:
        owner, keys = await local_team(daemon)
        ids = _member_ids(daemon)
        await until(lambda: all(is_(intro(daemon, name), "accepted") for name in ("alice", "bob")), WAIT)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="Which endpoint?")
        await until(lambda: is_(question_delivery(daemon, "q1"), "accepted"), WAIT)
        await bob("reply", "t1", questionId="q1", text="GET /state")
        await until(lambda: is_(answer_delivery(daemon, "q1"), "accepted"), WAIT)
        note = {"type": "send_note", "to": {"kind": "member", "name": "bob"}, "text": SECRET_NOTE}
        await alice("board", "t1", command=note)
        await until(lambda: daemon.traces.view()["queued"] == 0 and daemon.traces.written > 0, WAIT)
        status = await owner("daemon_status")
        assert status["traces"]["lost"] == 0 and status["traces"]["failed"] == {}
        token = homes.read_owner_token(tmp_path)

    lines = _lines(tmp_path)
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    asked = _first(lines, "ledger", type="ask", exchangeId="q1")
    assert (asked.event["memberId"], asked.event["to"]) == (ids["alice"], ids["bob"])
    assert asked.event["teamId"] == "t1"
    delivered = _first(lines, "desk", type="notice", exchangeId="q1", kind="question", state="delivered")
    accepted = _first(lines, "desk", type="notice", exchangeId="q1", kind="question", state="accepted")
    assert delivered.event["memberId"] == accepted.event["memberId"] == ids["bob"]
    replied = _first(lines, "ledger", type="reply", exchangeId="q1")
    assert replied.event["memberId"] == ids["bob"]
    ended = _first(lines, "ledger", type="question_ended", exchangeId="q1")
    assert ended.event["state"] == "answered" and "reason" not in ended.event
    continuation = _first(lines, "desk", type="notice", exchangeId="q1", kind="answer", state="accepted")
    assert continuation.event["memberId"] == ids["alice"]
    steps = [asked, delivered, accepted, replied, continuation]
    assert [line.seq for line in steps] == sorted(line.seq for line in steps)
    assert _first(lines, "desk", type="notice", kind="introduction", memberId=ids["bob"], state="accepted")
    assert _first(lines, "ledger", type="member_added", memberId=ids["alice"])
    sent = _first(lines, "board", type="send_note")
    assert sent.event["memberId"] == ids["alice"]
    assert sent.event["to"] == {"kind": "member", "name": ids["bob"]}

    data = _trace_bytes(tmp_path)
    assert not any(key.encode() in data for key in keys.values())
    assert token.encode() not in data
    assert SECRET_NOTE.encode() not in data and b"Which endpoint?" not in data and b"GET /state" not in data

    capsys.readouterr()
    assert run(["trace", "summary", "--team", "t1", "--home", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (exchange,) = result["exchanges"]
    assert (exchange["exchangeId"], exchange["state"]) == ("q1", "answered")
    assert (exchange["asker"], exchange["to"]) == (ids["alice"], ids["bob"])
    since = exchange["sinceAsk"]
    assert list(since) == list(trace.MILESTONES)
    assert list(since.values()) == sorted(since.values()) and since["asked"] == 0
    assert exchange["at"]["asked"] == asked.event["at"]
    assert run(["trace", "query", "--team", "t1", "--home", str(tmp_path), "--type", "reply", "--json"]) == 0
    assert [line["seq"] for line in json.loads(capsys.readouterr().out)["lines"]] == [replied.seq]

    last = lines[-1].seq
    async with desk_daemon(tmp_path, fake) as daemon:
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q2", to="bob", text="And the port?")
        await until(lambda: is_(question_delivery(daemon, "q2"), "accepted"), WAIT)
    again = _lines(tmp_path)
    assert [line.seq for line in again] == list(range(1, len(again) + 1))
    assert again[: len(lines)] == lines  # nothing written before the restart changed
    assert _first(again, "ledger", type="ask", exchangeId="q2").seq > last


def test_trace_needs_exactly_one_of_path_and_team(tmp_path: Path) -> None:
    assert run(["trace", "summary", "--json"]) == 2
    assert run(["trace", "summary", str(tmp_path), "--team", "t1", "--json"]) == 2
    assert run(["trace", "summary", "--team", "../t1", "--home", str(tmp_path), "--json"]) == 2
    assert run(["trace", "summary", "--team", "t1", "--home", str(tmp_path), "--json"]) == 1  # none yet


async def test_a_trace_that_cannot_be_written_stops_no_team_operation(tmp_path: Path) -> None:
    """"a trace write failure must not fail or slow a team operation — it is logged once and counted in
    daemon_status": the traces directory is a file, so no team trace can be opened."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / trace.TRACES_DIR).write_text("not a directory")
    logged: list[str] = []
    fake = FakeTerminals({"agent-alice": S.IDLE, "agent-bob": S.IDLE})
    fake.turned.update({"agent-alice", "agent-bob"})
    async with desk_daemon(tmp_path, fake) as daemon:
        daemon.traces._log = logged.append  # the daemon's log, seen by the test rather than swallowed
        owner, keys = await local_team(daemon)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="Which endpoint?")
        await until(lambda: is_(question_delivery(daemon, "q1"), "accepted"), WAIT)
        assert (await bob("reply", "t1", questionId="q1", text="GET /state"))["state"] == "answered"
        await until(lambda: "t1" in daemon.traces.failed, WAIT)
        status: dict[str, Any] = (await owner("daemon_status"))["traces"]
        assert status["written"] == 0 and status["lost"] > 0 and list(status["failed"]) == ["t1"]
    assert len([line for line in logged if line.startswith("trace of team t1")]) == 1


async def test_emit_only_queues_and_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    """The trace is never on the critical path: `emit` does not wait, and a burst past the bound is counted,
    not held."""
    traces = trace.TeamTraces(tmp_path, lambda: redactor({}), log=lambda line: None)
    for n in range(trace.QUEUE_LIMIT + 5):
        traces.emit("t1", trace.LEDGER, {"type": "tick", "n": n})
    assert traces.view()["queued"] == trace.QUEUE_LIMIT and traces.lost == 5
    async with trio.open_nursery() as nursery:
        nursery.start_soon(traces.run)
        traces.close()
    assert traces.written == trace.QUEUE_LIMIT
    written = [line.seq for line in trace.read_trace(trace.team_trace_dir(tmp_path, "t1"))]
    assert written == list(range(1, trace.QUEUE_LIMIT + 1))


def test_daemon_tables_of_the_spec_equal_code() -> None:
    """spec/trace-v1.md's tables of what the daemon writes are the code's."""
    bounds = {row["bound"]: int(row["value"]) for row in read_table(SPEC, "daemon-bounds")}
    assert bounds == {"queue_limit": trace.QUEUE_LIMIT}
    reasons = {row["command"]: row["reason"] for row in read_table(SPEC, "question-end-reasons")}
    assert reasons == {command.__name__: reason for command, reason in END_REASONS.items()}
    fields = [(row["field"], row["traced as"]) for row in read_table(SPEC, "board-fields")]
    assert fields == list(TRACED_FIELDS.items())
