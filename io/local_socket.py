# The daemon's local sockets: Unix domain sockets inside the 0700 data directory, so that only this machine's
# user reaches the daemon and its remote gateway. A loopback TCP port is open to every local user (and to any
# web page that can name it); a socket file is reached only through the directory's permissions, and the
# server still checks the peer's uid (SO_PEERCRED) before reading a byte, in case those permissions were
# loosened. Standard library only: the CLI connects through this on every call.
#
# sun_path holds 108 bytes, and data directories (pytest's temporary ones among them) can be longer. Such a
# path is reached as /proc/self/fd/N/NAME, with N an O_PATH descriptor of its directory held open for the
# bind or connect: the kernel resolves the short name to the same file.
from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Protocol

from harness.io.home import PRIVATE_FILE_MODE

SUN_PATH_BYTES: Final = 107  # 108 with the terminating NUL
BACKLOG: Final = 128
_PEERCRED: Final = struct.Struct("3i")  # struct ucred: pid, uid, gid


class _Socket(Protocol):
    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes: ...


class LocalSocketError(OSError):
    """A socket path that cannot be used at all (its name alone is too long)."""


class ForeignServer(OSError):
    """The socket is served by another user: nothing is sent to it (not a token, not a key)."""


@contextlib.contextmanager
def addressable(path: Path) -> Iterator[str]:
    """A name for `path` that fits sun_path, valid while the context lasts."""
    if len(os.fsencode(path)) <= SUN_PATH_BYTES:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = f"/proc/self/fd/{fd}/{path.name}"
        if len(os.fsencode(name)) > SUN_PATH_BYTES:
            raise LocalSocketError(f"the socket name {path.name!r} is too long")
        yield name
    finally:
        os.close(fd)


def listen(path: Path) -> socket.socket:
    """A listening socket at `path`, mode 0600. The caller holds the data directory's lock, so a file left
    there is a dead daemon's and is replaced."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with addressable(path) as name:
            sock.bind(name)
        os.chmod(path, PRIVATE_FILE_MODE)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def connect(path: Path, timeout: float) -> socket.socket:
    """A blocking connection to the socket at `path`, served by this user; raises OSError (ForeignServer
    when another user serves it). The client checks the server as the server checks the client: a data
    directory another user could replace (a parent others may write) would otherwise hand the owner's
    token and every member key to whoever listens at the socket its daemon.json names."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with addressable(path) as name:
            sock.connect(name)
        check_server(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


def check_server(sock: _Socket, path: Path) -> None:
    """Raise ForeignServer unless this user serves the connected socket `sock` (at `path`)."""
    uid = peer_uid(sock)
    if uid != os.geteuid():
        raise ForeignServer(f"the socket {path} is served by uid {uid}, not this user")


def peer_uid(sock: _Socket) -> int:
    """The uid of the process at the other end of a connected Unix socket, as the kernel recorded it."""
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return int(uid)


def same_user(sock: _Socket) -> bool:
    """Whether the peer runs as this process's (effective) user."""
    try:
        return peer_uid(sock) == os.geteuid()
    except OSError:
        return False
