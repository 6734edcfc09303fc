# The relay between machines, and its client. It routes opaque blobs by machine address and nothing else:
# it never holds a key, a body or a team name, and stores nothing. A machine proves that it owns its address
# (the fingerprint of its X25519 public key, see seal.fingerprint) by opening a box the relay sealed to it
# with a fresh relay key. Every connection has a bounded outbound queue (frames and bytes) and a send
# deadline; a peer that stops reading loses frames (the sender gets a `dropped` notice) and then its
# connection, so it cannot pin the relay's memory or slow anyone else. A frame for an address that is not
# connected is answered at once with an `offline` notice, never silently lost.
#
# Anyone can reach the relay, and making a key costs nothing, so nothing a connection sends can end it or
# lock paired machines out. The relay accepts TCP itself and keeps two tiers: connections still proving an
# address (at most `max_pending`, each with `hello_timeout` and `hello_bytes` from accept to welcome; a new
# one past the cap closes the oldest, so a flood only shortens how long each may take) and authenticated
# ones (at most `max_connections`, one per address; a new one past the cap closes the one that routed a
# frame least recently, so a machine pushed out comes back at its next retry and strangers must open
# `max_connections` more connections to push it out again). What the authenticated connections make the relay
# hold (the unfinished message each is sending, the frames queued to each) shares one relay-wide budget,
# `held_bytes`: past it, the connection that has held bytes the longest is closed, so strangers trickling
# unfinished messages over many connections hold at most the budget, and a machine that sends and reads at
# the pace of its link is not the one closed. Every message is bounded before it is parsed
# (core/bounded_json); a refusal is a notice or a closed connection, counted, and logged at most once per
# kind per interval; a fault while serving one connection closes that connection only.
#
# Wire (one JSON object per WebSocket text message):
#   relay -> client  {"type":"challenge","relayKey":B64,"nonce":B64}
#   client -> relay  {"type":"hello","publicKey":B64,"proof":B64}   proof = box(client key -> relayKey,
#                                                                    nonce, "harness-relay-v1" + challenge)
#   relay -> client  {"type":"welcome","address":ADDR}
#   client -> relay  {"to":ADDR,"blob":B64,"id"?:STR}                 blob: opaque, at most `blob_bytes`
#   relay -> client  {"from":ADDR,"blob":B64}                         `from` is set by the relay
#   relay -> client  {"notice":"offline"|"dropped"|"too_large"|"bad_frame","to"?,"id"?,"detail"}
from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import traceback
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import nacl.bindings
import nacl.exceptions
import nacl.public
import trio
from trio_websocket import (
    ConnectionClosed,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
    wrap_server_stream,
)

from harness.core.bounded_json import JsonRefused, parse_json
from harness.io.seal import Identity, b64, fingerprint, unb64
from harness.io.throttled_log import ThrottledLog

HOST: Final = "127.0.0.1"
_DOMAIN: Final = b"harness-relay-v1"
_ID_CHARS: Final = 64
_ADDRESS_CHARS: Final = 32
# Every message of the wire is one flat JSON object: nothing nested is ever parsed.
_DEPTH: Final = 1
# The peer went away or broke the WebSocket protocol: its connection ends, nothing else happens.
_GONE: Final = (ConnectionClosed, HandshakeError, trio.BrokenResourceError, trio.ClosedResourceError)

OFFLINE: Final = "offline"
DROPPED: Final = "dropped"
TOO_LARGE: Final = "too_large"
BAD_FRAME: Final = "bad_frame"


@attrs.frozen
class RelayLimits:
    # A sealed team frame (at most rpc.MAX_FRAME_BYTES, escaped once inside the sealed envelope) fits.
    blob_bytes: int = 1 << 20
    queue_frames: int = 64  # per connection, waiting to be written to it
    queue_bytes: int = 8 << 20  # per connection, of those frames
    send_timeout: float = 5.0  # one write to a connection taking longer disconnects it
    drop_limit: int = 32  # frames dropped for one connection with no write to it done since: disconnected
    hello_timeout: float = 5.0  # from TCP accept to the welcome
    hello_bytes: int = 16 << 10  # read from a connection before its welcome (HTTP upgrade and hello)
    max_pending: int = 256  # connections not yet authenticated; one more closes the oldest of them
    max_connections: int = 1024  # authenticated ones; one more closes the one that routed least recently
    # Relay-wide, over authenticated connections: unfinished incoming messages and queued outgoing frames.
    # Past it, the connection that has held bytes the longest is closed.
    held_bytes: int = 256 << 20

    @property
    def message_chars(self) -> int:
        """The longest client message the relay reads: a blob in base64 plus its envelope."""
        return (self.blob_bytes + 2) // 3 * 4 + 256


