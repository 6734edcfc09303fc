# What every listener of harness (the daemon's RPC socket, the remote gateway, the `harness web` page) shares
# so that no peer can end or exhaust the process: a cap on open connections (at the cap the longest-idle one
# makes room, so a flood of idle connections cannot lock out a working client), a deadline to finish the
# handshake (the web page: to present its ticket), an idle deadline for connections with nothing in flight,
# and one boundary per connection that turns any exception into a counted close of that connection alone.
# trio-websocket's `serve_websocket` lets a handler's exception escape into the server's nursery, which is
# the daemon's: one bad frame ended the whole daemon. Here each connection gets its own task and nursery.
from __future__ import annotations

import errno
import resource
import socket
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

import attrs
import h11
import trio
import wsproto.utilities
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, wrap_server_stream

from harness.io.local_socket import addressable, check_server, listen

# accept() failures that mean "out of resources for now", not a broken listener.
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_DISCONNECTS: Final = (ConnectionClosed, HandshakeError, trio.BrokenResourceError, trio.ClosedResourceError)
# What the protocol libraries raise when the peer breaks HTTP or WebSocket in a way they do not absorb (a
# frame over the size limit while the connection is already closing, a request head after a response).
_VIOLATIONS: Final = (
    h11.LocalProtocolError,
    h11.RemoteProtocolError,
    wsproto.utilities.LocalProtocolError,
    wsproto.utilities.RemoteProtocolError,
)
# A browser always sends Origin with a WebSocket handshake; the CLI never does. The local sockets refuse it.
_ORIGIN: Final = b"origin"
# How long a close waits for the peer's half of the closing handshake; a peer that never answers would
# otherwise keep its connection (trio-websocket waits without a bound).
CLOSE_SECONDS: Final = 2.0


@attrs.frozen
class ListenerLimits:
    max_connections: int = 128  # open at once; at the cap the longest-idle connection is closed to admit one
    handshake_seconds: float = 5.0  # accepted to handshake done (the web page: to its ticket redeemed)
    idle_seconds: float = 300.0  # nothing in flight and no complete frame for this long: closed
    send_seconds: float = 30.0  # a write the peer has not finished taking after this long: closed


@attrs.define
class ListenerStats:
    accepted: int = 0
    open: int = 0
    refused_peers: int = 0  # another uid on a local socket; a foreign Origin or Host; no valid ticket
    refused_frames: int = 0  # a frame the bounded parser or the size limit refused
    dropped: int = 0  # closed by the cap, a deadline, or refused at the cap
    internal_errors: int = 0  # a fault of harness while serving one connection (closed, logged)

    def view(self) -> dict[str, int]:
        return {
            "accepted": self.accepted,
            "open": self.open,
            "refusedPeers": self.refused_peers,
            "refusedFrames": self.refused_frames,
            "droppedConnections": self.dropped,
            "internalErrors": self.internal_errors,
        }


@attrs.define(eq=False)
class Slot:
    """One admitted connection. Busy while a request of it is in flight; otherwise its deadlines run."""

    scope: trio.CancelScope
    since: float
    ready: bool = False
    busy: int = 0
    dropped: bool = False
    sends: int = 0  # writes to the peer under way
    sent_at: float = 0.0  # when the last write ended, or the first of those under way began

    def touch(self) -> None:
        self.since = trio.current_time()

    def mark_ready(self) -> None:
        self.ready = True
        self.touch()

    @contextmanager
    def sending(self) -> Iterator[None]:
        """A write to the peer: it must be taken whole within the listener's `send_seconds`, busy or not."""
        if not self.sends:
            self.sent_at = trio.current_time()
        self.sends += 1
        try:
            yield
        finally:
            self.sends -= 1
            self.sent_at = trio.current_time()

    @contextmanager
    def working(self) -> Iterator[None]:
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.touch()


class _TimedStream(trio.abc.HalfCloseableStream):
    """A connection's stream whose every write runs the listener's send deadline (`Slot.sending`). A peer
    that never reads would otherwise keep a reply waiting, and its connection busy, past every other
    deadline: a review filled the daemon's 128 connections so, and its owner was refused at the door."""

    def __init__(self, stream: trio.SocketStream, slot: Slot) -> None:
        self.stream = stream
        self.slot = slot

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with self.slot.sending():
            await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


StreamHandler = Callable[[trio.abc.HalfCloseableStream, Slot], Awaitable[None]]
SocketHandler = Callable[[WebSocketConnection, Slot], Awaitable[None]]


async def close_websocket(ws: WebSocketConnection, code: int = 1000, reason: str | None = None) -> None:
    """Close `ws` with `code`, waiting at most CLOSE_SECONDS for the peer to answer."""
    with trio.move_on_after(CLOSE_SECONDS), suppress(Exception):
        await ws.aclose(code, reason)


