# A victim process for the journal crash test: it recovers a store, then appends from several tasks at once
# (so batches form), checkpoints as it goes (every other one encoded in a worker thread), and prints
# "<seq> <content>" only after each append returned.
# The test SIGKILLs it at random moments; a printed line is therefore a promise the store must keep.
#
# usage: python tests/journal_crash_writer.py DIR CYCLE
# It imports everything, says "ready", then waits for one line on stdin, so the test can start the next
# victim while it checks the store left by the previous one.
from __future__ import annotations

import sys
from pathlib import Path

import trio

from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import Recovery

APPENDERS = 4
POLICY = CheckpointPolicy(every=32)


def fold(recovery: Recovery) -> list[str]:
    """The "reducer" of this test: the state is the list of contents, indexed by seq - 1."""
    log: list[str] = []
    if recovery.checkpoint is not None:
        stored = recovery.checkpoint["log"]
        assert isinstance(stored, list)
        log.extend(str(c) for c in stored)
    assert len(log) == recovery.checkpoint_seq
    for entry in recovery.entries:
        assert entry.seq == len(log) + 1
        log.append(str(entry.body["c"]))
    return log


async def main(directory: Path, cycle: str) -> None:
    store, recovery = await JournalStore.open(directory)
    log = fold(recovery)
    acked: dict[int, str] = {}  # acknowledged here but not yet in `log` (acks of one batch arrive unordered)
    checkpointing = False
    checkpoints = 0

    async def checkpoint() -> None:
        nonlocal checkpointing, checkpoints
        while len(log) + 1 in acked:
            log.append(acked.pop(len(log) + 1))
        covered = list(log)
        checkpoints += 1
        try:
            # Every other one is encoded in a worker thread (a callable payload, as the desk's) while the
            # appenders go on, so kills land there too.
            payload = {"log": covered} if checkpoints % 2 else lambda: {"log": covered}
            await store.checkpoint(len(covered), payload)
        finally:
            checkpointing = False

    async def appender(task: int, nursery: trio.Nursery) -> None:
        nonlocal checkpointing
        for i in range(1_000_000):
            content = f"{cycle}-{task}-{i}"
            seq = await store.append({"c": content})
            sys.stdout.write(f"{seq} {content}\n")
            sys.stdout.flush()
            acked[seq] = content
            if POLICY.due(store) and not checkpointing:
                checkpointing = True
                nursery.start_soon(checkpoint)

    async with trio.open_nursery() as nursery:
        for task in range(APPENDERS):
            nursery.start_soon(appender, task, nursery)


if __name__ == "__main__":
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    trio.run(main, Path(sys.argv[1]), sys.argv[2])