class RelayError(Exception):
    """The relay refused this client (handshake) or went away."""


@attrs.define(eq=False)
class _Peer:
    address: str
    ws: WebSocketConnection
    stream: _Metered
    send: trio.MemorySendChannel[str]
    receive: trio.MemoryReceiveChannel[str]
    scope: trio.CancelScope
    queued_bytes: int = 0
    queued_at: deque[float] = attrs.Factory(deque)  # when each queued frame was queued, the oldest first
    unfinished_bytes: int = 0  # read since the last message it finished
    unfinished_since: float = 0.0
    drops_in_a_row: int = 0
    close_reason: str = ""
    let_go: bool = False  # it ended, or was closed: nothing it holds counts

    def holding_since(self) -> float:
        """Since when it makes the relay hold bytes (infinity when it holds none)."""
        since = self.queued_at[0] if self.queued_at else float("inf")
        return min(since, self.unfinished_since) if self.unfinished_bytes else since


class _Metered(trio.abc.Stream):
    """A connection's TCP stream as the WebSocket layer reads it. Until the connection is authenticated
    (`budget` None) at most `budget` bytes are read from it; past that it reads as closed, so a stranger
    cannot make the relay hold a large upgrade request or hello. Once it is, every read is told to
    `on_read` (the relay's count of what it holds), and a budget of 0 closes it from this side."""

    def __init__(self, stream: trio.abc.Stream, budget: int) -> None:
        self.stream = stream
        self.budget: int | None = budget
        self.on_read: Callable[[int], None] = _ignored
        self.exceeded = False
        self.evicted = False  # closed to admit a newer connection

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.budget is None:
            data = await self.stream.receive_some(max_bytes)
        elif self.budget <= 0:
            self.exceeded = True
            return b""
        else:
            data = await self.stream.receive_some(min(max_bytes or self.budget, self.budget))
        if self.budget is not None:  # not lifted (or closed) while this read waited
            self.budget -= len(data)
        self.on_read(len(data))
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


def _ignored(count: int) -> None:
    """A stream's reads before its connection is authenticated, and after it ends."""


