# The relay between machines, and its client. It routes opaque blobs by machine address and nothing else:
# it never holds a key, a body or a team name, and stores nothing. A machine proves that it owns its address
# (the fingerprint of its X25519 public key, see seal.fingerprint) by opening a box the relay sealed to it
# with a fresh relay key. Every connection has a bounded outbound queue (frames and bytes) and a send
# deadline; a peer that stops reading loses frames (the sender gets a `dropped` notice) and then its
# connection, so it cannot pin the relay's memory or slow anyone else. A frame for an address that is not
# connected is answered at once with an `offline` notice, never silently lost.
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
import json
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
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
    WebSocketRequest,
    serve_websocket,
    wrap_client_stream,
)

from harness.io.seal import Identity, b64, fingerprint, unb64

HOST: Final = "127.0.0.1"
_DOMAIN: Final = b"harness-relay-v1"
_ID_CHARS: Final = 64
_ADDRESS_CHARS: Final = 32

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
    drop_limit: int = 32  # frames dropped in a row for one connection before it is disconnected
    hello_timeout: float = 5.0
    max_connections: int = 1024

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
    send: trio.MemorySendChannel[str]
    receive: trio.MemoryReceiveChannel[str]
    scope: trio.CancelScope
    queued_bytes: int = 0
    drops_in_a_row: int = 0
    close_reason: str = ""


