# Kill a real writer process with SIGKILL at random moments, hundreds of times, and hold the store to every
# acknowledgement it printed: each acknowledged entry is recovered at its seq, nothing appears twice, and the
# store always opens. Checkpoints and compaction run inside the loop, so kills land in them too. A batch is
# one write(2), which SIGKILL tears only rarely (between pages), so every TEAR_EVERY-th kill also leaves what
# a torn write leaves, a prefix of the next record, and the next victim must recover past it.
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from harness.io.fileops import FileOps
from harness.io.journal import JournalStore
from harness.io.journal_files import encode_record, scan_store
from tests.journal_crash_writer import fold

WRITER = Path(__file__).with_name("journal_crash_writer.py")
KILLS = 210
MAX_DELAY_S = 0.03
ACKS_AWAITED = 3  # before the random delay, a kill waits for 0..ACKS_AWAITED acknowledgements
PRESTARTED = 2
TEAR_EVERY = 10


def _spawn(directory: Path, cycle: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(directory), f"c{cycle}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _acks(out: bytes) -> list[tuple[int, str]]:
    # A line cut by the kill is not a complete acknowledgement: only whole lines count.
    lines = out.split(b"\n")[:-1]
    return [(int(seq), content.decode()) for seq, content in (line.split(b" ", 1) for line in lines)]


@pytest.mark.slow
def test_sigkill_loop_keeps_every_acknowledged_entry(
    tmp_path: Path, record_property: Callable[[str, object], None], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "store"
    rng = random.Random(int.from_bytes(os.urandom(4)))
    acked: dict[int, str] = {}
    kills = killed_in_checkpoint = torn_seen = torn_made = recovered_in_parts = stray_parts = 0
    started = time.monotonic()
    # Python and trio take longer to start than a cycle lasts, so victims start two cycles ahead.
    spares = deque(_spawn(directory, cycle) for cycle in range(PRESTARTED))
    victim = spares[0]
    try:
        for cycle in range(KILLS):
            victim = spares.popleft()
            assert victim.stdin is not None and victim.stdout is not None
            assert victim.stdout.readline() == b"ready\n", victim.communicate()[1].decode()
            victim.stdin.write(b"go\n")
            victim.stdin.flush()
            # Die after a random number of acknowledgements (a loaded machine, which slows the writer, still
            # leaves acknowledged entries to check), then at a random moment: not a synchronization.
            early = b"".join(victim.stdout.readline() for _ in range(rng.randint(0, ACKS_AWAITED)))
            time.sleep(rng.uniform(0, MAX_DELAY_S))
            victim.send_signal(signal.SIGKILL)
            out, err = victim.communicate()
            out = early + out
            assert victim.returncode == -signal.SIGKILL, err.decode()
            kills += 1
            spares.append(_spawn(directory, cycle + PRESTARTED))

            for seq, content in _acks(out):
                assert acked.setdefault(seq, content) == content, f"seq {seq} acknowledged twice"
            if not directory.exists():
                continue  # killed before it created anything
            scan = scan_store(directory, FileOps())
            if cycle % TEAR_EVERY == 0 and scan.segments and scan.segments[-1].torn_offset is None:
                record = encode_record("entry", scan.recovery.last_seq + 1, {"c": "never acknowledged"})
                with (directory / scan.segments[-1].name).open("ab") as segment:
                    segment.write(record[: len(record) // 2])
                torn_made += 1
                scan = scan_store(directory, FileOps())
            killed_in_checkpoint += bool(scan.temp_files)
            recovered_in_parts += bool(scan.parts)
            stray_parts += bool(scan.stray_parts)
            torn_seen += any(s.torn_offset is not None for s in scan.segments)
            log = fold(scan.recovery)
            duplicates = [c for c, n in Counter(log).items() if n > 1]
            assert not duplicates, f"after kill {kills}: entries recovered twice: {duplicates[:5]}"
            lost = [(seq, c) for seq, c in acked.items() if seq > len(log) or log[seq - 1] != c]
            assert not lost, f"after kill {kills}: acknowledged entries lost or moved: {lost[:5]}"
    finally:
        for process in {victim, *spares}:
            process.kill()
            process.communicate()

    async def reopen() -> int:
        store, recovery = await JournalStore.open(directory)
        await store.aclose()
        return recovery.checkpoint_seq

    checkpoint_seq = trio.run(reopen)
    summary = (
        f"{kills} SIGKILLs, {len(acked)} acknowledged entries checked, {killed_in_checkpoint} kills left a "
        f"checkpoint temp file, {recovered_in_parts} recovered a checkpoint in parts, {stray_parts} left a "
        f"part no checkpoint names, {torn_made} torn tails made, {torn_seen} checks saw one, "
        f"final checkpoint seq {checkpoint_seq}, "
        f"{time.monotonic() - started:.1f} s"
    )
    with capsys.disabled():  # shown with or without -s
        print(f"\n{summary}")
    record_property("crash_summary", summary)
    assert kills >= 200 and len(acked) > kills, summary
    assert checkpoint_seq > 0, summary
    # The paths the loop is for were taken: kills inside a checkpoint, and recoveries past a torn tail.
    assert killed_in_checkpoint >= 1 and recovered_in_parts >= 1, summary
    assert torn_made >= KILLS // TEAR_EVERY // 2 and torn_seen >= torn_made, summary
