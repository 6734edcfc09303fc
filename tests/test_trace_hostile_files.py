# `harness trace` reads a trace that may come from anywhere (review 18, F1, F5, F9): a FIFO named like a trace
# file hung every command, a sparse 4 GiB file was read whole into memory and then shown as a fine empty
# trace, a symlink to /dev/zero never ended; export without --home left the owner token of HARNESS_HOME in
# clear; arguments str.isdigit() accepts but int() refuses were internal errors. The commands that could hang
# run as subprocesses with a generous bound and an address-space limit, so a regression fails, not hangs.
from __future__ import annotations

import json
import os
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli.main import run
from harness.io import trace_files
from harness.io.fileops import FileOps
from tests.test_cli_e2e import HARNESS

TRACE_FILE = "trace-000000000001.ndjson"
GOOD = trace_files.encode_line("ledger", 1, {"type": "ask", "at": 1, "exchangeId": "e1"})
# The harness reads a trace in far less; a reader that reads a device or a sparse file whole goes past it.
ADDRESS_SPACE = 1 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "HARNESS_HOME": str(tmp_path / "home")},
        preexec_fn=_limited,
    )


def _trace_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "t"
    directory.mkdir()
    return directory


def _fifo(tmp_path: Path) -> Path:
    directory = _trace_dir(tmp_path)
    os.mkfifo(directory / TRACE_FILE)
    return directory


def _sparse(tmp_path: Path) -> Path:
    directory = _trace_dir(tmp_path)
    with (directory / TRACE_FILE).open("wb") as file:
        file.truncate(4 << 30)
    return directory


def _to_dev_zero(tmp_path: Path) -> Path:
    directory = _trace_dir(tmp_path)
    (directory / TRACE_FILE).symlink_to("/dev/zero")
    return directory


@pytest.mark.parametrize("command", ["query", "summary", "export"])
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_fifo, "a FIFO where a regular file belongs"),
        (_sparse, "a line longer than"),
        (_to_dev_zero, "a symbolic link where a regular file belongs"),
    ],
)
def test_a_hostile_trace_file_is_damage_reported_in_one_line_never_a_hang(
    tmp_path: Path, command: str, make: Callable[[Path], Path], reason: str
) -> None:
    directory = make(tmp_path)
    listed = harness(tmp_path, "trace", command, str(directory), "--json")
    assert listed.returncode == 1, listed.stderr
    error = json.loads(listed.stdout)
    assert error["error"] == "corrupt_state" and reason in error["detail"], error
    assert f"{TRACE_FILE} at byte 0" in error["detail"]
    said = harness(tmp_path, "trace", command, str(directory))
    assert said.returncode == 1 and said.stdout == ""
    assert said.stderr.startswith("harness: corrupt_state:") and said.stderr.count("\n") == 1


def test_a_named_symlink_is_followed_to_a_trace_file_but_not_to_a_device(tmp_path: Path) -> None:
    """PATH, which the user named, may be a symlink like a directory may; what it points at must still be a
    regular file. Inside a trace directory no symlink is followed, whatever it points at."""
    (tmp_path / "real.ndjson").write_bytes(GOOD)
    (tmp_path / "named.ndjson").symlink_to(tmp_path / "real.ndjson")
    assert [line.seq for line in trace_files.read_trace(tmp_path / "named.ndjson")] == [1]
    (tmp_path / "zero.ndjson").symlink_to("/dev/zero")
    listed = harness(tmp_path, "trace", "query", str(tmp_path / "zero.ndjson"), "--json")  # a bounded process
    assert listed.returncode == 1, listed.stderr
    assert "a character device where a regular file belongs" in json.loads(listed.stdout)["detail"]
    directory = _trace_dir(tmp_path)
    (directory / TRACE_FILE).symlink_to(tmp_path / "real.ndjson")
    with pytest.raises(trace_files.TraceDamaged, match="a symbolic link"):
        list(trace_files.read_trace(directory))


class CountingOps(FileOps):
    """Reads at most `most` bytes at a time (short reads) and counts them."""

    def __init__(self, most: int = 1 << 20) -> None:
        self.most = most
        self.read_total = 0

    def read(self, fd: int, size: int) -> bytes:
        data = super().read(fd, min(size, self.most))
        self.read_total += len(data)
        return data


def test_a_sparse_file_is_damage_after_one_line_bound_is_read(tmp_path: Path) -> None:
    """4 GiB of zeros held no newline: read whole, in memory, it gave no line, and `summary` said `lines: 0`
    with exit 0. Now what is read of it is bounded by one line, and it is damage at its first byte."""
    directory = _trace_dir(tmp_path)
    path = directory / TRACE_FILE
    path.write_bytes(GOOD)
    with path.open("r+b") as file:
        file.truncate(4 << 30)
    ops = CountingOps()
    with pytest.raises(trace_files.TraceDamaged) as raised:
        list(trace_files.read_trace(directory, ops=ops))
    assert raised.value.offset == len(GOOD) and "longer than" in raised.value.reason
    assert ops.read_total <= 2 * trace_files.MAX_LINE_BYTES