def _dump(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"))


class Relay:
    """`await nursery.start(relay.serve, port)` returns the port once it listens (127.0.0.1 only)."""

    def __init__(
        self, limits: RelayLimits = RelayLimits(), *, observe: Callable[[str, str], None] | None = None
    ) -> None:
        self.limits = limits
        self.stats: Counter[str] = Counter()
        self.port = 0
        self._observe = observe  # (direction "in"|"out", message): every byte the relay sees, for tests
        self._peers: dict[str, _Peer] = {}
        self._connections = 0

    async def serve(
        self, port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(
                    serve_websocket,
                    self._connection,
                    HOST,
                    port,
                    None,
                    max_message_size=2 * self.limits.message_chars,
                )
            )
            self.port = server.port
            task_status.started(self.port)

    def connected(self) -> list[str]:
        return sorted(self._peers)

    def _seen(self, direction: str, message: str) -> None:
        if self._observe is not None:
            self._observe(direction, message)

    async def _connection(self, request: WebSocketRequest) -> None:
        if self._connections >= self.limits.max_connections:
            self.stats["refused_connections"] += 1
            await request.reject(503)
            return
        self._connections += 1
        try:
            ws = await request.accept()
            address = await self._authenticate(ws)
            if address is not None:
                await self._serve_peer(ws, address)
        finally:
            self._connections -= 1

    async def _authenticate(self, ws: WebSocketConnection) -> str | None:
        relay_key = nacl.public.PrivateKey.generate()
        challenge = secrets.token_bytes(32)
        with trio.move_on_after(self.limits.hello_timeout):
            try:
                hello_request = _dump(
                    {
                        "type": "challenge",
                        "relayKey": b64(bytes(relay_key.public_key)),
                        "nonce": b64(challenge),
                    }
                )
                self._seen("out", hello_request)
                await ws.send_message(hello_request)
                message = await ws.get_message()
            except ConnectionClosed:
                return None
            self._seen("in", message if isinstance(message, str) else "<binary>")
            try:
                hello = json.loads(message)
                public = unb64(hello["publicKey"])
                proof = unb64(hello["proof"])
                opened = nacl.public.Box(relay_key, nacl.public.PublicKey(public)).decrypt(proof)
            except (ValueError, TypeError, KeyError, nacl.exceptions.CryptoError):
                opened = b""
            if opened != _DOMAIN + challenge:
                self.stats["auth_failures"] += 1
                await ws.aclose(4001, "authentication failed")
                return None
            address = fingerprint(public)
            with contextlib.suppress(ConnectionClosed):
                welcome = _dump({"type": "welcome", "address": address})
                self._seen("out", welcome)
                await ws.send_message(welcome)
                return address
            return None
        self.stats["auth_timeouts"] += 1
        await ws.aclose(4001, "no hello in time")
        return None

    async def _serve_peer(self, ws: WebSocketConnection, address: str) -> None:
        old = self._peers.get(address)
        if old is not None:  # the same machine reconnected: the newer connection wins
            self._disconnect(old, "replaced by a newer connection")
        send, receive = trio.open_memory_channel[str](self.limits.queue_frames)
        peer = _Peer(address, ws, send, receive, trio.CancelScope())
        self._peers[address] = peer
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
            with trio.move_on_after(1.0) as cleanup:
                cleanup.shield = True
                await ws.aclose(4008 if peer.close_reason else 1000, peer.close_reason or "bye")

    def _disconnect(self, peer: _Peer, reason: str) -> None:
        peer.close_reason = reason
        peer.scope.cancel()

    async def _writer(self, peer: _Peer) -> None:
        async for message in peer.receive:
            peer.queued_bytes -= len(message)
            with trio.move_on_after(self.limits.send_timeout) as deadline:
                try:
                    await peer.ws.send_message(message)
                except ConnectionClosed:
                    break
            if deadline.cancelled_caught:
                self.stats["slow_disconnects"] += 1
                self._disconnect(peer, "too slow to read its frames")
                return
            self._seen("out", message)
        peer.scope.cancel()

    def _enqueue(self, peer: _Peer, message: str) -> bool:
        if peer.queued_bytes + len(message) > self.limits.queue_bytes:
            return False
        try:
            peer.send.send_nowait(message)
        except (trio.WouldBlock, trio.ClosedResourceError):
            return False
        peer.queued_bytes += len(message)
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

    async def _reader(self, peer: _Peer) -> None:
        limits = self.limits
        while True:
            try:
                message = await peer.ws.get_message()
            except ConnectionClosed:
                return
            if not isinstance(message, str):
                self._notice(peer, BAD_FRAME, "binary messages are not accepted")
                continue
            self._seen("in", message)
            if len(message) > limits.message_chars:
                self.stats["too_large"] += 1
                self._notice(peer, TOO_LARGE, f"a blob is at most {limits.blob_bytes} bytes")
                continue
            try:
                frame = json.loads(message)
            except ValueError:
                frame = None
            if not isinstance(frame, dict):
                self._notice(peer, BAD_FRAME, "a frame is one JSON object {to, blob, id?}")
                continue
            to, blob, ref = frame.get("to"), frame.get("blob"), frame.get("id")
            if (
                not isinstance(to, str)
                or len(to) != _ADDRESS_CHARS
                or not isinstance(blob, str)
                or not (ref is None or (isinstance(ref, str) and len(ref) <= _ID_CHARS))
            ):
                self._notice(peer, BAD_FRAME, "a frame is {to: ADDRESS, blob: BASE64, id?: STR}", to, ref)
                continue
            if len(blob) * 3 // 4 - blob[-2:].count("=") > limits.blob_bytes:
                self.stats["too_large"] += 1
                self._notice(peer, TOO_LARGE, f"a blob is at most {limits.blob_bytes} bytes", to, ref)
                continue
            target = self._peers.get(to)
            if target is None:
                self.stats["offline"] += 1
                self._notice(peer, OFFLINE, "that machine is not connected to this relay", to, ref)
                continue
            if self._enqueue(target, _dump({"from": peer.address, "blob": blob})):
                target.drops_in_a_row = 0
                self.stats["frames"] += 1
                self.stats["bytes"] += len(blob)
                continue
            self.stats["dropped"] += 1
            self._notice(peer, DROPPED, "the destination is not reading; its queue is full", to, ref)
            target.drops_in_a_row += 1
            if target.drops_in_a_row >= limits.drop_limit:
                self.stats["slow_disconnects"] += 1
                self._disconnect(target, "too slow to read its frames")


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


class RelayClient:
    """One authenticated connection to a relay as `identity`'s address."""

    def __init__(self, ws: WebSocketConnection, address: str) -> None:
        self.ws = ws
        self.address = address

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
            try:
                data = json.loads(message)
                if "notice" in data:
                    return Notice(
                        str(data["notice"]), data.get("to"), data.get("id"), str(data.get("detail", ""))
                    )
                return Frame(str(data["from"]), unb64(data["blob"]))
            except (ValueError, TypeError, KeyError, RecursionError):
                continue  # not something this client understands; the relay is not trusted with much


@asynccontextmanager
async def open_ws(url: str, *, max_message_size: int) -> AsyncIterator[WebSocketConnection]:
    """A client WebSocket on a TCP stream this function owns and always closes (trio-websocket 0.12 leaves
    a client's socket open when the server closes the connection first)."""
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
    finally:
        await trio.aclose_forcefully(stream)
    if body_error is not None:
        raise body_error


@asynccontextmanager
async def connect_relay(
    url: str, identity: Identity, *, blob_bytes: int = RelayLimits().blob_bytes
) -> AsyncIterator[RelayClient]:
    """Connect and prove ownership of `identity`'s address. Raises RelayError when that fails."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            ws = await stack.enter_async_context(
                open_ws(url, max_message_size=2 * RelayLimits(blob_bytes=blob_bytes).message_chars)
            )
            with trio.fail_after(10):
                challenge = json.loads(await ws.get_message())
                relay_key = nacl.public.PublicKey(unb64(challenge["relayKey"]))
                proof = nacl.public.Box(nacl.public.PrivateKey(identity.secret), relay_key).encrypt(
                    _DOMAIN + unb64(challenge["nonce"])
                )
                await ws.send_message(
                    _dump({"type": "hello", "publicKey": b64(identity.public), "proof": b64(bytes(proof))})
                )
                welcome = json.loads(await ws.get_message())
        except (
            OSError,
            HandshakeError,
            ConnectionClosed,
            trio.TooSlowError,
            ValueError,
            KeyError,
            TypeError,
        ) as error:
            raise RelayError(f"relay {url}: {error!r}") from None
        if not isinstance(welcome, dict) or welcome.get("address") != identity.address:
            raise RelayError(f"the relay at {url} did not accept this machine ({welcome!r})")
        yield RelayClient(ws, identity.address)
