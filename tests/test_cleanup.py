# Issue 16 item 13's explicit cleanup, safe by construction, against real daemon processes: `team delete`
# only of an archived team with a current export, and the desk prune that writes a backup first and keeps
# every receipt a restart needs to not deliver a notice twice. Both run while the daemon is stopped.
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core import delivery as d
from harness.core.codec import desk_command_to_json
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind
from harness.io import home as homes
from harness.io.desk_runner import prune_desk, replay_desk
from harness.io.journal import JournalStore
from harness.io.journal_files import (
    Entry,
    Recovery,
    delivery_store_dir,
    ledger_store_dir,
    scan_store_consistent,
)
from tests import test_cli_e2e as e2e

WAIT = 60.0  # generous: a loaded two-core machine


def eventually(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling the daemon's files and answers: nothing announces these to a client


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[], e2e.Daemon]]:
    monkeypatch.setattr(e2e, "LIMITS", {**e2e.LIMITS, "teams": 1})
    daemons: list[e2e.Daemon] = []

    def start() -> e2e.Daemon:
        daemon = e2e.Daemon(tmp_path / "home")
        daemon.start()
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(10)
        daemon.close_pipes()


def _create(home: Path, tmp_path: Path, team_id: str) -> tuple[int, Any]:
    info = homes.read_daemon_info(home)
    assert info is not None
    members = [{"machineId": info["machineId"], "agentId": name, "name": name} for name in ("alice", "bob")]
    team_file = tmp_path / f"{team_id}.json"
    team_file.write_text(json.dumps({"id": team_id, "name": "Build", "members": members}))
    return e2e.cli(home, "team", "--home", str(home), "create", "--file", str(team_file))


def _delete(home: Path) -> tuple[int, Any]:
    return e2e.team(home, "delete")


def _export(home: Path, out: Path) -> Any:
    return e2e.ok(e2e.team(home, "export", "--out", str(out)))


def test_delete_needs_a_stopped_daemon_an_archive_and_a_current_export(
    started: Callable[[], e2e.Daemon], tmp_path: Path
) -> None:
    """Seed: the owner "can never create another" team at the teams bound, and background retention
    deletion is ruled out: a person's delete frees the slot, only for an archived team and only after an
    export of all of it was written; each refusal names the step missing."""
    home = tmp_path / "home"
    daemon = started()
    e2e.ok(_create(home, tmp_path, "t1"))
    e2e.error(_delete(home), 1, "stop_daemon_first")
    daemon.terminate()

    e2e.error(_delete(home), 1, "archive_first")
    early = _export(home, tmp_path / "early.json")  # an export, but of the active team
    daemon = started()
    e2e.ok(e2e.team(home, "archive"))
    full = e2e.error(_create(home, tmp_path, "t2"), 1, "bound_exceeded")
    assert "teams" in full["detail"]  # the archived team still holds the one slot
    daemon.terminate()

    stale = e2e.error(_delete(home), 1, "export_first")
    assert f"holds entry {early['lastSeq']}" in stale["detail"]
    gone = tmp_path / "gone.json"
    _export(home, gone)
    gone.unlink()  # the backup the note names is no longer there: no delete on its word
    assert "cannot be read" in e2e.error(_delete(home), 1, "export_first")["detail"]
    assert ledger_store_dir(home, "t1").is_dir() and (home / "keys" / "t1").is_dir()

    kept = tmp_path / "kept.json"
    current = _export(home, kept)
    deleted = e2e.ok(_delete(home))
    assert (deleted["deleted"], deleted["export"], deleted["lastSeq"]) == (
        "t1",
        str(kept),
        current["lastSeq"],
    )
    assert not ledger_store_dir(home, "t1").exists() and not (home / "keys" / "t1").exists()
    assert json.loads(kept.read_text())["lastSeq"] == current["lastSeq"]  # the backup stays the person's
    e2e.error(_delete(home), 1, "not_found")

    daemon = started()
    assert e2e.ok(e2e.cli(home, "team", "--home", str(home), "list"))["teams"] == []
    e2e.ok(_create(home, tmp_path, "t2"))  # the teams bound (1) has room again
    # Notice ids derive from the team id, and t1's receipts may stay on the desk: its id is not reused.
    assert "deleted here" in e2e.error(_create(home, tmp_path, "t1"), 1, "conflict")["detail"]
    assert "invariant" not in daemon.terminate()


def _replayed(home: Path, recovery: Recovery) -> d.Desk:
    return replay_desk(homes.machine_id(home), recovery, DEFAULT_LIMITS)


