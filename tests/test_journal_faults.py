# Faults injected through the FileOps seam: EIO from fsync, ENOSPC, short writes, a failed rename, a crash
# at every step of a checkpoint, and one damaged byte anywhere in a journal or checkpoint. Every case must
# end as "not acknowledged" (and a store that refuses further writes) or as corrupt_state with the bytes
# preserved -- never as a silently emptied or shortened store.
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io.journal import JournalStore
from harness.io.journal_files import CorruptState, StoreFailed, checkpoint_name, segment_name
from tests.journal_support import Crash, FaultyOps, bodies, fill, os_error, snapshot, state


def _fail_on(op: str, exc: Exception, *, after: int = 0) -> FaultyOps:
    """A FileOps that raises `exc` from the (after+1)-th call of `op` (`"any"`: every operation) made
    once it is armed."""
    seen = 0

    def hook(name: str, args: tuple[object, ...]) -> None:
        nonlocal seen
        if op in (name, "any"):
            seen += 1
            if seen > after:
                raise exc

    ops = FaultyOps(hook)
    ops.armed = False
    return ops


async def _three_concurrent_appends(store: JournalStore) -> list[BaseException | int]:
    results: list[BaseException | int] = []

    async def one(i: int) -> None:
        try:
            results.append(await store.append({"late": i}))
        except StoreFailed as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    return results


async def _assert_refuses_writes(store: JournalStore) -> None:
    assert store.failed is not None
    with pytest.raises(StoreFailed):
        await store.append({"after": "failure"})
    with pytest.raises(StoreFailed):
        await store.checkpoint(store.durable_seq, {"items": []})
    await store.aclose()


@pytest.mark.parametrize("op, code", [("fsync", errno.EIO), ("write", errno.ENOSPC)])
async def test_io_error_fails_the_batch_and_stops_the_store(tmp_path: Path, op: str, code: int) -> None:
    directory = tmp_path / "s"
    acked = await fill(directory, 3)
    ops = _fail_on(op, os_error(code))
    store, _ = await JournalStore.open(directory, ops=ops)
    ops.armed = True
    results = await _three_concurrent_appends(store)
    failures = [r for r in results if isinstance(r, StoreFailed)]
    assert len(failures) == 3 and all(isinstance(r.__cause__, (OSError, StoreFailed)) for r in failures)
    await _assert_refuses_writes(store)

    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    got = bodies(recovery)
    assert got[:3] == acked  # every acknowledged entry, in order
    late = got[3:]  # unacknowledged ones may have reached the disk, each at most once
    assert len(late) == len({str(b) for b in late}) and all("late" in b for b in late)
    if op == "write":
        assert late == []


async def test_short_writes_are_completed(tmp_path: Path) -> None:
    ops = FaultyOps()
    ops.max_write = 7
    store, _ = await JournalStore.open(tmp_path / "s", ops=ops)
    for i in range(5):
        await store.append({"n": i, "text": "ü" * 40})
    await store.checkpoint(5, {"items": list(range(5))})
    await store.aclose()
    assert ops.calls.count("write") > 40
    _, recovery = await JournalStore.open(tmp_path / "s")
    assert recovery.checkpoint_seq == 5 and recovery.checkpoint == {"items": list(range(5))}


