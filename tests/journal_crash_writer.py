# A victim process for the journal crash test: it recovers a store, then appends from several tasks at once
# (so batches form), checkpoints as it goes (two of three encoded in a worker thread, one of those in parts
# that later checkpoints name again, as the desk's), and prints
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
PART = 256  # log entries per part: a whole part is named again by the next checkpoints


def fold(recovery: Recovery) -> list[str]:
    """The "reducer" of this test: the state is the list of contents, indexed by seq - 1."""
    log: list[str] = []
    if recovery.checkpoint is not None:
        stored = recovery.checkpoint["log"]
        if isinstance(stored, dict):  # a checkpoint in parts: the log's members by index
            stored = [stored[str(index)] for index in range(len(stored))]
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
    whole_parts: dict[int, str] = {}  # a full part of the log (by its first index) and its name
    for name, keys in recovery.parts:  # a start knows the parts it recovered
        if len(keys) == PART and int(keys[0]) % PART == 0:
            whole_parts[int(keys[0])] = name

    def in_parts(covered: list[str]) -> dict[str, object]:
        """The checkpoint of `covered` in parts, written in the worker thread: a part that is full and that
        the store's current checkpoint names is named again, the others are written."""
        numbers = range(0, len(covered), PART)
        fresh = [n for n in numbers if whole_parts.get(n) not in store.parts or n + PART > len(covered)]
        names = store.write_parts(
            len(covered), [{str(i): covered[i] for i in range(n, min(n + PART, len(covered)))} for n in fresh]
        )
        written = dict(zip(fresh, names, strict=True))
        for n, name in written.items():
            if n + PART <= len(covered):
                whole_parts[n] = name
        return {"log": {}, "$parts": {"log": [written.get(n) or whole_parts[n] for n in numbers]}}

    async def checkpoint() -> None:
        nonlocal checkpointing, checkpoints
        while len(log) + 1 in acked:
            log.append(acked.pop(len(log) + 1))
        covered = list(log)
        checkpoints += 1
        try:
            # Two of three are encoded in a worker thread (a callable payload, as the desk's) while the
            # appenders go on, so kills land there too; one of those is in parts.
            payload = (
                (lambda: in_parts(covered))
                if checkpoints % 3 == 1
                else (lambda: {"log": covered})
                if checkpoints % 3 == 2
                else {"log": covered}
            )
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