def _desk(home: Path) -> d.Desk:
    """This machine's desk as its store holds it now (read-only; safe beside a running daemon)."""
    return _replayed(home, scan_store_consistent(delivery_store_dir(home)).recovery)


def _backup(home: Path, path: Path) -> d.Desk:
    """The desk a backup (a store export) holds."""
    saved = json.loads(path.read_text())
    assert saved["format"] == "harness.store-export"
    checkpoint = saved["checkpoint"] or {"seq": 0, "payload": None}
    entries = tuple(Entry(entry["seq"], entry["entry"]) for entry in saved["entries"])
    return _replayed(home, Recovery(checkpoint["seq"], checkpoint["payload"], entries))


def _view(home: Path, question: str) -> Any:
    exchanges = e2e.ok(e2e.team(home, "status"))["exchanges"]
    return next(e for e in exchanges if e["id"] == question)["delivery"]


def test_prune_backs_up_first_and_keeps_every_receipt_a_restart_needs(
    started: Callable[[], e2e.Daemon], tmp_path: Path
) -> None:
    """Seed: a desk that "has held 10,000 delivery records rejects every later notice for good"; a person's
    prune of finished records older than a date writes a backup first and never removes the receipt of an
    `unconfirmed`, `writing` or still owed notice (the evidence that prevents a duplicate delivery)."""
    home = tmp_path / "home"
    daemon = started()
    e2e.ok(_create(home, tmp_path, "t1"))
    alice = e2e.ok(e2e.team(home, "key", "alice"))["memberKey"]
    bob = e2e.ok(e2e.team(home, "key", "bob"))["memberKey"]
    e2e.ok(e2e.team(home, "ask", "bob", "still open, read", "--id", "q1", key=alice))
    e2e.ok(e2e.team(home, "inbox", key=bob))  # bob reads q1: its unsent notice is withdrawn, q1 stays open
    e2e.ok(e2e.team(home, "ask", "bob", "answered", "--id", "q2", key=alice))
    e2e.ok(e2e.team(home, "reply", "q2", "done", key=bob))
    eventually(lambda: _view(home, "q1")["state"] == "withdrawn", "q1's notice withdrawn (read)")
    eventually(lambda: _view(home, "q2")["state"] == "withdrawn", "q2's notice withdrawn (answered)")
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86_400))
    e2e.error(
        e2e.cli(home, "daemon", "prune", "--home", str(home), "--before", tomorrow), 1, "stop_daemon_first"
    )
    daemon.terminate()
    before = _desk(home)  # once stopped: the owner's requests ride the desk's next append until then
    q1 = before.notices["t1/q1/question"]
    assert (q1.state, q1.reason) == (d.DeliveryState.WITHDRAWN, d.Reason.INBOX)

    e2e.error(
        e2e.cli(home, "daemon", "prune", "--home", str(home), "--before", "last week"), 2, "bad_request"
    )
    backup = tmp_path / "desk-backup.json"
    args = ("daemon", "prune", "--home", str(home), "--before", tomorrow, "--backup", str(backup))
    pruned = e2e.ok(e2e.cli(home, *args))
    # Only q2's question notice: finished and owed by nothing. q1's is finished too, but the open q1 still
    # owes it (a restart restates it); the introductions and q2's answer notice are queued work.
    assert (pruned["pruned"], pruned["kept"]) == (1, len(before.notices) - 1)
    after = _desk(home)
    assert set(before.notices) - set(after.notices) == {"t1/q2/question"}
    assert backup.stat().st_mode & 0o777 == 0o600
    assert _backup(home, backup).notices == before.notices  # written first, of everything pruned too
    again = (*args[:4], "--before", "2000-01-01", "--backup", str(tmp_path / "second.json"))
    assert e2e.ok(e2e.cli(home, *again))["pruned"] == 0  # nothing that old

    daemon = started()  # restates every notice t1 owes, q1's question notice among them
    status = ("daemon", "status", "--home", str(home))
    eventually(lambda: e2e.ok(e2e.cli(home, *status))["restatingTeams"] == 0, "the restatement to finish")
    e2e.ok(e2e.team(home, "ask", "bob", "after the restart", "--id", "q3", key=alice))
    # The desk's word on q3 (it took q3 after the restatement): its submit rides the desk's next append, so
    # the desk's journal holds it once the daemon has stopped.
    eventually(lambda: _view(home, "q3")["reason"] != "unobserved", "the desk to take q3")
    assert "invariant" not in daemon.terminate()  # the pruned desk holds every desk invariant
    restarted = _desk(home)
    assert "t1/q3/question" in restarted.notices
    assert restarted.notices["t1/q1/question"] == after.notices["t1/q1/question"]  # known: not queued again
    assert "t1/q2/question" not in restarted.notices  # nothing owes it: never submitted again


