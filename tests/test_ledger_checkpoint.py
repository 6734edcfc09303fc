# Issue 18: a team's checkpoint (the whole team, up to its 500 exchanges) was encoded on the event loop and
# awaited by the ledger's finisher, so every other team's commits waited for it. It is now encoded in a worker
# thread from the immutable team while the finisher goes on: asks answered meanwhile are appended after the
# seq it covers, survive its compaction and are replayed after it.
from __future__ import annotations

from pathlib import Path

import pytest
import trio

from harness.core.codec import from_json
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import Team
from harness.io import ledger_runner
from harness.io.fileops import FileOps
from harness.io.journal import CheckpointPolicy
from harness.io.journal_files import ledger_store_dir, scan_store
from harness.io.ledger_runner import replay
from tests.journal_support import hold_checkpoint_encoding
from tests.test_daemon import Api, running, team_with_keys

DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine


async def test_asks_are_answered_while_a_team_checkpoint_is_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoding, release = hold_checkpoint_encoding(monkeypatch, ledger_runner, Team, DEADLINE)
    # Default limits: the asks in a row below always fit (the test limits' three open questions might not).
    async with running(tmp_path, DEFAULT_LIMITS, checkpoint_policy=CheckpointPolicy(every=4)) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        asked = 0
        with trio.fail_after(DEADLINE):
            # Asks until a checkpoint starts (the desk's reports of the team's start may start one first).
            while asked == 0 or not encoding.is_set():
                await alice("ask", "t1", id=f"early{asked}", to="bob", text="Which port?")
                asked += 1
        try:
            with trio.fail_after(DEADLINE):  # the checkpoint is blocked in its thread: the ledger is not
                await alice("cancel", "t1", questionId="early0")
                await alice("ask", "t1", id="late", to="bob", text="And the host?")
        finally:
            release.set()
    final = daemon.durable.teams["t1"]  # once stopped: the desk's reports that rode are in the journal too
    assert "late" in final.exchanges

    recovery = scan_store(ledger_store_dir(tmp_path, "t1"), FileOps()).recovery
    assert recovery.checkpoint is not None
    covered = from_json(recovery.checkpoint, Team)
    assert isinstance(covered, Team) and "late" not in covered.exchanges  # as it was when it was taken
    replayed, _ = replay("t1", recovery, DEFAULT_LIMITS)
    assert replayed == final
