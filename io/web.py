# `harness web`: a small page on loopback that shows one team live and offers the owner's actions, served
# beside a running daemon (it needs nothing from the daemon but its ordinary `team` RPC, so the daemon itself
# stays a pure WebSocket endpoint).
#
# Authority: the page never holds the owner token. The URL this server prints carries a one-time launch
# ticket in its fragment, which a browser never sends in a request line, so it reaches no log. The page sends
# it in the first WebSocket frame and gets a session for reconnects; this server then relays the page's
# requests to the daemon with the owner token added, allowing only what the page offers (reads, pause, resume,
# archive, cancel, and the checks), for this server's team only. A member key can never be asked for. The
# board is read (`board_get`) and never written: the page relays no `board` command.
#
# Each page connection gets its own daemon connection (the daemon's Unix socket), located afresh through
# daemon.json, so a daemon restart costs the page one reconnect; the page keeps the newest revision it saw.
#
# This is the one TCP listener harness keeps, so anything on the machine (and any web page in a browser) can
# reach it: a Host that is not this server's own loopback address (DNS rebinding) and a foreign Origin are
# refused before any upgrade, the page's frames are small and parsed within bounds, and the listener guard
# (io/listeners.py) caps connections and drops one that has not presented a valid ticket in time.
from __future__ import annotations

import collections
import hmac
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import h11
import trio
from trio_websocket import (
    ConnectionClosed,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
    wrap_server_stream,
)

from harness.core.bounded_json import JsonRefused, parse_json
from harness.io import home as homes
from harness.io.client import REPLY_BYTES, ClientError, incompatibility, locate_socket
from harness.io.listeners import (
    Listener,
    ListenerLimits,
    Slot,
    close_websocket,
    open_local_stream,
    raise_open_files_limit,
)
from harness.io.loopback_peer import same_user_over_loopback
from harness.io.rpc import (
    INCOMPATIBLE,
    PROTOCOL,
    REQUEST_TYPE,
    RESULT_TYPE,
    UNAUTHORIZED,
    FrameError,
    error_frame,
    parse_frame,
    request_frame,
)

HOST: Final = "127.0.0.1"
STATIC: Final = Path(__file__).parent / "web_static"
FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
SOCKET_PATH: Final = "/ws"
# What the page may ask the daemon for. `key` (a member's private key), membership edits and board commands
# are absent; the board is shown read-only.
PAGE_ACTIONS: Final = frozenset(
    {"capabilities", "get", "members", "status", "subscribe", "pause", "resume", "archive", "cancel"}
    | {"agent_show", "board_get"}
)
# A request head larger than this is not a browser asking for one of three files.
MAX_HEAD_BYTES: Final = 16 * 1024
# The page sends a hello and small requests (ids, no texts); a larger frame closes its connection (1009).
PAGE_FRAME_BYTES: Final = 16 * 1024
# Bounds on what the page side can make this server hold (each page load mints nothing; only the CLI does).
MAX_TICKETS: Final = 16
MAX_SESSIONS: Final = 64
# A launch ticket is for opening the page now, and a session for a page that comes back: one copied out of a
# terminal's scrollback, a shell's history or a browser's storage later is worth nothing. A session's time
# runs from its last use (redeemed, or a page holding it closed), so an open page never loses it.
TICKET_SECONDS: Final = 300.0
SESSION_IDLE_SECONDS: Final = 12 * 3600.0
# From accept to a redeemed ticket (or a served file); a connection that takes longer is dropped.
HELLO_SECONDS: Final = 10.0
WEB_LIMITS: Final = ListenerLimits(max_connections=64, handshake_seconds=HELLO_SECONDS)
DAEMON_SECONDS: Final = 10.0
# Close codes the page reads: 4401 refused authority (get a new URL), 1013 daemon not usable (try again).
REFUSED: Final = 4401
TRY_AGAIN: Final = 1013


class _Replay(trio.abc.Stream):
    """A socket stream that first gives back the bytes already read while looking at the request head."""

    def __init__(self, head: bytes, inner: trio.SocketStream) -> None:
        self._head = head
        self._inner = inner

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return await self._inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._inner.aclose()


def _keep(held: dict[str, float], key: str, at: float, most: int) -> None:
    """`key` used `at`, moved to the newest end of `held`; the oldest beyond `most` lapse."""
    held.pop(key, None)
    held[key] = at
    while len(held) > most:
        del held[next(iter(held))]


