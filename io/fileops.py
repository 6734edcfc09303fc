# Every file system call of the ledger store goes through this one seam, so tests inject faults (EIO from
# fsync, ENOSPC, short writes, a failed rename, a crash before the directory sync) by passing a subclass,
# never by patching the standard library. Methods are thin and blocking; callers run them in a worker thread.
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class FileOps:
    """Blocking POSIX file operations on raw descriptors. Subclass to inject faults."""

    def mkdir(self, path: Path) -> None:
        """Create one directory and force it to 0700 whatever the umask is."""
        os.mkdir(path, PRIVATE_DIR_MODE)
        os.chmod(path, PRIVATE_DIR_MODE)

    def chmod(self, path: Path, mode: int) -> None:
        os.chmod(path, mode)

    def mode(self, path: Path) -> int:
        """Permission bits of `path` (without following a final symlink)."""
        return stat.S_IMODE(os.lstat(path).st_mode)

    def is_dir(self, path: Path) -> bool:
        return path.is_dir()

    def listdir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def read_bytes(self, path: Path) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def create_exclusive(self, path: Path, mode: int | None = PRIVATE_FILE_MODE) -> int:
        """Open a new file for appending; fails if it exists (or is a symlink). `mode` whatever the umask is;
        None: 0666 less the umask, as any program's new file."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(path, flags, 0o666 if mode is None else mode)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_append(self, path: Path) -> int:
        """Open an existing file for appending."""
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """One write(2); may be short. Callers loop (see `write_all`)."""
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        os.rename(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def fsync_dir(self, path: Path) -> None:
        """Make renames, creations and deletions inside `path` durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: Path) -> int:
        """Take an exclusive, non-blocking lock on `path` (created 0600); returns the held descriptor.

        Raises BlockingIOError if another process holds it. The kernel releases it when the process dies.
        """
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd


def write_all(ops: FileOps, fd: int, data: bytes) -> None:
    """Write every byte of `data`, looping over short writes. A write that makes no progress is an error."""
    view = memoryview(data)
    while view:
        n = ops.write(fd, view)
        if n <= 0:
            raise OSError(f"write made no progress ({n} of {len(view)} bytes)")
        view = view[n:]


def replace_durably(
    ops: FileOps, target: Path, data: bytes, temporary: Path, mode: int | None = PRIVATE_FILE_MODE
) -> None:
    """Replace `target` with `data` all at once: a reader sees the old content or the new, never a part, and
    once this returns a crash cannot undo it. `temporary`, a new file beside the target (`create_exclusive`,
    with `mode`), is written and fsynced, renamed over the target, then the directory is fsynced; on a
    failure before the rename it is removed, so no half-written file is left to be mistaken for data."""
    fd = ops.create_exclusive(temporary, mode)
    try:
        try:
            write_all(ops, fd, data)
            ops.fsync(fd)
        finally:
            ops.close(fd)
        ops.rename(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            ops.unlink(temporary)
        raise
    ops.fsync_dir(target.parent)


def close_both(ops: FileOps, data_fd: int | None, lock_fd: int | None) -> None:
    """Close a store's data file, then its lock file even if the first close failed: the lock is what lets
    the next writer in (the journal and the trace hold one of each)."""
    try:
        if data_fd is not None:
            ops.close(data_fd)
    finally:
        if lock_fd is not None:
            ops.close(lock_fd)
