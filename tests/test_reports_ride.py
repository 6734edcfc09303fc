# A report of this machine's own desk rides the ledger's next durable append (issue 18: an ask costs one
# durable append). The desk made the fact durable in its own journal before reporting it and tells the owner
# every notice's state again at each start, so the ledger's copy needs no fsync of its own; a paired machine's
# report still gets one, since nothing there repeats it when this daemon restarts. What must hold is the old
# promise seen from outside: after SIGKILL the owner's view of a notice is the desk's word again. Run as a
# module, this file is a daemon whose agents stay busy (their notices stay queued); as a test, it kills it.
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from harness.core import delivery as d
from harness.core.records import DeliveryView
from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.desk_runner import prune_desk, replay_desk
from harness.io.fileops import FileOps
from harness.io.journal import CheckpointPolicy
from harness.io.journal_files import delivery_store_dir, ledger_store_dir, scan_store
from harness.io.ledger_runner import LEDGER_QUEUE, LedgerRunner
from harness.io.team_delivery import DeliveryReport
from harness.io.terminal_port import ScreenState
from tests.test_daemon import SMALL, Api, running, team_with_keys
from tests.test_desk_runner import (
    TIMING,
    FakeTerminals,
    desk_daemon,
    intro,
    is_,
    local_team,
    question_delivery,
    until,
)
from tests.test_group_commit import publish_keys, published_keys

BUSY = {"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.BUSY}


def introduced(daemon: Daemon) -> bool:
    return all(m.introduction is not None for m in daemon.durable.teams["t1"].members.values())


def shows(daemon: Daemon, state: str) -> bool:
    view = question_delivery(daemon, "q1")
    return view is not None and view.state == state


def reported(view: DeliveryView | None) -> bool:
    """The owner's view holds the desk's word on the notice, not the one it starts with (owed_view)."""
    return view is not None and (view.state, view.reason) != ("queued", "unobserved")


def recorded_deliveries(home: Path, team_id: str = "t1") -> list[str]:
    """The notice ids of the record_delivery entries on disk in the team's ledger journal, in order."""
    entries = scan_store(ledger_store_dir(home, team_id), FileOps()).recovery.entries
    return [str(e.body["noticeId"]) for e in entries if e.body.get("type") == "record_delivery"]


Fsynced = list[tuple[str, int]]  # (real path, its size when fsynced), in order


@contextmanager
def ledger_fsyncs(monkeypatch: pytest.MonkeyPatch, home: Path, team_id: str = "t1") -> Iterator[Fsynced]:
    """Every fsync of a file in the team's ledger store while the block runs (the real fsync still runs)."""
    with store_fsyncs(monkeypatch, ledger_store_dir(home, team_id)) as seen:
        yield seen


@contextmanager
def store_fsyncs(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Iterator[Fsynced]:
    """Every fsync of a file in `directory` while the block runs (the real fsync still runs)."""
    store = os.path.realpath(directory)
    seen: Fsynced = []
    real = os.fsync

    def counting(fd: int) -> None:
        path = os.path.realpath(f"/proc/self/fd/{fd}")
        if path.startswith(store):
            seen.append((path, os.fstat(fd).st_size))
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "fsync", real)


@asynccontextmanager
async def bob_takes_notices(home: Path) -> AsyncIterator[tuple[Daemon, FakeTerminals, Api, dict[str, str]]]:
    """A daemon whose bob's terminal is idle (his notices are written) and alice's busy, bob introduced: the
    daemon, its terminals, alice's client and the members' keys."""
    fake = FakeTerminals({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.IDLE})
    async with desk_daemon(home, fake) as daemon:
        _, keys = await local_team(daemon)
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        yield daemon, fake, await Api.open(daemon, keys["alice"]), keys


@asynccontextmanager
async def busy_team(home: Path) -> AsyncIterator[tuple[Daemon, Api]]:
    """A daemon whose agents stay busy (notices stay queued), its team t1 introduced, and alice's client."""
    async with running(home, terminals=lambda r: FakeTerminals(BUSY), runner_timing=TIMING) as daemon:
        _, keys = await local_team(daemon)
        await until(lambda: introduced(daemon))
        yield daemon, await Api.open(daemon, keys["alice"])


async def test_this_desks_report_costs_the_ledger_no_fsync_and_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with busy_team(tmp_path) as (daemon, alice):
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        with ledger_fsyncs(monkeypatch, tmp_path) as fsyncs:
            await until(lambda: reported(question_delivery(daemon, "q1")))
        assert fsyncs == [], "the desk's report of q1 had an fsync of its own"
        # Written at once (a reader of the running store sees it; killing the daemon cannot lose it), made
        # durable by the team's next append.
        assert "t1/q1/question" in recorded_deliveries(tmp_path)


async def test_a_paired_machines_report_is_durable_before_the_owner_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing on the paired machine repeats its report when this daemon restarts: it is appended durably."""
    async with busy_team(tmp_path) as (daemon, alice):
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        await until(lambda: reported(question_delivery(daemon, "q1")))
        with ledger_fsyncs(monkeypatch, tmp_path) as fsyncs:
            await daemon.report(DeliveryReport("t1", "t1/q1/question", "delivered", None))
            await until(lambda: shows(daemon, "delivered"))
        assert fsyncs, "a paired machine's report was shown before it was durable"
        assert recorded_deliveries(tmp_path)[-1] == "t1/q1/question"


async def test_the_daemons_own_unpaired_report_rides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notice owed to a machine this daemon has no route to is reported `queued`/`unpaired` by the daemon
    itself, and every start says so again while the owner's view never got past `queued`: the ask's own
    append is the one fsync of the team's journal."""
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine="elsewhere")
        alice = await Api.open(daemon, keys["alice"])
        with ledger_fsyncs(monkeypatch, tmp_path) as fsyncs:
            await alice("ask", "t1", id="q1", to="bob", text="Which port?")
            await until(lambda: is_(question_delivery(daemon, "q1"), "queued", "unpaired"))
        assert len(fsyncs) == 1, fsyncs
        assert recorded_deliveries(tmp_path)[-1] == "t1/q1/question"  # written at once