def _submit(at: int, machine: str, team_id: str, subject: str) -> d.Submit:
    notice_id = f"{team_id}/{subject}/question"
    return d.Submit(at, team_id, notice_id, NoticeKind.QUESTION, subject, "m1", machine, "a1", 10**12, "hi")


def test_prune_never_drops_a_write_in_flight_or_a_team_it_cannot_vouch_for(tmp_path: Path) -> None:
    """Seed: the prune "never removes the receipt of an `unconfirmed`, `writing` or still owed notice". A
    desk whose daemon died mid-write (`writing`), of a team deleted here (nothing owes its notices), keeps
    that receipt while its withdrawn one goes; a team owned on another machine keeps every record (its
    owner may restate them)."""
    home = homes.ensure_home(tmp_path / "home")
    machine = homes.machine_id(home)
    commands = [
        _submit(10, machine, "gone", "q1"),
        _submit(11, machine, "gone", "q2"),
        _submit(12, machine, "theirs", "q3"),
        d.Observe(20, "a1", d.Observed.IDLE),
        d.WriteStarted(21, "gone/q1/question", d.Observed.IDLE, 20),
        d.Withdraw(22, "gone/q2/question"),
        d.Withdraw(23, "theirs/q3/question"),
    ]

    async def write_desk() -> None:
        store, _ = await JournalStore.open(delivery_store_dir(home))
        async with store:
            for command in commands:
                await store.append(desk_command_to_json(command))

    trio.run(write_desk)
    homes.note_deleted_team(home, "gone", 30)
    states = {notice_id: notice.state.value for notice_id, notice in _desk(home).notices.items()}
    assert states == {
        "gone/q1/question": "writing",
        "gone/q2/question": "withdrawn",
        "theirs/q3/question": "withdrawn",
    }

    result = trio.run(prune_desk, home, DEFAULT_LIMITS, 10**12, tmp_path / "backup.json", 40)
    assert (result["pruned"], result["kept"]) == (1, 2)
    after = _desk(home)
    assert set(after.notices) == {"gone/q1/question", "theirs/q3/question"}
    assert after.notices["gone/q1/question"].state is d.DeliveryState.UNCONFIRMED  # the restart said so


def test_a_team_id_that_is_a_path_removes_nothing(started: Callable[[], e2e.Daemon], tmp_path: Path) -> None:
    """Hostile input: a --team that is a path (`/tmp` would be joined as itself) or climbs out of the
    ledgers names directories to remove and a note to write; it is refused as no team id, and every store
    stays."""
    home = tmp_path / "home"
    daemon = started()
    e2e.ok(_create(home, tmp_path, "t1"))
    e2e.ok(e2e.team(home, "archive"))
    daemon.terminate()
    for hostile in ("../ledgers/t1", "/tmp"):
        args = ("team", "--home", str(home), "--team", hostile)
        e2e.error(e2e.cli(home, *args, "delete"), 1, "bad_request")
        e2e.error(e2e.cli(home, *args, "export", "--out", str(tmp_path / "x.json")), 1, "not_found")
    assert ledger_store_dir(home, "t1").is_dir() and delivery_store_dir(home).is_dir()
    assert not (home / homes.EXPORTS_DIR).exists() and not (tmp_path / "x.json").exists()


def test_export_names_what_is_missing_and_writes_no_note(
    started: Callable[[], e2e.Daemon], tmp_path: Path
) -> None:
    """A data directory that is a file has no ledger (not_found, not a crash: the CLI fuzz found
    `NotADirectoryError` there), and a backup that cannot be written is an `io_error` that names the file,
    not "no ledger", and leaves no export note behind for `team delete` to trust."""
    home = tmp_path / "home"
    started()
    e2e.ok(_create(home, tmp_path, "t1"))
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    out = tmp_path / "x.json"
    e2e.error(
        e2e.cli(home, "team", "--home", str(a_file), "--team", "t1", "export", "--out", str(out)),
        1,
        "not_found",
    )
    unwritable = tmp_path / "missing" / "x.json"
    missing = e2e.cli(home, "team", "--home", str(home), "--team", "t1", "export", "--out", str(unwritable))
    e2e.error(missing, 1, "io_error")
    assert not (home / homes.EXPORTS_DIR).exists() and not out.exists()
    e2e.error(e2e.cli(home, "doctor", "--home", str(a_file)), 2, "bad_request")
