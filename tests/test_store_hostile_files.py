# Crafted files in a stopped daemon's store directories (a bad restore, a careless or hostile hand), with real
# symlinks, FIFOs and sparse files: each is the damage of its own store (corrupt_state naming the path), never
# followed out of the data directory, read without a bound, waited on, chmodded or deleted, and the daemon
# goes on serving every other team. The adversarial review's repros A-E (repro4_store_files.sh), one test
# each.
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.io.board_runner import boards_dir
from harness.io.journal import JournalStore
from harness.io.journal_files import (
    LOCK_NAME,
    CorruptState,
    Entry,
    SegmentInfo,
    _parse_segment,
    checkpoint_name,
    delivery_store_dir,
    encode_record,
    ledger_store_dir,
    segment_name,
)
from tests.journal_support import fill, snapshot
from tests.test_daemon import Api, running

TIB = 1 << 40
STRAY_PART = "part-0123456789abcdef0123456789abcdef.json"
# How long opening the stores may take before the FIFO test calls it a hang: a child process is killed then.
OPEN_DEADLINE_S = 60.0


async def _two_teams(home: Path) -> Path:
    """A stopped daemon's data directory holding teams "good" and "bad"; the bad team's store directory."""
    async with running(home) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="good", name="Good")
        await owner("create", id="bad", name="Bad")
    return ledger_store_dir(home, "bad")


async def _serves_the_good_team_only(home: Path, damaged: Path) -> None:
    """The daemon starts, stops the bad team with corrupt_state naming `damaged`, and serves the good one."""
    async with running(home) as daemon:
        owner = await Api.open(daemon)
        listed = await owner("list")
        assert [t["id"] for t in listed["teams"]] == ["good"]
        assert [(u["id"], u["error"]) for u in listed["unavailable"]] == [("bad", "corrupt_state")]
        refused = await owner.error("get", "bad")
        assert refused.code == "corrupt_state" and str(damaged) in refused.detail, refused.detail
        assert "\n" not in refused.detail
        assert (await owner("pause", "good"))["state"] == "paused"


