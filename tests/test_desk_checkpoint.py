# Issue 18: a desk checkpoint at its bound (10,000 delivery records) takes a few hundred milliseconds to
# encode, and the desk took one every 256 appends on the event loop, holding the desk. It is now made in a
# worker thread from the immutable desk while the desk goes on: steps taken meanwhile are appended after the
# seq it covers, survive its compaction, and are replayed after it.
from __future__ import annotations

from pathlib import Path

import pytest
import trio

from harness.core import delivery as d
from harness.core.codec import from_json
from harness.core.limits import DEFAULT_LIMITS
from harness.io import desk_parts
from harness.io.desk_runner import replay_desk
from harness.io.fileops import FileOps
from harness.io.journal_files import delivery_store_dir, scan_store
from tests.journal_support import hold_checkpoint_encoding, lone_desk

MACHINE = "m1"

DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine


async def test_steps_go_on_while_the_desk_checkpoint_is_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoding, release = hold_checkpoint_encoding(monkeypatch, desk_parts, d.Desk, DEADLINE)

    runner = lone_desk(tmp_path, MACHINE, every=4)
    home = tmp_path / "home"
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        held = 0
        with trio.fail_after(DEADLINE):
            while not encoding.is_set():  # steps until one starts a checkpoint
                await runner.apply(d.Hold(0, f"early{held}"))
                held += 1
                await trio.sleep(0.01)
        covered = runner.desk
        with trio.fail_after(DEADLINE):  # the checkpoint is blocked in its thread: the desk is not
            for n in range(6):
                await runner.apply(d.Hold(0, f"late{n}"))
        release.set()
        runner.stop()
    final = runner.desk
    assert {f"late{n}" for n in range(6)} <= final.held_teams

    recovery = scan_store(delivery_store_dir(home), FileOps()).recovery
    # The checkpoint is the desk as it was when it was taken; the steps after it are the journal after it.
    assert from_json(recovery.checkpoint, d.Desk) == covered
    assert {e.body["teamId"] for e in recovery.entries} >= {f"late{n}" for n in range(6)}
    assert replay_desk(MACHINE, recovery, DEFAULT_LIMITS) == final