async def test_short_write_then_enospc_leaves_a_torn_tail_that_is_kept(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    acked = await fill(directory, 3)
    ops = _fail_on("write", os_error(errno.ENOSPC), after=1)
    ops.max_write = 10
    store, _ = await JournalStore.open(directory, ops=ops)
    ops.armed = True
    with pytest.raises(StoreFailed):
        await store.append({"never": "acknowledged"})
    await _assert_refuses_writes(store)
    segment = directory / segment_name(1)
    torn = segment.read_bytes()
    assert not torn.endswith(b"\n")

    store, recovery = await JournalStore.open(directory)
    assert bodies(recovery) == acked
    assert await store.append({"n": "next"}) == 4
    await store.aclose()
    assert segment.read_bytes() == torn
    _, recovery = await JournalStore.open(directory)
    assert bodies(recovery) == [*acked, {"n": "next"}]


async def test_failed_rename_fails_the_checkpoint_and_the_store(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    entries = await fill(directory, 6, checkpoint_at=3)
    ops = _fail_on("rename", os_error(errno.EIO))
    store, _ = await JournalStore.open(directory, ops=ops)
    ops.armed = True
    with pytest.raises(StoreFailed):
        await store.checkpoint(6, {"items": entries})
    await _assert_refuses_writes(store)
    assert any(n.endswith(".tmp") for n in os.listdir(directory))

    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    assert recovery.checkpoint_seq == 3 and state(recovery) == entries
    assert not any(n.endswith(".tmp") for n in os.listdir(directory))


@pytest.mark.parametrize("rename_survived", [True, False])
async def test_crash_between_rename_and_directory_fsync(tmp_path: Path, rename_survived: bool) -> None:
    directory = tmp_path / "s"
    entries = await fill(directory, 6, checkpoint_at=3)
    ops = _fail_on("fsync_dir", Crash("power lost"))
    store, _ = await JournalStore.open(directory, ops=ops)
    ops.armed = True
    with pytest.raises(StoreFailed):
        await store.checkpoint(6, {"items": entries})
    await _assert_refuses_writes(store)
    assert (directory / checkpoint_name(6)).exists()
    if not rename_survived:  # the directory entry never reached the disk: the file is still the temp one
        os.rename(directory / checkpoint_name(6), directory / (checkpoint_name(6) + ".tmp"))

    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    assert recovery.checkpoint_seq == (6 if rename_survived else 3)
    assert state(recovery) == entries


async def _template_for_checkpointing(directory: Path) -> list[dict[str, object]]:
    """A store with an old checkpoint, a segment behind it, and entries after it: everything compaction
    has to touch."""
    entries = await fill(directory, 8, checkpoint_at=4)
    store, _ = await JournalStore.open(directory)
    for i in range(8, 12):
        entry: dict[str, object] = {"n": i}
        entries.append(entry)
        await store.append(entry)
    await store.checkpoint(10, {"items": entries[:10]})  # rotates: 11 and 12 land in a new segment
    for i in range(12, 14):
        entry = {"n": i}
        entries.append(entry)
        await store.append(entry)
    await store.aclose()
    return entries


async def test_crash_at_every_step_of_checkpoint_and_compaction(tmp_path: Path) -> None:
    template = tmp_path / "template"
    entries = await _template_for_checkpointing(template)
    steps = 0
    for step in range(1, 100):
        directory = tmp_path / f"crash-{step}"
        shutil.copytree(template, directory)
        ops = _fail_on("any", Crash(f"died at step {step}"), after=step - 1)
        store, _ = await JournalStore.open(directory, ops=ops)
        ops.armed = True
        try:
            await store.checkpoint(13, {"items": entries[:13]})
        except StoreFailed:
            ops.armed = False  # the "dead" process's descriptors still need closing in this one
            await _assert_refuses_writes(store)
        else:  # the checkpoint needed fewer than `step` operations: every crash point has been tried
            ops.armed = False
            await store.aclose()
            steps = step - 1
            break
        reopened, recovery = await JournalStore.open(directory)
        await reopened.aclose()
        assert state(recovery) == entries, f"crash at step {step}"
        assert recovery.checkpoint_seq in (10, 13)
    assert steps >= 8  # temp create, write, fsync, close, rename, dir fsync, close, unlinks, dir fsync
    _, recovery = await JournalStore.open(template)
    assert state(recovery) == entries


@pytest.fixture(scope="session")
def corruption_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint, a segment behind it and a segment after it, built once."""
    directory = tmp_path_factory.mktemp("journal-template") / "s"
    trio.run(_template_for_checkpointing, directory)
    return directory


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_one_damaged_byte_anywhere_is_corrupt_state(corruption_template: Path, data: st.DataObject) -> None:
    template = corruption_template
    files = sorted(n for n in os.listdir(template) if n.startswith(("journal", "checkpoint")))
    name = data.draw(st.sampled_from(files), label="file")
    size = (template / name).stat().st_size
    offset = data.draw(st.integers(0, size - 1), label="offset")
    mask = data.draw(st.integers(1, 255), label="xor")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "s"
        shutil.copytree(template, directory)
        damaged = bytearray((directory / name).read_bytes())
        damaged[offset] ^= mask
        (directory / name).write_bytes(bytes(damaged))
        before = snapshot(directory)

        async def reopen() -> None:
            store, recovery = await JournalStore.open(directory)
            await store.aclose()
            raise AssertionError(f"damage at {name}:{offset} went unnoticed; recovered {recovery.last_seq}")

        with pytest.raises(CorruptState) as info:
            trio.run(reopen)
        assert info.value.code == "corrupt_state"
        assert info.value.path == directory / name and str(directory / name) in str(info.value)
        assert 0 <= info.value.offset <= size
        assert snapshot(directory) == before