async def open_local_stream(path: Path) -> trio.SocketStream:
    """A trio stream to a local socket served by this user (the daemon's, from the web page server); its path
    may exceed sun_path (io/local_socket.py). ForeignServer when another user serves it."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with addressable(path) as name:
            await sock.connect(name)
        check_server(sock, path)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


def local_listener(path: Path) -> trio.SocketListener:
    """A trio listener on a new local socket at `path` (mode 0600)."""
    return trio.SocketListener(trio.socket.from_stdlib_socket(listen(path)))


def raise_open_files_limit() -> None:
    """Let this process hold as many descriptors as the hard limit allows (every connection is one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Listener:
    """One listening endpoint's guard and counters. `peer_ok` (the local sockets' uid check) runs on each
    accepted stream before anything is read from it."""

    def __init__(
        self,
        name: str,
        limits: ListenerLimits,
        log: Callable[[str], None],
        *,
        peer_ok: Callable[[trio.SocketStream], bool] | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        self.stats = ListenerStats()
        self._log = log
        self._peer_ok = peer_ok
        self._open: set[Slot] = set()

    # --- admission and deadlines --------------------------------------------------------------------------

    def _admit(self) -> Slot | None:
        if len(self._open) >= self.limits.max_connections:
            idle = [slot for slot in self._open if not slot.busy and not slot.dropped]
            if not idle:
                self.stats.dropped += 1
                return None
            self._drop(min(idle, key=lambda slot: slot.since))
        slot = Slot(trio.CancelScope(), trio.current_time())
        self._open.add(slot)
        self.stats.accepted += 1
        self.stats.open = len(self._open)
        return slot

    def _drop(self, slot: Slot) -> None:
        if not slot.dropped:
            slot.dropped = True
            self.stats.dropped += 1
            slot.scope.cancel()

    def _release(self, slot: Slot) -> None:
        self._open.discard(slot)
        self.stats.open = len(self._open)

    async def _reap(self) -> None:
        limits = self.limits
        shortest = min(limits.handshake_seconds, limits.idle_seconds, limits.send_seconds)
        tick = min(1.0, max(0.02, shortest / 4))
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            for slot in list(self._open):
                allowed = limits.idle_seconds if slot.ready else limits.handshake_seconds
                stalled = slot.sends and now - slot.sent_at > limits.send_seconds
                if stalled or (not slot.busy and now - slot.since > allowed):
                    self._drop(slot)

    # --- serving ------------------------------------------------------------------------------------------

    async def serve(
        self,
        listener: trio.SocketListener,
        handle: StreamHandler,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until cancelled; each connection runs in its own task, behind the guard."""
        async with listener, trio.open_nursery() as nursery:
            nursery.start_soon(self._reap)
            task_status.started()
            while True:
                try:
                    stream = await listener.accept()
                except OSError as error:
                    # Out of descriptors or memory: wait for connections to end instead of failing;
                    # anything else is logged, and serving goes on too.
                    if error.errno not in _EXHAUSTED:
                        self._log(f"{self.name}: accept failed: {error}")
                    await trio.sleep(0.1)
                    continue
                nursery.start_soon(self._connection, stream, handle)

    async def _connection(self, stream: trio.SocketStream, handle: StreamHandler) -> None:
        slot: Slot | None = None
        try:
            if self._peer_ok is not None and not self._peer_ok(stream):
                self.stats.refused_peers += 1
                return
            slot = self._admit()
            if slot is None:
                return
            with slot.scope:
                await handle(_TimedStream(stream, slot), slot)
        except* _DISCONNECTS:
            pass  # the peer went away: its connection ends, nothing else
        except* _VIOLATIONS:
            self.stats.refused_frames += 1  # the peer broke the protocol: the same
        except* Exception:
            self.fault()
        finally:
            if slot is not None:
                self._release(slot)
            with trio.CancelScope(shield=True), suppress(Exception):
                await stream.aclose()

    def fault(self) -> None:
        """Count and log a fault of harness met while serving one connection (which is closed)."""
        self.stats.internal_errors += 1
        self._log(f"{self.name}: internal error while serving a connection:\n{traceback.format_exc()}")

    def websockets(self, handler: SocketHandler, max_message_size: int) -> StreamHandler:
        """A stream handler that completes a WebSocket handshake (refusing a browser's, which carries an
        Origin) and hands the connection to `handler`. A frame above `max_message_size` closes the connection
        (1009) and counts as a refused frame."""

        async def handle(stream: trio.abc.HalfCloseableStream, slot: Slot) -> None:
            async with trio.open_nursery() as nursery:
                request = await wrap_server_stream(nursery, stream, max_message_size=max_message_size)
                if any(name.lower() == _ORIGIN for name, _ in request.headers):
                    self.stats.refused_peers += 1
                    await request.reject(403, body=b"a local socket takes no browser connection\n")
                    nursery.cancel_scope.cancel()
                    return
                ws = await request.accept()
                slot.mark_ready()
                try:
                    await handler(ws, slot)
                finally:
                    if ws.closed is not None and ws.closed.code == 1009:
                        self.stats.refused_frames += 1
                    nursery.cancel_scope.cancel()

        return handle
