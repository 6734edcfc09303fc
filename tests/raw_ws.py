# A hostile WebSocket client for the listener tests: it writes bytes a well-behaved library never would
# (truncated frames, text frames of invalid UTF-8, lengths it never sends, half a handshake), so the tests
# can reach a listener with exactly the attack. Blocking standard-library sockets; frames are built by hand.
from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
from pathlib import Path

from harness.io import local_socket

TEXT, BINARY, CLOSE = 0x1, 0x2, 0x8
KEY = base64.b64encode(b"harness-raw-test").decode()
TIMEOUT = 60.0  # seconds a blocking read may wait for the listener: generous, for a loaded two-core machine


def open_unix(path: Path, timeout: float = TIMEOUT) -> socket.socket:
    return local_socket.connect(path, timeout)


def open_tcp(port: int, timeout: float = TIMEOUT) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def handshake_bytes(host: str, path: str = "/", origin: str | None = None) -> bytes:
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {KEY}",
        "Sec-WebSocket-Version: 13",
    ]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def upgrade(sock: socket.socket, host: str = "localhost", path: str = "/", origin: str | None = None) -> str:
    """Send a handshake and read the response head; returns its status line."""
    sock.sendall(handshake_bytes(host, path, origin))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head.split(b"\r\n", 1)[0].decode(errors="replace")


def frame(opcode: int, payload: bytes, *, fin: bool = True, declared: int | None = None) -> bytes:
    """One masked client frame; `declared` announces another length than the payload's (a truncated frame)."""
    length = len(payload) if declared is None else declared
    head = bytes([(0x80 if fin else 0) | opcode])
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    mask = os.urandom(4)
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")
    return head + mask + masked


def text(payload: str | bytes) -> bytes:
    return frame(TEXT, payload.encode() if isinstance(payload, str) else payload)


def read_frame(sock: socket.socket) -> tuple[int, bytes] | None:
    """The next server frame (unmasked), or None when the connection ended."""

    def exactly(count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    try:
        head = exactly(2)
        if head is None:
            return None
        length = head[1] & 0x7F
        if length == 126:
            extended = exactly(2)
            length = struct.unpack("!H", extended)[0] if extended else 0
        elif length == 127:
            extended = exactly(8)
            length = struct.unpack("!Q", extended)[0] if extended else 0
        payload = exactly(length)
    except (ConnectionError, TimeoutError):
        return None
    return None if payload is None else (head[0] & 0x0F, payload)


def reply(sock: socket.socket) -> bytes | None:
    """The next text frame's payload; None once the server closed (a close frame, or the socket ended)."""
    while True:
        got = read_frame(sock)
        if got is None or got[0] == CLOSE:
            return None
        if got[0] == TEXT:
            return got[1]


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes this connection within `timeout` seconds (whatever it sends first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset by the server
        return True
    return True


def close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