@pytest.mark.parametrize("most", [1, 977, 1 << 20])
def test_lines_offsets_and_the_torn_tail_do_not_depend_on_how_the_file_is_read(
    tmp_path: Path, most: int
) -> None:
    """A line read in many parts is the same line; a torn last line shorter than a line's bound is skipped,
    and one of the bound (with a newline it would be longer than any line written) is damage at its start."""
    path = tmp_path / TRACE_FILE
    second = trace_files.encode_line("desk", 2, {"type": "x", "pad": "p" * 3000})
    path.write_bytes(GOOD + second + b'{"torn')
    lines = list(trace_files.read_trace(path, ops=CountingOps(most)))
    assert [(line.seq, line.raw) for line in lines] == [(1, GOOD[:-1]), (2, second[:-1])]
    if most == 1:
        return  # a megabyte a byte at a time: the other sizes cover the bound
    path.write_bytes(GOOD + b"{" * (trace_files.MAX_LINE_BYTES - 1))
    assert [line.seq for line in trace_files.read_trace(path, ops=CountingOps(most))] == [1]
    path.write_bytes(GOOD + b"{" * trace_files.MAX_LINE_BYTES)
    with pytest.raises(trace_files.TraceDamaged) as raised:
        list(trace_files.read_trace(path, ops=CountingOps(most)))
    assert raised.value.offset == len(GOOD)


def test_a_line_of_exactly_the_bound_is_read(tmp_path: Path) -> None:
    """The writer writes a line of MAX_LINE_BYTES, its newline included; one byte more is damage."""
    path = tmp_path / TRACE_FILE
    bare = trace_files.encode_line("ledger", 2, {"type": "x", "pad": ""})
    pad = "p" * (trace_files.MAX_LINE_BYTES - len(bare))
    line = trace_files.encode_line("ledger", 2, {"type": "x", "pad": pad})
    assert len(line) == trace_files.MAX_LINE_BYTES
    path.write_bytes(GOOD + line)
    assert [line.seq for line in trace_files.read_trace(path)] == [1, 2]
    path.write_bytes(GOOD + line[:-1] + b" \n")
    with pytest.raises(trace_files.TraceDamaged) as raised:
        list(trace_files.read_trace(path))
    assert raised.value.offset == len(GOOD)


def test_a_reader_that_stops_early_closes_the_file(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    path.write_bytes(GOOD * 3)
    before = len(os.listdir("/proc/self/fd"))
    lines = trace_files.read_trace(path)
    assert next(lines).seq == 1
    lines.close()
    assert len(os.listdir("/proc/self/fd")) == before


# --- F5: export redacts the secrets of HARNESS_HOME --------------------------------------------------------

TOKEN = "f" * 64


def _leaky_trace(tmp_path: Path) -> Path:
    path = tmp_path / "leak.ndjson"
    event = {"type": "engine", "at": 1, "stdout": f"the daemon token is {TOKEN}"}
    path.write_bytes(trace_files.encode_line("orchestrator", 1, event))
    return path


def test_export_of_a_path_redacts_the_owner_token_of_harness_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """`--home` defaults to HARNESS_HOME, as --help says; with a PATH and no --home no data directory was
    read, and the owner token left in clear (its shape is redacted only where it is labelled)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "owner-token").write_text(TOKEN + "\n")
    monkeypatch.setenv("HARNESS_HOME", str(home))
    path = _leaky_trace(tmp_path)
    assert run(["trace", "export", str(path)]) == 0
    exported = capsysbinary.readouterr().out
    assert TOKEN.encode() not in exported and b"[REDACTED:" in exported


def test_export_without_any_data_directory_exports_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "never-made"))
    path = _leaky_trace(tmp_path)
    assert run(["trace", "export", str(path)]) == 0
    assert capsysbinary.readouterr().out == path.read_bytes()
    assert not (tmp_path / "never-made").exists()


def test_export_refuses_when_the_token_it_must_redact_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "owner-token").write_bytes(b"\xff" * 64)
    monkeypatch.setenv("HARNESS_HOME", str(home))
    assert run(["trace", "export", str(_leaky_trace(tmp_path)), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "unavailable"


# --- F9: arguments ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["query", "--since", "²"],
        ["summary", "--until", "١٢٣²"],
        ["export", "--since", "9" * 5000],
        ["query", "--until", "9" * 19],
        ["query", "--limit", "-5"],
    ],
)
def test_a_bad_argument_is_bad_request_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    path = tmp_path / TRACE_FILE
    path.write_bytes(GOOD)
    assert run(["trace", args[0], str(path), *args[1:], "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "bad_request"


def test_epoch_ms_and_a_limit_of_zero_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / TRACE_FILE
    path.write_bytes(GOOD + trace_files.encode_line("ledger", 2, {"type": "ask", "at": 5}))
    assert run(["trace", "query", str(path), "--since", "2", "--json"]) == 0
    assert [line["seq"] for line in json.loads(capsys.readouterr().out)["lines"]] == [2]
    assert run(["trace", "query", str(path), "--limit", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"count": 0, "lines": []}


def test_a_limit_still_reads_the_whole_trace_so_damage_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / TRACE_FILE
    path.write_bytes(GOOD + b"not a line\n")
    assert run(["trace", "query", str(path), "--limit", "1", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "corrupt_state"


def test_the_cli_bound_leaves_room_for_the_harness(tmp_path: Path) -> None:
    """The address-space limit above fails a reader that reads a device whole, not the harness itself."""
    (tmp_path / TRACE_FILE).write_bytes(GOOD)
    done = harness(tmp_path, "trace", "summary", str(tmp_path / TRACE_FILE), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["lines"] == 1