def _forget_before(held: dict[str, float], oldest: float) -> None:
    """Every entry of `held` last used before `oldest` lapses (they are in order of use)."""
    while held and next(iter(held.values())) < oldest:
        del held[next(iter(held))]


def _header(request: h11.Request, name: bytes) -> str | None:
    for key, value in request.headers:
        if key == name:
            return value.decode("latin-1")
    return None


class WebServer:
    """Serves the page of `team_id` next to the daemon of `home`. `await nursery.start(server.run, port)`."""

    def __init__(
        self,
        home: Path,
        team_id: str,
        *,
        daemon_socket: Path | None = None,
        limits: ListenerLimits = WEB_LIMITS,
        log: Callable[[str], None] = lambda line: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self.team_id = team_id
        self.daemon_socket = daemon_socket
        self.port = 0
        # A TCP port: the kernel's sock_diag names the client's user (io/loopback_peer.py), as SO_PEERCRED
        # does on the Unix sockets, and another user's connection is closed before a byte of it is read.
        self.listener = Listener("web", limits, log, peer_ok=lambda s: same_user_over_loopback(s.socket))
        self._log = log
        self._clock = clock
        self._tickets: dict[str, float] = {}  # ticket -> when it was minted, oldest first
        self._sessions: dict[str, float] = {}  # session -> when it was last used, least recently first
        self._open: collections.Counter[str] = collections.Counter()  # sessions of open pages

    # --- authority ------------------------------------------------------------------------------------------

    def mint_ticket(self) -> str:
        """A new one-time launch ticket, good for TICKET_SECONDS; the oldest unused one lapses beyond the
        bound."""
        ticket = secrets.token_urlsafe(32)
        _keep(self._tickets, ticket, self._clock(), MAX_TICKETS)
        return ticket

    def url(self, ticket: str) -> str:
        return f"http://{HOST}:{self.port}/#ticket={ticket}"

    def _redeem(self, hello: object) -> str | None:
        """A session for a valid hello (a ticket, spent here, or a known session), else None."""
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            return None
        ticket, session = hello.get("ticket"), hello.get("session")
        now = self._clock()
        for held in self._open:  # an open page uses its session all along
            self.touch(held)
        _forget_before(self._tickets, now - TICKET_SECONDS)
        _forget_before(self._sessions, now - SESSION_IDLE_SECONDS)
        if isinstance(session, str):
            known = [s for s in self._sessions if hmac.compare_digest(s.encode(), session.encode())]
            if known:
                self.touch(known[0])
            return known[0] if known else None
        if not isinstance(ticket, str):
            return None
        spent = [t for t in self._tickets if hmac.compare_digest(t.encode(), ticket.encode())]
        if not spent:
            return None
        del self._tickets[spent[0]]
        fresh = secrets.token_urlsafe(32)
        _keep(self._sessions, fresh, now, MAX_SESSIONS)
        return fresh

    @property
    def open_pages(self) -> int:
        """Pages connected with a session now."""
        return sum(self._open.values())

    def touch(self, session: str) -> None:
        """`session` was used now: its idle time starts again (a session that has lapsed stays lapsed)."""
        if session in self._sessions:
            _keep(self._sessions, session, self._clock(), MAX_SESSIONS)

    # --- HTTP -----------------------------------------------------------------------------------------------

    async def run(
        self, port: int = 0, *, task_status: trio.TaskStatus[WebServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        raise_open_files_limit()
        (listener,) = await trio.open_tcp_listeners(port, host=HOST)  # one address, one listener
        self.port = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(self.listener.serve, listener, self._serve)
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:  # what it refused and dropped, for whoever ran it
                counts = ", ".join(f"{key} {value}" for key, value in self.listener.stats.view().items())
                self._log(f"stopped; page listener: {counts}")

    def _origins(self) -> set[str]:
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    async def _serve(self, stream: trio.SocketStream, slot: Slot) -> None:
        """One HTTP request: a file, or the page's WebSocket. The listener guard drops the connection when
        the page has not redeemed a ticket within HELLO_SECONDS of connecting."""
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        head = bytearray()
        event: Any = h11.NEED_DATA
        while event is h11.NEED_DATA:
            data = await stream.receive_some(MAX_HEAD_BYTES)
            head += data
            connection.receive_data(data)
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError:
                self.listener.stats.refused_frames += 1
                return
        if not isinstance(event, h11.Request):
            return
        # DNS rebinding: a page of another name that resolves here must not read the team.
        if _header(event, b"host") not in self._origins():
            self.listener.stats.refused_peers += 1
            await self._respond(stream, connection, 421, b"misdirected request\n", "text/plain")
            return
        path = event.target.decode("latin-1").split("?", 1)[0]
        upgrade = (_header(event, b"upgrade") or "").lower() == "websocket"
        if path == SOCKET_PATH and upgrade:
            origin = _header(event, b"origin") or ""
            if origin.removeprefix("http://") not in self._origins():
                self.listener.stats.refused_peers += 1
                await self._respond(stream, connection, 403, b"foreign origin\n", "text/plain")
                return
            await self._socket(_Replay(bytes(head), stream), slot)
            return
        found = FILES.get(path)
        if event.method != b"GET" or found is None:
            await self._respond(stream, connection, 404, b"not found\n", "text/plain")
            return
        name, kind = found
        await self._respond(stream, connection, 200, (STATIC / name).read_bytes(), kind)

    async def _respond(
        self, stream: trio.SocketStream, connection: h11.Connection, status: int, body: bytes, kind: str
    ) -> None:
        policy = (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            f"connect-src 'self' ws://{HOST}:{self.port} ws://localhost:{self.port}; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        headers = [
            ("content-type", kind),
            ("content-length", str(len(body))),
            ("cache-control", "no-store"),
            ("content-security-policy", policy),
            ("referrer-policy", "no-referrer"),
            ("x-content-type-options", "nosniff"),
            ("connection", "close"),
        ]
        data = connection.send(h11.Response(status_code=status, headers=headers))
        data += connection.send(h11.Data(data=body))
        data += connection.send(h11.EndOfMessage())
        await stream.send_all(data)

    # --- the page's WebSocket -------------------------------------------------------------------------------

    async def _socket(self, stream: _Replay, slot: Slot) -> None:
        async with trio.open_nursery() as nursery:
            request = await wrap_server_stream(nursery, stream, max_message_size=PAGE_FRAME_BYTES)
            page = await request.accept()
            try:
                await self._page(page, slot)
            except ConnectionClosed:
                pass
            finally:
                if page.closed is not None and page.closed.code == 1009:
                    self.listener.stats.refused_frames += 1
                await close_websocket(page)
            nursery.cancel_scope.cancel()

    async def _page(self, page: WebSocketConnection, slot: Slot) -> None:
        hello = parse_json(await page.get_message(), max_bytes=PAGE_FRAME_BYTES)
        session = None if isinstance(hello, JsonRefused) else self._redeem(hello)
        if session is None:
            if isinstance(hello, JsonRefused):
                self.listener.stats.refused_frames += 1
            else:
                self.listener.stats.refused_peers += 1
            await _send(
                page,
                {
                    "type": "web_refused",
                    "detail": "this page link was already used, has lapsed or is "
                    "unknown; run `harness web` again for a new one",
                },
            )
            await close_websocket(page, REFUSED, "refused")
            return
        slot.mark_ready()
        self._open[session] += 1
        try:
            with slot.working():  # a page with a session stays as long as it is open
                await self._session(page, session)
        finally:
            self._open[session] -= 1
            self._open += collections.Counter()  # drops the sessions no page holds any more
            self.touch(session)  # its idle time starts when the page closes

    async def _session(self, page: WebSocketConnection, session: str) -> None:
        await _send(
            page,
            {
                "type": "web_hello",
                "session": session,
                "teamId": self.team_id,
            },
        )
        try:
            where, info = locate_socket(self.home, self.daemon_socket)
            # Short, for a phone's width: the page shows it in one line.
            daemon_name = f"daemon pid {info['pid']}" if info is not None else f"daemon at {where.name}"
            stream = await open_local_stream(where)
        except ClientError as error:
            await self._unusable(page, "gone", error.detail)
            return
        except OSError as error:
            await self._unusable(page, "gone", f"no {daemon_name} answers ({error.strerror or error})")
            return
        # The stream is ours to close whatever happens to the handshake (a daemon that is stopping may
        # accept and then drop the connection half way).
        async with stream, trio.open_nursery() as reader:
            try:
                with trio.fail_after(DAEMON_SECONDS):
                    daemon = await wrap_client_stream(
                        reader, stream, "localhost", "/", max_message_size=REPLY_BYTES
                    )
                    problem = await _check(daemon)
                if problem is not None:
                    await self._unusable(page, *problem)
                    return
                await self._relay(page, daemon, daemon_name)
            except (ConnectionClosed, HandshakeError, trio.TooSlowError, OSError) as error:
                if page.closed is None:
                    await self._unusable(page, "gone", f"the {daemon_name} went away ({error})")
            finally:
                reader.cancel_scope.cancel()

    async def _relay(self, page: WebSocketConnection, daemon: WebSocketConnection, daemon_name: str) -> None:
        await _send(page, {"type": "web_link", "state": "live", "detail": daemon_name})
        token = homes.read_owner_token(self.home)
        async with trio.open_nursery() as pumps:
            pumps.start_soon(self._to_daemon, page, daemon, token, pumps.cancel_scope)
            pumps.start_soon(_to_page, daemon, page, pumps.cancel_scope)
        if daemon.closed is not None and page.closed is None:
            await self._unusable(page, "gone", "the daemon closed the connection")
        await close_websocket(daemon)

    async def _unusable(self, page: WebSocketConnection, state: str, detail: str) -> None:
        await _send(page, {"type": "web_link", "state": state, "detail": detail})
        await close_websocket(page, TRY_AGAIN, state)

    async def _to_daemon(
        self,
        page: WebSocketConnection,
        daemon: WebSocketConnection,
        token: str | None,
        scope: trio.CancelScope,
    ) -> None:
        try:
            while True:
                message = await page.get_message()
                frame = self._vet(message, token)
                if isinstance(frame, tuple):
                    await page.send_message(error_frame(*frame))
                else:
                    await daemon.send_message(frame)
        except ConnectionClosed:
            scope.cancel()

    def _vet(self, message: str | bytes, token: str | None) -> str | tuple[str | None, str, str]:
        """The frame to relay (owner token added), or the (requestId, error, detail) to answer instead."""
        try:
            frame = parse_frame(message)
        except FrameError as error:
            self.listener.stats.refused_frames += 1
            return (None, "bad_request", error.detail)
        request_id = frame.get("requestId")
        if not isinstance(request_id, str) or not request_id:
            return (None, "bad_request", "every request names its requestId")
        action = frame.get("action")
        if frame.get("type") != REQUEST_TYPE or action not in PAGE_ACTIONS:
            return (request_id, UNAUTHORIZED, f"the page may not ask for {action!r}")
        fields = {k: v for k, v in frame.items() if k not in {"type", "requestId", "action", "teamId"}}
        fields.pop("memberKey", None)
        fields.pop("ownerToken", None)
        # Always this server's team: an action that names none (agent_show) is then scoped to its roster.
        return request_frame(request_id, action, team_id=self.team_id, owner_token=token, fields=fields)


async def _to_page(daemon: WebSocketConnection, page: WebSocketConnection, scope: trio.CancelScope) -> None:
    try:
        while True:
            await page.send_message(await daemon.get_message())
    except ConnectionClosed:
        scope.cancel()


async def _check(daemon: WebSocketConnection) -> tuple[str, str] | None:
    """(state, why) when the daemon cannot serve the page, the same judgement as the CLI's."""
    request_id = "web-" + secrets.token_hex(8)
    await daemon.send_message(request_frame(request_id, "capabilities"))
    with trio.fail_after(DAEMON_SECONDS):
        while True:
            reply = parse_json(await daemon.get_message(), max_bytes=REPLY_BYTES)
            if isinstance(reply, dict) and reply.get("requestId") == request_id:
                break
    if reply.get("type") != RESULT_TYPE or not isinstance(reply.get("result"), dict):
        return (INCOMPATIBLE, f"the daemon does not speak {PROTOCOL}: {reply.get('detail', reply)}")
    result = reply["result"]
    problem = incompatibility(result.get("protocol"), result.get("protocolRevision"))
    return None if problem is None else (INCOMPATIBLE, problem)


async def _send(page: WebSocketConnection, frame: dict[str, Any]) -> None:
    await page.send_message(json.dumps(frame, ensure_ascii=False, separators=(",", ":")))


async def serve_until_signalled(server: WebServer, port: int, announce: Callable[[WebServer], None]) -> None:
    """Run `server` until SIGTERM or SIGINT; `announce` gets it once it listens (to print the URL)."""
    import signal

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run, port)
            announce(server)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                return
