# Which user is at the other end of a loopback TCP connection. A Unix socket says who connected
# (SO_PEERCRED); a TCP port does not, and `harness web` must listen on one for a browser. But on loopback
# both ends are this kernel's sockets, and the kernel knows who owns the client's: one exact sock_diag query
# over netlink (the interface `ss` uses), by the connection's four-tuple, returns its uid. So the page
# listener refuses another user's connection before reading a byte of it, as the Unix sockets do; a stolen
# page ticket (a browser's command line is readable by every user) is worth nothing to another uid.
#
# Linux only. When the kernel will not say (no sock_diag, an address that is not IPv4 loopback), the answer
# is None and the caller refuses: a connection whose user is unknown is not this user's.
from __future__ import annotations

import os
import socket
import struct
from typing import Any, Final, Protocol

_NETLINK_SOCK_DIAG: Final = 4  # linux/netlink.h (the socket module does not name it)
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 1
_NLMSG_ERROR: Final = 2
_NO_COOKIE: Final = 0xFFFFFFFF
_ALL_STATES: Final = 0xFFFFFFFF
_HEADER: Final = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid: sport and dport (in network
# order: packed from htons), src and dst (16 bytes each), interface, cookie (two words).
_REQUEST: Final = struct.Struct("=BBBxIHH16s16sIII")
# inet_diag_msg: family, state, timer, retrans, the sockid (48 bytes), expires, rqueue, wqueue, uid, inode.
_REPLY: Final = struct.Struct("=BBBB48sIIIII")
_REPLY_BYTES: Final = 8192


class _Connected(Protocol):
    def getsockname(self) -> Any: ...
    def getpeername(self) -> Any: ...


def _request(client: tuple[str, int], server: tuple[str, int]) -> bytes:
    body = _REQUEST.pack(
        socket.AF_INET,
        socket.IPPROTO_TCP,
        0,
        _ALL_STATES,
        socket.htons(client[1]),
        socket.htons(server[1]),
        socket.inet_aton(client[0]).ljust(16, b"\0"),
        socket.inet_aton(server[0]).ljust(16, b"\0"),
        0,
        _NO_COOKIE,
        _NO_COOKIE,
    )
    return _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + body


def client_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the IPv4 TCP socket at `client` that is connected to `server`, as this kernel records
    it; None when it cannot say (not loopback, no such socket, no sock_diag)."""
    if not (client[0].startswith("127.") and server[0].startswith("127.")):
        return None
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.sendto(_request(client, server), (0, 0))
            reply = diag.recv(_REPLY_BYTES)
    except OSError:
        return None
    if len(reply) < _HEADER.size + _REPLY.size:
        return None
    _length, kind, _flags, _seq, _pid = _HEADER.unpack_from(reply)
    if kind != _SOCK_DIAG_BY_FAMILY:  # NLMSG_ERROR: no such socket (it went away), or the query refused
        return None
    uid: int = _REPLY.unpack_from(reply, _HEADER.size)[8]
    return uid


def same_user_over_loopback(sock: _Connected) -> bool:
    """Whether the client of the accepted loopback TCP connection `sock` runs as this process's user."""
    try:
        server, client = sock.getsockname(), sock.getpeername()
    except OSError:
        return False
    return client_uid(client, server) == os.geteuid()
