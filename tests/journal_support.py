# Shared by the journal tests: byte snapshots (to prove "no byte changed"), and a FileOps that fails on cue,
# which is how faults enter the store (through its seam, never by patching the standard library).
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.io.daemon import now_ms
from harness.io.desk_runner import DeskRunner
from harness.io.fileops import PRIVATE_FILE_MODE, FileOps
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import Recovery
from harness.io.team_delivery import DeliveryReport


def snapshot(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def bodies(recovery: Recovery) -> list[dict[str, object]]:
    return [e.body for e in recovery.entries]


def state(recovery: Recovery) -> list[object]:
    """A stand-in reducer: the checkpoint holds the list of entries so far, the journal extends it."""
    items: list[object] = []
    if recovery.checkpoint is not None:
        stored = recovery.checkpoint["items"]
        assert isinstance(stored, list)
        items.extend(stored)
    assert len(items) == recovery.checkpoint_seq
    items.extend(e.body for e in recovery.entries)
    return items


async def fill(directory: Path, count: int, *, checkpoint_at: int | None = None) -> list[dict[str, object]]:
    """Append `count` entries {"n": i}, optionally checkpointing (with the `state` convention) at a seq."""
    entries: list[dict[str, object]] = [{"n": i, "pad": "x" * (i % 7)} for i in range(count)]
    store, recovery = await JournalStore.open(directory)
    base = state(recovery)
    for i, entry in enumerate(entries):
        await store.append(entry)
        if checkpoint_at == i + 1 + len(base):
            await store.checkpoint(checkpoint_at, {"items": [*base, *entries[: i + 1]]})
    await store.aclose()
    return entries


class Crash(Exception):
    """Stands for the process dying at this call: nothing after it runs."""


class FaultyOps(FileOps):
    """While `armed`, calls `hook(op_name, args)` before each operation; the hook raises to inject a fault.
    `write` may also be limited to `max_write` bytes per call to produce short writes."""

    def __init__(self, hook: Callable[[str, tuple[object, ...]], None] | None = None) -> None:
        self.hook = hook or (lambda name, args: None)
        self.armed = True
        self.max_write: int | None = None
        self.calls: list[str] = []

    def _call(self, name: str, *args: object) -> None:
        self.calls.append(name)
        if self.armed:
            self.hook(name, args)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._call("write", fd, data)
        if self.max_write is not None:
            data = data[: self.max_write]
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._call("fsync", fd)
        super().fsync(fd)

    def fsync_dir(self, path: Path) -> None:
        self._call("fsync_dir", path)
        super().fsync_dir(path)

    def rename(self, src: Path, dst: Path) -> None:
        self._call("rename", src, dst)
        super().rename(src, dst)

    def unlink(self, path: Path) -> None:
        self._call("unlink", path)
        super().unlink(path)

    def create_exclusive(self, path: Path, mode: int | None = PRIVATE_FILE_MODE) -> int:
        self._call("create_exclusive", path)
        return super().create_exclusive(path, mode)

    def close(self, fd: int) -> None:
        self._call("close", fd)
        super().close(fd)


def os_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def hold_checkpoint_encoding(
    monkeypatch: pytest.MonkeyPatch, runner: ModuleType, state: type, deadline: float
) -> tuple[threading.Event, threading.Event]:
    """Make `runner`'s `to_json` of a `state` (a desk, a team) wait for the second event, once the first
    says it started, and fail if it runs on the event loop's own thread: that would stop everything else
    for the whole encoding."""
    encoding, release = threading.Event(), threading.Event()
    real_to_json = runner.to_json

    def held_to_json(value: Any) -> Any:
        if isinstance(value, state):
            assert threading.current_thread() is not threading.main_thread(), f"{state.__name__} on the loop"
            encoding.set()
            assert release.wait(deadline)
        return real_to_json(value)

    monkeypatch.setattr(runner, "to_json", held_to_json)
    return encoding, release


def lone_desk(tmp_path: Path, machine: str, every: int) -> DeskRunner:
    """A delivery desk on its own in a new data directory: no owner to report to (reports are dropped), no
    terminals, a checkpoint every `every` journal entries."""

    async def report(one: DeliveryReport) -> None:
        pass

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    policy = CheckpointPolicy(every=every)
    return DeskRunner(home, machine, report, None, clock=now_ms, checkpoint_policy=policy)
