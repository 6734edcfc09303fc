# The one way a whole file is replaced (io/fileops.py `replace_durably`): the data directory's private files,
# self-edit's targets, doctor's backups, an eval's run records and (through the journal) checkpoints. Each
# caller used to carry its own copy; one of them (the eval's run record) renamed a file it never fsynced,
# so a machine crash could leave an empty record where a finished run had been reported.
from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.io import home as homes
from harness.io.fileops import FileOps, replace_durably


class Recording(FileOps):
    """Real file operations, each call named in order; `fail` makes the named one raise EIO."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail:
            raise OSError(5, "Input/output error")

    def fsync(self, fd: int) -> None:
        self._call("fsync")
        super().fsync(fd)

    def rename(self, src: Path, dst: Path) -> None:
        self._call("rename")
        super().rename(src, dst)

    def fsync_dir(self, path: Path) -> None:
        self._call("fsync_dir")
        super().fsync_dir(path)


def test_the_data_is_fsynced_before_the_rename_and_the_directory_after(tmp_path: Path) -> None:
    ops = Recording()
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    replace_durably(ops, target, b"new", tmp_path / "state.json.tmp")
    assert ops.calls == ["fsync", "rename", "fsync_dir"]
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("failing", ["fsync", "rename"])
def test_a_failure_before_the_rename_leaves_only_the_old_file(tmp_path: Path, failing: str) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="Input/output error"):
        replace_durably(Recording(failing), target, b"new", tmp_path / "state.json.tmp")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_temporary_that_is_a_symlink_is_never_followed(tmp_path: Path) -> None:
    """Another local user who plants a symlink where the temporary goes gets a refusal, not our bytes
    written through it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"theirs")
    (tmp_path / "state.json.tmp").symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        replace_durably(Recording(), tmp_path / "state.json", b"new", tmp_path / "state.json.tmp")
    assert elsewhere.read_bytes() == b"theirs"


def test_mode_none_gives_a_new_file_the_umask_s_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        replace_durably(Recording(), tmp_path / "run.json", b"{}", tmp_path / "run.json.tmp", mode=None)
    finally:
        os.umask(old)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o644


def test_a_private_file_left_half_written_by_a_killed_writer_does_not_block_the_next(tmp_path: Path) -> None:
    target = tmp_path / "peers.json"
    (tmp_path / "peers.json.tmp").write_bytes(b'{"tor')  # a writer killed mid-write left this
    homes.write_private_json(target, {"peers": []})
    assert target.read_text() == '{\n  "peers": []\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peers.json"]
    assert target.stat().st_mode & 0o777 == 0o600
