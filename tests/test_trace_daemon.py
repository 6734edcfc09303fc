# The daemon writes every team's trace (issue 21, "One trace"): a real daemon with scripted terminals runs
# ask -> delivered -> accepted -> reply -> continuation, and the team's trace under <home>/traces/team-<id>/
# holds those events in seq order, `harness trace summary --team` times them, no member key or owner token
# reaches the trace bytes, a restart continues seq, and a trace that cannot be written stops nothing. The
# trace rides the journals' group commit (issue 18): an ask's lines are in the file before it is answered and
# cost it no fsync, and a daemon SIGKILLed mid-burst leaves a trace that parses and holds every answered ask.
# Run as a module, this file is a daemon that asks nothing of its terminals and waits to be killed.
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.cli.main import run
from harness.core.redaction import Redactor, redactor
from harness.io import home as homes
from harness.io import trace, trace_files
from harness.io.agents import AgentRegistry
from harness.io.board_runner import TRACED_FIELDS
from harness.io.client import Client, ClientError
from harness.io.daemon import Daemon
from harness.io.ledger_runner import END_REASONS
from harness.io.terminal_port import ScreenState
from scripts.bench_ask_cost import Counters
from tests.spec_tables import read_table
from tests.test_daemon import Api, running
from tests.test_desk_runner import (
    TIMING,
    FakeTerminals,
    answer_delivery,
    desk_daemon,
    intro,
    is_,
    local_team,
    question_delivery,
    until,
)
from tests.test_group_commit import BURST, publish_keys, published_keys

WAIT = 30  # seconds: generous, for a loaded two-core machine

S = ScreenState
SPEC = "trace-v1.md"
SECRET_NOTE = "the note text stays on the board"


def _member_ids(daemon: Daemon) -> dict[str, str]:
    team = daemon.durable.teams["t1"]
    return {member.name: member_id for member_id, member in team.members.items()}


def _lines(home: Path) -> list[trace_files.TraceLine]:
    return list(trace_files.read_trace(trace_files.team_trace_dir(home, "t1")))


def _first(lines: list[trace_files.TraceLine], source: str, **fields: object) -> trace_files.TraceLine:
    return next(
        line
        for line in lines
        if line.source == source and all(line.event.get(k) == v for k, v in fields.items())
    )


def _trace_bytes(home: Path) -> bytes:
    files = trace_files.trace_files(trace_files.team_trace_dir(home, "t1"))
    return b"".join(path.read_bytes() for path in files)


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
    assert list(since) == list(trace_files.MILESTONES)
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
    (tmp_path / trace_files.TRACES_DIR).write_text("not a directory")
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
        traces.emit("t1", trace_files.LEDGER, {"type": "tick", "n": n})
    assert traces.view()["queued"] == trace.QUEUE_LIMIT and traces.lost == 5
    async with trio.open_nursery() as nursery:
        nursery.start_soon(traces.run)
        traces.close()
    assert traces.written == trace.QUEUE_LIMIT
    written = [line.seq for line in trace_files.read_trace(trace_files.team_trace_dir(tmp_path, "t1"))]
    assert written == list(range(1, trace.QUEUE_LIMIT + 1))


async def test_the_traces_opened_together_read_the_secrets_once(tmp_path: Path) -> None:
    """A start opens every team's trace at once; each reads the data directory's secrets, which at the
    seed's bounds is every member key of a hundred teams: the opens of one batch share one read."""
    reads: list[int] = []

    def secrets_of_now() -> Redactor:
        reads.append(1)
        return redactor({})

    traces = trace.TeamTraces(tmp_path, secrets_of_now, log=lambda line: None)
    for team_id in ("t1", "t2", "t3"):
        traces.emit(team_id, trace_files.LEDGER, {"type": "tick"})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(traces.run)
        traces.close()
    assert traces.written == 3 and traces.view()["failed"] == {}
    assert len(reads) == 1


def test_daemon_tables_of_the_spec_equal_code() -> None:
    """spec/trace-v1.md's tables of what the daemon writes are the code's."""
    bounds = {row["bound"]: int(row["value"]) for row in read_table(SPEC, "daemon-bounds")}
    assert bounds == {"queue_limit": trace.QUEUE_LIMIT, "sync_delay_ms": trace.SYNC_DELAY_MS}
    reasons = {row["command"]: row["reason"] for row in read_table(SPEC, "question-end-reasons")}
    assert reasons == {command.__name__: reason for command, reason in END_REASONS.items()}
    fields = [(row["field"], row["traced as"]) for row in read_table(SPEC, "board-fields")]
    assert fields == list(TRACED_FIELDS.items())


def _asked(lines: list[trace_files.TraceLine]) -> list[str]:
    asks = (line for line in lines if line.source == "ledger" and line.event["type"] == "ask")
    return [str(line.event["exchangeId"]) for line in asks]


def _desk_holds(daemon: Daemon, question_id: str) -> bool:
    assert daemon.desk is not None
    return any(notice.subject_id == question_id for notice in daemon.desk.desk.notices.values())