def _dump(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"))


def _proven_key(
    message: str | bytes, relay_key: nacl.public.PrivateKey, nonce: bytes, limit: int
) -> bytes | str:
    """The public key a hello proves, or the reason it proves none."""
    if not isinstance(message, str):
        return "binary"
    hello = parse_json(message, max_bytes=limit, max_depth=_DEPTH)
    if isinstance(hello, JsonRefused):
        return hello.reason
    if not isinstance(hello, dict) or hello.get("type") != "hello":
        return "shape"
    public, proof = hello.get("publicKey"), hello.get("proof")
    if not isinstance(public, str) or not isinstance(proof, str):
        return "shape"
    try:
        key = unb64(public)
        opened = nacl.public.Box(relay_key, nacl.public.PublicKey(key)).decrypt(unb64(proof))
    except (ValueError, nacl.exceptions.CryptoError):  # bad base64, a key of the wrong size or order
        return "proof"
    return key if hmac.compare_digest(opened, _DOMAIN + nonce) else "proof"


class Relay:
    """`await nursery.start(relay.serve, port)` returns the port once it listens (127.0.0.1 only)."""

    def __init__(
        self,
        limits: RelayLimits = RelayLimits(),
        *,
        observe: Callable[[str, str], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.limits = limits
        self.stats: Counter[str] = Counter()
        self.port = 0
        self._observe = observe  # (direction "in"|"out", message): every byte the relay sees, for tests
        self._log = ThrottledLog(log or (lambda line: None))
        self._peers: dict[str, _Peer] = {}  # by address, the one that routed least recently first
        self._pending: dict[_Metered, trio.CancelScope] = {}  # the oldest first
        self._held = 0  # bytes the authenticated connections make it hold, within limits.held_bytes

    async def serve(
        self, port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(port, host=HOST)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started(self.port)

    def connected(self) -> list[str]:
        return sorted(self._peers)

    def pending(self) -> int:
        """Connections that have not proved an address yet."""
        return len(self._pending)

    def held(self) -> int:
        """Bytes the authenticated connections make it hold: unfinished messages, queued frames."""
        return self._held

    def _seen(self, direction: str, message: str) -> None:
        if self._observe is not None:
            self._observe(direction, message)

    def _refused(self, kind: str, detail: str) -> None:
        self.stats[kind] += 1
        self._log(kind, f"refused ({kind}): {detail}")

    async def _connection(self, stream: trio.SocketStream) -> None:
        """One TCP connection from accept to close. Nothing in it can end the relay."""
        metered = _Metered(stream, self.limits.hello_bytes)
        try:
            async with trio.open_nursery() as nursery:  # the WebSocket's reader task runs here
                proven = await self._admit(nursery, metered)
                if proven is not None:
                    metered.budget = None
                    await self._serve_peer(*proven, metered)
                nursery.cancel_scope.cancel()
        except* _GONE:
            pass
        except* Exception:
            self.stats["internal_errors"] += 1
            self._log("internal_errors", f"internal error; closed that connection:\n{traceback.format_exc()}")
        finally:
            await trio.aclose_forcefully(stream)

    async def _admit(
        self, nursery: trio.Nursery, metered: _Metered
    ) -> tuple[WebSocketConnection, str] | None:
        """The WebSocket handshake and the proof of address, as a pending connection under the hello
        deadline and byte budget: (connection, address), or None when it proved none (counted)."""
        limits = self.limits
        if len(self._pending) >= limits.max_pending:
            oldest = next(iter(self._pending))
            oldest.evicted = True
            self._pending.pop(oldest).cancel()
            self._refused("pending_evicted", f"{limits.max_pending} connections wait to authenticate")
        scope = trio.CancelScope(deadline=trio.current_time() + limits.hello_timeout)
        self._pending[metered] = scope
        proven = None
        try:
            with scope:
                request = await wrap_server_stream(
                    nursery, metered, max_message_size=2 * limits.message_chars
                )
                proven = await self._authenticate(await request.accept())
        finally:
            self._pending.pop(metered, None)
        if metered.exceeded:
            self._refused("hello_too_large", f"more than {limits.hello_bytes} bytes before the welcome")
        elif scope.cancelled_caught and not metered.evicted:
            self._refused("auth_timeouts", f"no proof of address within {limits.hello_timeout:g} s")
        return proven

    async def _authenticate(self, ws: WebSocketConnection) -> tuple[WebSocketConnection, str] | None:
        relay_key = nacl.public.PrivateKey.generate()
        nonce = secrets.token_bytes(32)
        challenge = _dump(
            {"type": "challenge", "relayKey": b64(bytes(relay_key.public_key)), "nonce": b64(nonce)}
        )
        try:
            self._seen("out", challenge)
            await ws.send_message(challenge)
            message = await ws.get_message()
        except ConnectionClosed:
            return None
        self._seen("in", message if isinstance(message, str) else "<binary>")
        key = _proven_key(message, relay_key, nonce, self.limits.hello_bytes)
        if isinstance(key, str):
            self.stats["auth_failures"] += 1
            self._refused(f"hello_{key}", "a hello that proves no address")
            await ws.aclose(4001, "authentication failed")
            return None
        address = fingerprint(key)
        welcome = _dump({"type": "welcome", "address": address})
        try:
            self._seen("out", welcome)
            await ws.send_message(welcome)
        except ConnectionClosed:
            return None
        return ws, address

    async def _serve_peer(self, ws: WebSocketConnection, address: str, stream: _Metered) -> None:
        old = self._peers.pop(address, None)
        if old is not None:  # the same machine reconnected: the newer connection wins
            self._disconnect(old, "replaced by a newer connection")
        elif len(self._peers) >= self.limits.max_connections:
            quiet = self._peers.pop(next(iter(self._peers)))
            self._disconnect(quiet, "the relay is full and this connection routed least recently")
            self._refused("quiet_evicted", f"{self.limits.max_connections} connections are authenticated")
        send, receive = trio.open_memory_channel[str](self.limits.queue_frames)
        peer = _Peer(address, ws, stream, send, receive, trio.CancelScope())
        self._peers[address] = peer
        stream.on_read = lambda count: self._read(peer, count)
        self.stats["connections"] += 1
        try:
            with peer.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, peer)
                    await self._reader(peer)
                    nursery.cancel_scope.cancel()
        finally:
            if self._peers.get(address) is peer:
                del self._peers[address]
            self._let_go(peer)
            with trio.move_on_after(1.0) as cleanup:
                cleanup.shield = True
                await ws.aclose(4008 if peer.close_reason else 1000, peer.close_reason or "bye")

    def _disconnect(self, peer: _Peer, reason: str) -> None:
        peer.close_reason = reason
        peer.scope.cancel()

    def _let_go(self, peer: _Peer) -> None:
        """It ends: nothing it held counts any more, and nothing more is read from it."""
        self._held -= peer.unfinished_bytes + peer.queued_bytes
        peer.unfinished_bytes = peer.queued_bytes = 0
        peer.queued_at.clear()
        peer.let_go = True
        peer.stream.budget = 0
        peer.stream.on_read = _ignored  # the peer's closure on it: freed by reference counts, no cycle left

    def _read(self, peer: _Peer, count: int) -> None:
        if count == 0 or peer.let_go:
            return
        if peer.unfinished_bytes == 0:
            peer.unfinished_since = trio.current_time()
        peer.unfinished_bytes += count
        self._held += count
        self._room_for(0, peer)

    def _finished(self, peer: _Peer) -> None:
        """It finished a message (the relay took it from the WebSocket layer)."""
        self._held -= peer.unfinished_bytes
        peer.unfinished_bytes = 0

    def _room_for(self, count: int, peer: _Peer) -> bool:
        """Close the connections that have held bytes the longest until `count` more bytes for `peer` fit
        within `held_bytes`; False when `peer` itself was closed for it."""
        while self._held + count > self.limits.held_bytes:
            longest = min(self._peers.values(), key=_Peer.holding_since, default=None)
            if longest is None or longest.holding_since() == float("inf"):
                return False
            del self._peers[longest.address]
            self._let_go(longest)
            self._disconnect(longest, "the relay holds too much and this connection held bytes the longest")
            self._refused("held_evicted", f"the connections hold more than {self.limits.held_bytes} bytes")
            if longest is peer:
                return False
        return True

    async def _writer(self, peer: _Peer) -> None:
        async for message in peer.receive:
            if peer.let_go:  # closed for the budget while this frame was being handed over
                break
            peer.queued_bytes -= len(message)
            self._held -= len(message)
            peer.queued_at.popleft()
            with trio.move_on_after(self.limits.send_timeout) as deadline:
                try:
                    await peer.ws.send_message(message)
                except ConnectionClosed:
                    break
            if deadline.cancelled_caught:
                self.stats["slow_disconnects"] += 1
                self._disconnect(peer, "too slow to read its frames")
                return
            peer.drops_in_a_row = 0  # it reads: drops for it are a flood's, not its own stall
            self._seen("out", message)
        peer.scope.cancel()

    def _enqueue(self, peer: _Peer, message: str) -> bool:
        if peer.queued_bytes + len(message) > self.limits.queue_bytes:
            return False
        if not self._room_for(len(message), peer):
            return False
        try:
            peer.send.send_nowait(message)
        except (trio.WouldBlock, trio.ClosedResourceError):
            return False
        peer.queued_bytes += len(message)
        self._held += len(message)
        peer.queued_at.append(trio.current_time())
        return True

    def _notice(self, peer: _Peer, kind: str, detail: str, to: object = None, ref: object = None) -> None:
        self.stats[f"notice_{kind}"] += 1
        frame: dict[str, Any] = {"notice": kind, "detail": detail}
        if isinstance(to, str):
            frame["to"] = to[:_ADDRESS_CHARS]
        if isinstance(ref, str):
            frame["id"] = ref[:_ID_CHARS]
        if not self._enqueue(peer, _dump(frame)):
            self.stats["notices_lost"] += 1  # its own queue is full: it is not reading either

    def _route(self, peer: _Peer, to: str, blob: str, ref: object) -> None:
        limits = self.limits
        target = self._peers.get(to)
        if target is None:
            self.stats["offline"] += 1
            self._notice(peer, OFFLINE, "that machine is not connected to this relay", to, ref)
            return
        if self._enqueue(target, _dump({"from": peer.address, "blob": blob})):
            self.stats["frames"] += 1
            self.stats["bytes"] += len(blob)
            if self._peers.get(peer.address) is peer:  # it routed a frame: the last to be closed when full
                self._peers[peer.address] = self._peers.pop(peer.address)
            return
        self.stats["dropped"] += 1
        self._notice(peer, DROPPED, "the destination is not reading; its queue is full", to, ref)
        target.drops_in_a_row += 1
        if target.drops_in_a_row >= limits.drop_limit:
            self.stats["slow_disconnects"] += 1
            self._disconnect(target, "too slow to read its frames")

    async def _reader(self, peer: _Peer) -> None:
        limits = self.limits
        while True:
            try:
                message = await peer.ws.get_message()
            except ConnectionClosed:
                return
            self._finished(peer)
            if not isinstance(message, str):
                self._refused("frame_binary", "a binary message")
                self._notice(peer, BAD_FRAME, "binary messages are not accepted")
                continue
            self._seen("in", message)
            if len(message) > limits.message_chars:
                self.stats["too_large"] += 1
                self._notice(peer, TOO_LARGE, f"a blob is at most {limits.blob_bytes} bytes")
                continue
            frame = parse_json(message, max_bytes=limits.message_chars, max_depth=_DEPTH)
            if isinstance(frame, JsonRefused) or not isinstance(frame, dict):
                reason = frame.reason if isinstance(frame, JsonRefused) else "shape"
                self._refused(f"frame_{reason}", "a frame that is not one flat JSON object")
                self._notice(peer, BAD_FRAME, "a frame is one flat JSON object {to, blob, id?}")
                continue
            to, blob, ref = frame.get("to"), frame.get("blob"), frame.get("id")
            if (
                not isinstance(to, str)
                or len(to) != _ADDRESS_CHARS
                or not isinstance(blob, str)
                or not (ref is None or (isinstance(ref, str) and len(ref) <= _ID_CHARS))
            ):
                self._refused("frame_shape", "a frame whose fields are not {to, blob, id?}")
                self._notice(peer, BAD_FRAME, "a frame is {to: ADDRESS, blob: BASE64, id?: STR}", to, ref)
                continue
            if len(blob) * 3 // 4 - blob[-2:].count("=") > limits.blob_bytes:
                self.stats["too_large"] += 1
                self._notice(peer, TOO_LARGE, f"a blob is at most {limits.blob_bytes} bytes", to, ref)
                continue
            self._route(peer, to, blob, ref)


# --- the client ---------------------------------------------------------------------------------------------


@attrs.frozen
class Frame:
    sender: str
    blob: bytes


@attrs.frozen
class Notice:
    kind: str
    to: str | None
    ref: str | None
    detail: str


def _object(message: str | bytes, limit: int) -> dict[str, Any] | None:
    """A message from the relay as one flat JSON object, bounded before it is parsed; None otherwise."""
    data = parse_json(message, max_bytes=limit, max_depth=_DEPTH)
    return data if isinstance(data, dict) else None


def _event(data: dict[str, Any]) -> Frame | Notice | None:
    """A routed frame or a notice, each field of the type the wire says; None for anything else."""
    if "notice" in data:
        kind, to, ref, detail = data["notice"], data.get("to"), data.get("id"), data.get("detail", "")
        if (
            isinstance(kind, str)
            and isinstance(detail, str)
            and all(v is None or isinstance(v, str) for v in (to, ref))
        ):
            return Notice(kind, to, ref, detail)
        return None
    sender, blob = data.get("from"), data.get("blob")
    if not isinstance(sender, str) or not isinstance(blob, str):
        return None
    try:
        return Frame(sender, unb64(blob))
    except ValueError:
        return None


class RelayClient:
    """One authenticated connection to a relay as `identity`'s address."""

    def __init__(self, ws: WebSocketConnection, address: str, message_chars: int) -> None:
        self.ws = ws
        self.address = address
        self.message_chars = message_chars  # the longest message read from the relay

    async def send(self, to: str, blob: bytes, ref: str | None = None) -> None:
        frame: dict[str, Any] = {"to": to, "blob": b64(blob)}
        if ref is not None:
            frame["id"] = ref
        try:
            await self.ws.send_message(_dump(frame))
        except ConnectionClosed as error:
            raise RelayError(f"the relay closed the connection ({error.reason})") from None

    async def receive(self) -> Frame | Notice:
        """The next frame or notice; raises RelayError when the relay goes away."""
        while True:
            try:
                message = await self.ws.get_message()
            except ConnectionClosed as error:
                raise RelayError(f"the relay closed the connection ({error.reason})") from None
            data = _object(message, self.message_chars)
            event = None if data is None else _event(data)
            if event is not None:
                return event
            # Anything else is skipped: not something this client understands; the relay is not trusted.


@asynccontextmanager
async def open_ws(url: str, *, max_message_size: int) -> AsyncIterator[WebSocketConnection]:
    """A client WebSocket on a TCP stream this function owns and always closes (trio-websocket 0.12 leaves
    a client's socket open when the server closes the connection first). A refused or broken handshake is
    one HandshakeError, not the group the library's reader task raises it in."""
    parts = urlsplit(url)
    if parts.scheme != "ws" or parts.hostname is None or parts.port is None:
        raise ValueError(f"a relay URL looks like ws://127.0.0.1:PORT, not {url!r}")
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            ws = await wrap_client_stream(
                nursery, stream, parts.hostname, parts.path or "/", max_message_size=max_message_size
            )
            try:
                yield ws
            except BaseException as error:
                body_error = error  # raised below as itself, not wrapped in the nursery's group
            finally:
                with trio.move_on_after(1) as cleanup:
                    cleanup.shield = True
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    except ExceptionGroup as group:  # the reader task's (an HTTP refusal such as 503, a reset)
        if group.split(_GONE)[1] is not None:
            raise
        raise HandshakeError(f"the WebSocket handshake failed: {group.exceptions[0]!r}") from None
    finally:
        await trio.aclose_forcefully(stream)
    if body_error is not None:
        raise body_error


def _text(data: dict[str, Any] | None, name: str) -> str:
    value = None if data is None else data.get(name)
    if not isinstance(value, str):
        raise ValueError(f"the relay sent no {name}")
    return value


@asynccontextmanager
async def connect_relay(
    url: str, identity: Identity, *, blob_bytes: int = RelayLimits().blob_bytes
) -> AsyncIterator[RelayClient]:
    """Connect and prove ownership of `identity`'s address. Raises RelayError when that fails."""
    limits = RelayLimits(blob_bytes=blob_bytes)
    async with contextlib.AsyncExitStack() as stack:
        try:
            ws = await stack.enter_async_context(open_ws(url, max_message_size=2 * limits.message_chars))
            with trio.fail_after(10):
                challenge = _object(await ws.get_message(), limits.hello_bytes)
                relay_key = nacl.public.PublicKey(unb64(_text(challenge, "relayKey")))
                proof = nacl.public.Box(nacl.public.PrivateKey(identity.secret), relay_key).encrypt(
                    _DOMAIN + unb64(_text(challenge, "nonce"))
                )
                await ws.send_message(
                    _dump({"type": "hello", "publicKey": b64(identity.public), "proof": b64(bytes(proof))})
                )
                welcome = _object(await ws.get_message(), limits.hello_bytes)
        except (
            OSError,
            HandshakeError,
            ConnectionClosed,
            trio.TooSlowError,
            ValueError,
            nacl.exceptions.CryptoError,
        ) as error:
            raise RelayError(f"relay {url}: {error!r}") from None
        if welcome is None or welcome.get("address") != identity.address:
            raise RelayError(f"the relay at {url} did not accept this machine ({welcome!r})"[:300])
        yield RelayClient(ws, identity.address, limits.message_chars)