async def test_the_reports_of_a_desk_batch_reach_the_ledger_without_a_turn_of_the_event_loop(
    tmp_path: Path,
) -> None:
    """A desk batch reports each of its notices; while the ledger's queue has room, reporting does not yield,
    so the ledger task finds the whole batch in one turn and steps it together (one append per team).
    A full queue still waits for room: nothing is dropped."""
    runner = LedgerRunner(tmp_path, SMALL, lambda: 0, checkpoints=CheckpointPolicy(), log=lambda line: None)
    queued = DeliveryReport("t1", "t1/q1/question", "queued", "busy")
    with trio.testing.assert_no_checkpoints():
        for _ in range(LEDGER_QUEUE):
            await runner.report(queued, rides=True)
    reported = trio.Event()

    async def one_more() -> None:
        await runner.report(queued, rides=True)
        reported.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one_more)
        await trio.testing.wait_all_tasks_blocked()
        assert not reported.is_set(), "a report went past a full queue"
        runner._receive.receive_nowait()  # the ledger task takes one: room for the waiting report
        with trio.fail_after(60):
            await reported.wait()


async def test_a_lost_unpaired_report_is_said_again_at_the_next_start(tmp_path: Path) -> None:
    """The daemon's own `queued`/`unpaired` rides: a machine crash may take it (cut here from the journal's
    end), and the next start says it again, since the owner's view never got past `queued`."""
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine="elsewhere")
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        await until(lambda: is_(question_delivery(daemon, "q1"), "queued", "unpaired"))
    assert "t1/q1/question" in drop_trailing_reports(tmp_path)
    async with running(tmp_path) as daemon:
        await until(lambda: is_(question_delivery(daemon, "q1"), "queued", "unpaired"))