async def test_an_ask_costs_the_trace_no_fsync_and_its_lines_are_written_before_it_is_answered(
    tmp_path: Path,
) -> None:
    """Issue 18, "an ask costs one durable append": the trace lines of each batch are in the trace file when
    the ask is answered (ledger) and when its report is recorded (desk), and none of the asks pays a trace
    fsync of its own; the lines are fsynced as one group (here: when the daemon stops)."""
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.BUSY})  # nothing is typed: notices queue
    counters = Counters(tmp_path)  # the bench's own fsync counters, by store
    counters.install()
    try:
        async with desk_daemon(tmp_path, fake) as daemon:
            daemon.traces.sync_delay_ms = 3_600_000  # no timed group fsync falls inside the count
            _, keys = await local_team(daemon)
            alice = await Api.open(daemon, keys["alice"])
            traces = daemon.traces
            await until(lambda: traces.view()["open"] == 1 and traces.view()["queued"] == 0, WAIT)  # direct
            counters.counting = True
            for n in range(3):  # the test limits' pending_per_sender
                await alice("ask", "t1", id=f"q{n}", to="bob", text="Which port?")
                assert f"q{n}" in _asked(_lines(tmp_path)), "answered before its trace line was written"
                # The desk's state and its trace lines change in one step, before the desk reports.
                await until(lambda: _desk_holds(daemon, f"q{n}"), WAIT)  # noqa: B023
                notices = [line for line in _lines(tmp_path) if line.event.get("exchangeId") == f"q{n}"]
                assert any(line.source == "desk" for line in notices), "stepped, not traced"
            asking = dict(counters.counts)
    finally:
        counters.counting = False
        counters.uninstall()
    journals = sum(count for where, count in asking.items() if "journal" in where)
    assert journals >= 3, asking  # each ask's ledger append (its desk submit and report ride)
    assert not [where for where in asking if where.startswith("team trace")], asking
    assert counters.counts["team trace: file"] >= 1  # the group fsync at the stop, counted after the asks
    assert [line.seq for line in _lines(tmp_path)] == list(range(1, len(_lines(tmp_path)) + 1))


async def _daemon_until_killed(home: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.BUSY})
    daemon = Daemon(home, limits=BURST, log=lambda line: None, terminals=lambda r: fake, runner_timing=TIMING)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        _, keys = await local_team(daemon)
        publish_keys(home.parent, keys)
        await trio.sleep_forever()


KILL_AFTER = 20  # answered asks: the daemon is killed the moment the last of them is answered


def _ask_until_killed(socket: Path, key: str, acked: list[str], daemon: subprocess.Popen[bytes]) -> None:
    try:
        with Client(socket) as connection:
            for n in range(400):  # within a team's exchanges: the kill comes long before
                fields = {"id": f"k{n}", "to": "bob", "text": "Which port?"}
                connection.request("ask", team_id="t1", member_key=key, fields=fields, timeout=WAIT)
                acked.append(f"k{n}")
                if len(acked) == KILL_AFTER:
                    daemon.kill()  # SIGKILL, right as the answer arrived: no time for a trace after it
    except ClientError:
        pass  # the daemon was killed: this ask was never answered


async def test_a_sigkilled_daemon_leaves_a_trace_that_parses_and_holds_every_answered_ask(
    tmp_path: Path,
) -> None:
    """"a crash may lose at most the trace lines of a batch whose journal append was not acknowledged": a
    daemon killed amid a burst of asks leaves every answered ask in its trace, the trace parses, a torn last
    line (as a kill inside a write leaves) is skipped, and the restarted daemon continues seq in a new file
    without changing a byte of the old."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-m", "tests.test_trace_daemon", str(home)], cwd=Path.cwd())
    acked: list[str] = []
    asker: threading.Thread | None = None
    try:
        alice = (await published_keys(tmp_path, child, WAIT))["alice"]
        socket = home / homes.SOCKET_FILE
        asker = threading.Thread(target=_ask_until_killed, args=(socket, alice, acked, child))
        asker.start()
        asker.join(WAIT)
        assert not asker.is_alive() and child.wait(WAIT) == -signal.SIGKILL
    finally:
        child.kill()  # no shutdown path ran: nothing was fsynced at a stop
        child.wait(10)
        if asker is not None:
            asker.join(WAIT)
    assert len(acked) == KILL_AFTER

    lines = _lines(home)
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    missing = set(acked) - set(_asked(lines))
    assert not missing, f"answered asks missing from the trace: {sorted(missing)}"
    newest = trace_files.trace_files(trace_files.team_trace_dir(home, "t1"))[-1]
    torn = newest.read_bytes() + b'{"source":"ledger","seq":'
    newest.write_bytes(torn)
    assert _lines(home) == lines

    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.BUSY})

    def terminals(registry: AgentRegistry) -> FakeTerminals:
        return fake

    async with running(home, BURST, terminals=terminals, runner_timing=TIMING) as daemon:
        await (await Api.open(daemon, alice))("ask", "t1", id="after", to="bob", text="Still there?")
    again = _lines(home)
    assert again[: len(lines)] == lines and newest.read_bytes() == torn
    assert [line.seq for line in again] == list(range(1, len(again) + 1))
    (after,) = [line for line in again if line.event.get("exchangeId") == "after" and line.source == "ledger"]
    assert after.seq > lines[-1].seq
    assert trace_files.trace_files(trace_files.team_trace_dir(home, "t1"))[-1] != newest


if __name__ == "__main__":
    trio.run(_daemon_until_killed, Path(sys.argv[1]))