def _outside_directory(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A directory outside the data directory (0755) holding a `*.tmp` and a part-like file, and its bytes."""
    shared = tmp_path / "outside" / "shared"
    shared.mkdir(parents=True)
    shared.chmod(0o755)
    (shared / "notes.tmp").write_bytes(b"keep\n")
    (shared / STRAY_PART).write_bytes(b"keep\n")
    return shared, snapshot(shared)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_a_directory_where_a_segment_belongs_stops_that_team_only(tmp_path: Path) -> None:
    """Review F5, repro A: "a directory named journal-000000000001.jsonl -> `harness: bad_request: cannot run
    the daemon: [Errno 21] Is a directory` (all teams down)"."""
    home = tmp_path / "home"
    store = await _two_teams(home)
    misplaced = store / segment_name(9)
    misplaced.mkdir(mode=0o700)
    await _serves_the_good_team_only(home, misplaced)
    assert misplaced.is_dir()  # kept for repair


async def test_a_sparse_terabyte_checkpoint_stops_that_team_only(tmp_path: Path) -> None:
    """Review F5, repro B: "io/journal_files.py:373 reads the whole checkpoint before its size check ... a
    1 TiB sparse checkpoint -> MemoryError (internal error)"."""
    home = tmp_path / "home"
    store = await _two_teams(home)
    huge = store / checkpoint_name(1)
    with huge.open("wb") as file:
        file.truncate(TIB)  # no disk used
    await _serves_the_good_team_only(home, huge)
    assert huge.stat().st_size == TIB


async def test_a_store_directory_linked_out_of_the_data_directory_is_never_followed(tmp_path: Path) -> None:
    """Review F4, repro C: "teams/ledgers/t3 -> an outside directory: outside notes.tmp and part-*.json were
    deleted, the directory went 755 -> 700 and a lock file was created there"."""
    home = tmp_path / "home"
    await _two_teams(home)
    shared, before = _outside_directory(tmp_path)
    link = ledger_store_dir(home, "linked")
    link.symlink_to(shared, target_is_directory=True)
    async with running(home) as daemon:
        owner = await Api.open(daemon)
        listed = await owner("list")
        assert [t["id"] for t in listed["teams"]] == ["good", "bad"]
        assert [(u["id"], u["error"]) for u in listed["unavailable"]] == [("linked", "corrupt_state")]
        refused = await owner.error("get", "linked")
        assert refused.code == "corrupt_state" and str(link) in refused.detail, refused.detail
        assert (await owner("pause", "good"))["state"] == "paused"
    assert snapshot(shared) == before  # nothing deleted, no lock file made
    assert _mode(shared) == 0o755
    assert link.is_symlink()


@pytest.mark.parametrize("name", [segment_name(9), LOCK_NAME, checkpoint_name(1) + ".tmp"])
async def test_a_store_file_linked_out_of_the_data_directory_is_never_followed(
    tmp_path: Path, name: str
) -> None:
    """Review F4, repro D: "a journal segment that is a symlink to an outside file: the target's mode went
    644 -> 600" (the lock, created and chmodded through the link, and a `*.tmp`, deleted at open, alike)."""
    home = tmp_path / "home"
    store = await _two_teams(home)
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"")
    victim.chmod(0o644)
    link = store / name
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    await _serves_the_good_team_only(home, link)
    assert _mode(victim) == 0o644 and victim.read_bytes() == b""
    assert link.is_symlink()


# Run in a child process: before the fix, opening the FIFO blocked for good in a worker thread that no trio
# cancellation reaches, so only killing a process can bound it.
_OPEN_THE_LEDGERS = """
import json, sys
from pathlib import Path
import trio
from harness.core.limits import DEFAULT_LIMITS
from harness.io.journal import CheckpointPolicy
from harness.io.ledger_runner import LedgerRunner

runner = LedgerRunner(Path(sys.argv[1]), DEFAULT_LIMITS, lambda: 0, checkpoints=CheckpointPolicy(),
                      log=lambda line: None)
trio.run(runner.recover)
print(json.dumps({"opened": sorted(runner.stores), "unavailable": runner.unavailable}))
trio.run(runner.aclose)
"""


async def test_a_fifo_where_a_checkpoint_belongs_is_never_waited_on(tmp_path: Path) -> None:
    """Review F5, repro E: "io/fileops.py:37 opens FIFOs blocking ... a FIFO named as a checkpoint -> the
    daemon blocks forever in open, ignoring SIGTERM"."""
    home = tmp_path / "home"
    store = await _two_teams(home)
    fifo = store / checkpoint_name(1)
    os.mkfifo(fifo, 0o600)
    try:
        ran = subprocess.run(
            [sys.executable, "-c", _OPEN_THE_LEDGERS, str(home)],
            capture_output=True,
            text=True,
            timeout=OPEN_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"opening the stores still waited on the FIFO after {OPEN_DEADLINE_S:g} s")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["opened"] == ["good"]
    assert list(result["unavailable"]) == ["bad"]
    why = result["unavailable"]["bad"]
    assert why.startswith("corrupt_state: ") and str(fifo) in why and "FIFO" in why, why
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


async def test_a_sparse_terabyte_segment_is_damage_not_a_memory_error(tmp_path: Path) -> None:
    """Review F5: "io/journal_files.py ... :388 reads segments unbounded". A segment is read a part at a time,
    and an unterminated record longer than any the store writes is damage; the file is kept."""
    directory = tmp_path / "s"
    await fill(directory, 3)
    huge = directory / segment_name(2)
    with huge.open("wb") as file:
        file.truncate(TIB)
    with pytest.raises(CorruptState) as refused:
        await JournalStore.open(directory)
    assert refused.value.path == huge and "longer than any" in refused.value.reason
    assert huge.stat().st_size == TIB


@contextlib.contextmanager
def _unopenable(path: Path) -> Iterator[None]:
    """`path` cannot be opened for writing for the block: mode 0 for a user, immutable (chattr) for root,
    whom no mode stops."""
    if os.geteuid() != 0:
        path.chmod(0)
        try:
            yield
        finally:
            path.chmod(0o600)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("root, and this file system cannot make a file immutable (chattr +i)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_an_error_of_the_file_system_opening_one_store_stops_that_team_only(tmp_path: Path) -> None:
    """Review F5: "io/ledger_runner.py:240 catches only CorruptState": any other error opening one team's
    store (here its lock file cannot be opened) ended the daemon's start for every team."""
    home = tmp_path / "home"
    store = await _two_teams(home)
    with _unopenable(store / LOCK_NAME):
        await _serves_the_good_team_only(home, store)


@pytest.mark.parametrize("place", ["ledger", "board", "desk"])
async def test_every_kind_of_store_refuses_a_directory_linked_out(tmp_path: Path, place: str) -> None:
    """Review F4: "Store recovery follows symlinks out of the data directory, then deletes and chmods there".
    The ledgers, the boards and the delivery desk share the store: none follows its directory's link."""
    home = tmp_path / "home"
    directory = {
        "ledger": ledger_store_dir(home, "t1"),
        "board": boards_dir(home) / "t1",
        "desk": delivery_store_dir(home),
    }[place]
    directory.parent.mkdir(parents=True)
    shared, before = _outside_directory(tmp_path)
    directory.symlink_to(shared, target_is_directory=True)
    with pytest.raises(CorruptState) as refused:
        await JournalStore.open(directory)
    assert refused.value.path == directory and "symbolic link" in refused.value.reason
    assert snapshot(shared) == before and _mode(shared) == 0o755


def _parsed(data: bytes, size: int) -> tuple[SegmentInfo, list[Entry]] | str:
    """A segment's parse when read `size` bytes at a time, or its damage's offset and reason."""
    sink: list[Entry] = []
    chunks = (data[at : at + size] for at in range(0, len(data), size))
    try:
        return _parse_segment(Path("segment"), chunks, 1, 2, sink), sink
    except CorruptState as error:
        return f"{error.offset}: {error.reason}"


@pytest.mark.parametrize(
    "ending",
    [b"", b'{"v":1,"seq":6,"entry":{"n":', encode_record("entry", 6, {}) + b"xx", b"\n", b"garbage\n"],
    ids=["whole", "torn", "newline-lost", "empty-line", "damaged-line"],
)
def test_a_segment_read_a_part_at_a_time_parses_as_read_whole(ending: bytes) -> None:
    """Segments are read a part at a time so that a huge one costs one line of memory: where the parts end
    changes nothing (the records, the torn tail's offset, a damage's offset), down to one byte a part."""
    lines = [encode_record("entry", seq, {"n": seq, "text": "é" * seq}) + b"\n" for seq in range(1, 6)]
    data = b"".join(lines) + ending
    whole = _parsed(data, len(data))
    assert all(_parsed(data, size) == whole for size in (1, 2, 3, 7, 64, len(lines[0]), len(data) - 1))
