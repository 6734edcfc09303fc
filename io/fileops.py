# Every file system call of the ledger store goes through this one seam, so tests inject faults (EIO from
# fsync, ENOSPC, short writes, a failed rename, a crash before the directory sync) by passing a subclass,
# never by patching the standard library. Methods are thin and blocking; callers run them in a worker thread.
#
# A store's own files are never reached through a symlink, and nothing but a regular file (a directory for a
# store's directory) is opened: a crafted data directory (a bad restore, a hostile hand) must not make the
# daemon read, chmod or create a file outside it, nor wait forever on a FIFO, nor open a device. Such a file
# is `UnfitFile`, which a store reports as its damage.
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Final

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# With O_NOFOLLOW (`_open_unfollowed`): O_NONBLOCK opens a FIFO at once instead of waiting for a writer (the
# type check then refuses it) and changes nothing for a regular file's reads.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_READ_CHUNK: Final = 1 << 20
_KINDS: Final = {
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class UnfitFile(OSError):
    """A file refused before it is used: not of the type its place holds (never followed, waited on or
    opened), or larger than its reader's bound. Nothing was changed."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path} at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


def _require(path: Path, found: os.stat_result, kind: int) -> None:
    if stat.S_IFMT(found.st_mode) != kind:
        what = _KINDS.get(stat.S_IFMT(found.st_mode), "a file of an unknown type")
        raise UnfitFile(path, 0, f"{what} where {_KINDS[kind]} belongs; it is not followed, read or changed")


def _too_large(path: Path, bound: int) -> UnfitFile:
    return UnfitFile(path, bound, f"larger than the {bound} bytes its reader accepts")


def _open_unfollowed(path: Path, flags: int, kind: int) -> int:
    """os.open of `path` without following a final symlink, checked by its descriptor to be of `kind`. A
    symlink swapped in after a caller's lstat (ELOOP) is UnfitFile as well."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            _require(path, os.lstat(path), kind)
        raise
    try:
        _require(path, os.fstat(fd), kind)
    except BaseException:
        os.close(fd)
        raise
    return fd


class FileOps:
    """Blocking POSIX file operations on raw descriptors. Subclass to inject faults."""

    def mkdir(self, path: Path) -> None:
        """Create one directory and force it to 0700 whatever the umask is."""
        os.mkdir(path, PRIVATE_DIR_MODE)
        self.fix_mode(path, PRIVATE_DIR_MODE, stat.S_IFDIR)

    def mode(self, path: Path) -> int:
        """Permission bits of `path` (without following a final symlink)."""
        return stat.S_IMODE(os.lstat(path).st_mode)

    def is_dir(self, path: Path) -> bool:
        """Whether `path` is a directory, following a symlink (`require` does not)."""
        return path.is_dir()

    def listdir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def require(self, path: Path, kind: int = stat.S_IFREG) -> None:
        """Raise UnfitFile unless `path` itself (lstat: not a symlink's target) is of `kind` (stat.S_IF*)."""
        _require(path, os.lstat(path), kind)

    def open_read(self, path: Path, kind: int = stat.S_IFREG) -> int:
        """Open `path` read-only if it is of `kind` (UnfitFile if not): checked before the open, so no FIFO
        or device is opened, and by the descriptor after it, so a file swapped in between is refused too."""
        self.require(path, kind)
        return _open_unfollowed(path, _READ_FLAGS, kind)

    def read(self, fd: int, size: int) -> bytes:
        """One read(2) of at most `size` bytes; empty at the end of the file."""
        return os.read(fd, size)

    def read_bytes(self, path: Path, limit: int | None = None) -> bytes:
        """The bytes of the regular file `path` (`open_read`); UnfitFile when it holds more than `limit`,
        known from its size before anything is read, and never read past, should it grow meanwhile."""
        bound = sys.maxsize if limit is None else limit
        fd = self.open_read(path)
        try:
            if os.fstat(fd).st_size > bound:
                raise _too_large(path, bound)
            chunks = []
            read = 0
            while chunk := self.read(fd, min(_READ_CHUNK, bound + 1 - read)):
                chunks.append(chunk)
                read += len(chunk)
                if read > bound:  # it grew while being read
                    raise _too_large(path, bound)
        finally:
            os.close(fd)
        return b"".join(chunks)

    def read_tail(self, path: Path, most: int) -> tuple[int, bytes]:
        """The size of the regular file `path` (`open_read`) and its last `most` bytes (fewer if it is
        shorter): for a reader that needs only a file's end, however large the file has become."""
        fd = self.open_read(path)
        try:
            size = os.fstat(fd).st_size
            os.lseek(fd, max(0, size - most), os.SEEK_SET)
            chunks = []
            read = 0
            while read < most and (chunk := self.read(fd, min(_READ_CHUNK, most - read))):
                chunks.append(chunk)
                read += len(chunk)
        finally:
            os.close(fd)
        return size, b"".join(chunks)

    def read_chunks(self, path: Path) -> Generator[bytes, None, None]:
        """The bytes of the regular file `path` (`open_read`), a part at a time, for a reader that keeps only
        some of them. The file is open until the iterator is exhausted or closed."""
        fd = self.open_read(path)
        try:
            while chunk := self.read(fd, _READ_CHUNK):
                yield chunk
        finally:
            os.close(fd)

    def fix_mode(self, path: Path, mode: int, kind: int = stat.S_IFREG) -> None:
        """Give `path`, if it is of `kind` (UnfitFile if not), exactly the permission bits `mode`, through a
        descriptor: what a symlink points at is never changed."""
        fd = self.open_read(path, kind)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

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
        """Open an existing regular file for appending (UnfitFile if not one: never through a symlink)."""
        self.require(path)
        return _open_unfollowed(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC, stat.S_IFREG)

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

        Raises BlockingIOError if another process holds it, UnfitFile if `path` is not a regular file (a
        symlink is never followed to create or chmod its target). The kernel releases it when the process
        dies.
        """
        with contextlib.suppress(FileNotFoundError):
            self.require(path)
        fd = _open_unfollowed(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, stat.S_IFREG)
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd


class ChunkLines:
    """The complete lines of a file read as `chunks`, each as (its offset, its bytes without the newline),
    holding at most one line: only the bytes after the last newline are kept between chunks (joined once a
    newline comes, so short reads cost no more). A line longer than `most` bytes, its newline included,
    raises `too_long(offset)` as soon as that much of it is read. Once iterated, `end` is the offset after
    the last newline and `rest` the bytes after it (a torn last line, or nothing). The journal's segments
    and the trace's files are read through it."""

    def __init__(self, chunks: Iterable[bytes], most: int, too_long: Callable[[int], Exception]) -> None:
        self._chunks = chunks
        self._most = most
        self._too_long = too_long
        self.end = 0
        self.rest = b""

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        start = 0  # the offset of the first byte after the last newline
        tail: list[bytes] = []  # the bytes from `start`, as read: no newline among them
        held = 0  # their length
        for chunk in self._chunks:
            if b"\n" not in chunk:
                tail.append(chunk)
                held += len(chunk)
            else:
                data = b"".join((*tail, chunk))
                position = 0
                while (end := data.find(b"\n", position)) >= 0:
                    if end + 1 - position > self._most:
                        raise self._too_long(start + position)
                    yield start + position, data[position:end]
                    position = end + 1
                start += position
                tail = [data[position:]]
                held = len(data) - position
            if held >= self._most:  # even a newline next would make a longer line
                raise self._too_long(start)
        self.end, self.rest = start, b"".join(tail)


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