async def test_a_riding_end_of_a_write_is_durable_before_the_next_paste(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed: "never repeating an uncertain write". The end of q1's write and its turn ride; q2's
    `write_started` is durable before q2 is pasted, and its fsync covers them: no crash after q2's paste can
    leave q1 `writing` (then `unconfirmed`) while q2 was typed after it."""
    async with bob_takes_notices(tmp_path) as (daemon, fake, alice, _):
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        await until(lambda: is_(question_delivery(daemon, "q1"), "delivered"))
        fake.turned.add("agent-bob")
        await until(lambda: is_(question_delivery(daemon, "q1"), "accepted"))
        fake.turned.discard("agent-bob")
        fake.gate, fake.writing = trio.Event(), trio.Event()
        with store_fsyncs(monkeypatch, delivery_store_dir(tmp_path)) as fsyncs:
            await alice("ask", "t1", id="q2", to="bob", text="Which host?")
            await fake.writing.wait()  # q2 is being pasted
        synced: dict[str, int] = {}
        for path, size in fsyncs:
            synced[path] = max(size, synced.get(path, 0))
        ends = _entry_ends(tmp_path, "t1/q1/question", {"write_finished", "turn_observed"})
        assert len(ends) == 2
        for path, end in ends:
            assert synced.get(path, 0) >= end, "q2 was pasted before q1's end was durable"
        fake.gate.set()


def _entry_ends(home: Path, notice_id: str, types: set[str]) -> list[tuple[str, int]]:
    """(segment, offset just past the line) of the desk journal's entries of `notice_id` of these types."""
    found: list[tuple[str, int]] = []
    for segment in sorted(delivery_store_dir(home).glob("journal-*.jsonl")):
        offset = 0
        for line in segment.read_bytes().split(b"\n")[:-1]:
            offset += len(line) + 1
            entry = json.loads(line)["entry"]
            if entry.get("noticeId") == notice_id and entry.get("type") in types:
                found.append((os.path.realpath(segment), offset))
    return found


async def _busy_daemon(home: Path) -> None:
    daemon = Daemon(
        home,
        limits=SMALL,
        log=lambda line: None,
        terminals=lambda r: FakeTerminals(BUSY),
        runner_timing=TIMING,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        _, keys = await local_team(daemon)
        await until(lambda: introduced(daemon))
        publish_keys(home.parent, keys)
        await trio.sleep_forever()


def _view_of_q1(socket: Path) -> dict[str, object] | None:
    with Client(socket) as owner:
        token = homes.read_owner_token(socket.parent)
        view = owner.request(
            "status", team_id="t1", owner_token=token, fields={"questionId": "q1"}, timeout=60
        )
    delivery = view["delivery"]
    return None if delivery is None else {"state": delivery["state"], "reason": delivery["reason"]}


async def test_a_report_lost_with_a_crash_is_the_desks_word_again_after_the_restart(tmp_path: Path) -> None:
    """Seed: "recoverable after a crash". A report that rides is written at once, so killing the daemon
    loses none; a machine crash before the next fsync can lose it (cut here from the journal's end, as only
    a suffix is ever lost), and then the desk tells it again at the next start: the owner's view is the
    desk's word once more."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-m", "tests.test_reports_ride", str(home)], cwd=Path.cwd())
    socket = home / homes.SOCKET_FILE
    try:
        alice = (await published_keys(tmp_path, child, 60))["alice"]
        with Client(socket) as connection:
            fields = {"id": "q1", "to": "bob", "text": "Which port?"}
            connection.request("ask", team_id="t1", member_key=alice, fields=fields, timeout=60)
        with trio.fail_after(60):
            while (shown := await trio.to_thread.run_sync(_view_of_q1, socket)) in (
                None,
                {"state": "queued", "reason": "unobserved"},
            ):
                assert child.poll() is None, "the daemon died before the desk reported q1"
                await trio.sleep(0.02)
    finally:
        child.kill()  # SIGKILL: no shutdown path runs, nothing that rode is written
        child.wait(10)
    assert "t1/q1/question" in recorded_deliveries(home), "the report was lost with the process"
    assert "t1/q1/question" in drop_trailing_reports(home)  # what a machine crash may take

    async with running(home, terminals=lambda r: FakeTerminals(BUSY), runner_timing=TIMING) as daemon:
        await until(lambda: reported(question_delivery(daemon, "q1")))
        view = question_delivery(daemon, "q1")
        assert view is not None and {"state": view.state, "reason": view.reason} == shown


def drop_trailing_reports(home: Path, team_id: str = "t1") -> list[str]:
    """Cut the record_delivery entries off the end of the team's ledger journal, as a crash loses what rode:
    only ever a suffix. Returns the notice ids of the entries cut."""
    last = sorted(ledger_store_dir(home, team_id).glob("journal-*.jsonl"))[-1]
    lines = last.read_bytes().split(b"\n")[:-1]
    cut: list[str] = []
    while lines and json.loads(lines[-1])["entry"].get("type") == "record_delivery":
        cut.append(str(json.loads(lines.pop())["entry"]["noticeId"]))
    last.write_bytes(b"".join(line + b"\n" for line in lines))
    return cut


async def test_prune_keeps_a_finished_record_whose_report_the_ledger_lost(tmp_path: Path) -> None:
    """A withdrawn notice is finished and owed by no one, but its report rode and was lost with a crash:
    the prune keeps its record, from which the next start tells the owner; once recorded, it may go."""
    async with busy_team(tmp_path) as (daemon, alice):
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        await until(lambda: reported(question_delivery(daemon, "q1")))
        await alice("cancel", "t1", questionId="q1")
        await until(lambda: shows(daemon, "withdrawn"))
    assert "t1/q1/question" in drop_trailing_reports(tmp_path)
    backup = tmp_path / "backup.json"
    kept = await prune_desk(tmp_path, SMALL, 10**13, backup, 10**13)
    assert "t1/q1/question" in replay_desk_here(tmp_path).notices, kept

    async with running(tmp_path, terminals=lambda r: FakeTerminals(BUSY), runner_timing=TIMING) as daemon:
        await until(lambda: shows(daemon, "withdrawn"))  # the desk told it again at its start
    backup.unlink()
    await prune_desk(tmp_path, SMALL, 10**13, backup, 10**13)
    assert "t1/q1/question" not in replay_desk_here(tmp_path).notices


async def test_a_write_whose_end_a_crash_lost_is_unconfirmed_and_never_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed: "recoverable after a crash without repeating an uncertain write". The end of q1's write and
    the turn after it cost the desk no fsync and are in its journal at once (killing the daemon loses
    neither). A machine crash may take them (cut here from the journal's end, after q1's durable
    `write_started`), though the ledger kept `accepted`: after the restart the owner sees `unconfirmed`,
    what the desk can still vouch for, and q1 is not written again while a later question is."""
    async with bob_takes_notices(tmp_path) as (daemon, fake, alice, keys):
        fake.gate, fake.writing = trio.Event(), trio.Event()
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        await fake.writing.wait()  # write_started is durable: the paste is under way
        with store_fsyncs(monkeypatch, delivery_store_dir(tmp_path)) as fsyncs:
            fake.gate.set()
            await until(lambda: is_(question_delivery(daemon, "q1"), "delivered"))
            fake.turned.add("agent-bob")
            await until(lambda: is_(question_delivery(daemon, "q1"), "accepted"))
        assert fsyncs == [], "the end of q1's write or its turn waited for an fsync of the desk"
        assert {"write_finished", "turn_observed"} <= set(desk_entries_of(tmp_path, "t1/q1/question"))
    assert is_(question_delivery(daemon, "q1"), "accepted")  # the ledger kept it
    cut = cut_desk_journal_after_write_started(tmp_path, "t1/q1/question")
    assert {"write_finished", "turn_observed"} <= set(cut)

    again = FakeTerminals({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.IDLE})
    async with desk_daemon(tmp_path, again) as daemon:
        await until(lambda: is_(question_delivery(daemon, "q1"), "unconfirmed", "restart"))
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q2", to="bob", text="Which host?")
        await until(lambda: is_(question_delivery(daemon, "q2"), "delivered"))
        assert [text for text in again.written_to("agent-bob") if "Which port?" in text] == []
        assert is_(question_delivery(daemon, "q1"), "unconfirmed", "restart")


def desk_entries_of(home: Path, notice_id: str) -> list[str]:
    """The types of the desk journal's entries on disk about `notice_id`, in order."""
    entries = scan_store(delivery_store_dir(home), FileOps()).recovery.entries
    return [str(e.body["type"]) for e in entries if e.body.get("noticeId") == notice_id]


def cut_desk_journal_after_write_started(home: Path, notice_id: str) -> list[str]:
    """Cut the desk journal's last file after `notice_id`'s write_started, as a machine crash loses what
    rode: only ever a suffix. Returns the types of the entries cut."""
    last = sorted(delivery_store_dir(home).glob("journal-*.jsonl"))[-1]
    lines = last.read_bytes().split(b"\n")[:-1]
    entries = [json.loads(line)["entry"] for line in lines]
    start = max(
        i
        for i, entry in enumerate(entries)
        if entry.get("type") == "write_started" and entry.get("noticeId") == notice_id
    )
    last.write_bytes(b"".join(line + b"\n" for line in lines[: start + 1]))
    return [str(entry.get("type")) for entry in entries[start + 1 :]]


def replay_desk_here(home: Path) -> d.Desk:
    recovery = scan_store(delivery_store_dir(home), FileOps()).recovery
    return replay_desk(homes.machine_id(home), recovery, SMALL)


if __name__ == "__main__":
    trio.run(_busy_daemon, Path(sys.argv[1]))


async def test_an_ask_whose_journal_append_fails_is_refused_and_nothing_of_it_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger commits a command only once its journal append is durable: when the fsync of the team's
    journal fails, the ask is refused with `corrupt_state`, the team stops, and no notice of it reaches the
    desk (the journaled group's failure path, which no other test runs)."""
    store = os.path.realpath(ledger_store_dir(tmp_path, "t1"))
    real = os.fsync

    def failing(fd: int) -> None:
        if os.path.realpath(f"/proc/self/fd/{fd}").startswith(store):
            raise OSError(5, "EIO")
        real(fd)

    async with busy_team(tmp_path) as (daemon, alice):
        monkeypatch.setattr(os, "fsync", failing)
        refused = await alice.error("ask", "t1", id="q1", to="bob", text="Which port?")
        monkeypatch.setattr(os, "fsync", real)
        assert refused.code == "corrupt_state", refused
        assert "q1" not in daemon.durable.teams["t1"].exchanges
        assert daemon.desk is not None and "t1/q1/question" not in daemon.desk.desk.notices
        again = await alice.error("ask", "t1", id="q2", to="bob", text="Still there?")
        assert again.code == "corrupt_state"  # the team is stopped
