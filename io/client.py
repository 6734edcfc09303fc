# The client side of the `team` RPC: a small blocking WebSocket client over the daemon's Unix socket. Agents
# run the CLI inside their turns, so a call must start fast: no trio, no core, only the standard library plus
# wsproto (imported when a connection opens). The failure classes are the contract's exit statuses: the
# daemon is not there (3), the request went out but its answer did not come back (4, retry with the same
# operation id), or the daemon answered with a protocol error (1).
from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.bounded_json import JsonRefused, parse_json
from harness.io import home as homes
from harness.io import local_socket
from harness.io.rpc import (
    DELTA_TYPE,
    INCOMPATIBLE,
    MAX_FRAME_BYTES,
    PROTOCOL,
    PROTOCOL_REVISION,
    RESULT_TYPE,
    SNAPSHOT_TYPE,
    request_frame,
)

if TYPE_CHECKING:
    import wsproto

CONNECT_TIMEOUT = 5.0
REPLY_TIMEOUT = 60.0  # beyond a request's own waiting time (`wait --seconds`)
_RECEIVE_BYTES = 65536
# The largest reply parsed (a full team snapshot is a few MB at the bounds); the daemon sends no larger.
REPLY_BYTES = 64 << 20


class ClientError(Exception):
    def __init__(self, detail: str, operation_id: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.operation_id = operation_id


class Unreachable(ClientError):
    """No daemon answered: nothing was sent."""


class Uncertain(ClientError):
    """The request was sent but no answer came back: it may or may not have happened."""


class RemoteError(ClientError):
    """The daemon answered with a protocol error."""

    def __init__(
        self, code: str, detail: str, operation_id: str | None = None, bound: str | None = None
    ) -> None:
        super().__init__(detail, operation_id)
        self.code = code
        self.bound = bound


class _Closed(Exception):
    pass


def locate_socket(home: Path, socket_path: str | Path | None) -> tuple[Path, dict[str, Any] | None]:
    """The daemon's socket: `--socket`, else what daemon.json of `home` says (with that file's contents)."""
    if socket_path is not None:
        return Path(socket_path), None
    try:
        info = homes.read_daemon_info(home)
    except (homes.HomeError, OSError) as error:
        raise Unreachable(f"cannot read {home / homes.DAEMON_FILE}: {error}") from None
    if info is None:
        raise Unreachable(
            f"no daemon is running for {home} (no daemon.json); start one with `harness daemon start`"
        )
    pid, found = info.get("pid"), info.get("socket")
    if not isinstance(found, str) or not isinstance(pid, int):
        raise Unreachable(f"{home / homes.DAEMON_FILE} does not name a socket and pid")
    if not homes.pid_alive(pid):
        raise Unreachable(f"the daemon recorded in {home / homes.DAEMON_FILE} (pid {pid}) is not running")
    return Path(found), info


def incompatibility(protocol: object, revision: object) -> str | None:
    """Why a daemon that reports `protocol`/`revision` cannot serve this client, or None."""
    if protocol != PROTOCOL:
        return f"the daemon speaks {protocol!r}, this client {PROTOCOL!r}"
    if not isinstance(revision, int) or revision < PROTOCOL_REVISION:
        return (
            f"the daemon is older (protocol revision {revision}) than this client (revision "
            f"{PROTOCOL_REVISION}); restart it: `harness daemon stop` then `harness daemon start`"
        )
    return None


class Client:
    """One connection to a daemon. Use as a context manager; every method blocks."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._sock: socket.socket | None = None
        self._ws: wsproto.WSConnection | None = None
        self._frames: list[str] = []
        self._parts: list[str] = []

    def __enter__(self) -> Client:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def connect(self) -> None:
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, RejectConnection, Request

        where = self.socket_path
        try:
            sock = local_socket.connect(where, CONNECT_TIMEOUT)
        except local_socket.ForeignServer as error:
            raise Unreachable(f"refused: {error}; this is not your daemon") from None
        except OSError as error:
            raise Unreachable(f"no daemon answers at {where} ({error.strerror or error})") from None
        self._sock = sock
        self._ws = ws = WSConnection(ConnectionType.CLIENT)
        try:
            sock.sendall(ws.send(Request(host="localhost", target="/")))
            while True:
                for event in self._events():
                    if isinstance(event, AcceptConnection):
                        return
                    if isinstance(event, RejectConnection):
                        raise Unreachable(f"{where} refused the WebSocket handshake")
        except (OSError, _Closed) as error:
            self.close()
            raise Unreachable(
                f"{where} did not accept this connection ({error}); a daemon serves only its own user"
            ) from None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._ws is not None:
            from wsproto.events import CloseConnection

            # Best effort: the connection may already be gone or mid-close (wsproto then refuses to send).
            with contextlib.suppress(Exception):
                sock.sendall(self._ws.send(CloseConnection(code=1000)))
        sock.close()

    def interrupt(self) -> None:
        """Wake a receive blocked in another thread; it ends as if the daemon had closed. A watcher's thread
        sits in `subscribe` until the next change, and closing a socket does not wake a blocked recv."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _events(self) -> Iterator[object]:
        assert self._sock is not None and self._ws is not None
        data = self._sock.recv(_RECEIVE_BYTES)
        if not data:
            raise _Closed("connection closed")
        self._ws.receive_data(data)
        yield from self._ws.events()

    def _send(self, text: str) -> None:
        from wsproto.events import TextMessage

        assert self._sock is not None and self._ws is not None
        self._sock.sendall(self._ws.send(TextMessage(data=text)))

    def _receive(self, timeout: float) -> str:
        """The next text frame from the daemon; answers pings; raises _Closed or TimeoutError."""
        from wsproto.events import CloseConnection, Ping, TextMessage

        assert self._sock is not None and self._ws is not None
        self._sock.settimeout(timeout)
        while not self._frames:
            for event in self._events():
                if isinstance(event, TextMessage):
                    self._parts.append(event.data)
                    if event.message_finished:
                        self._frames.append("".join(self._parts))
                        self._parts.clear()
                elif isinstance(event, Ping):
                    self._sock.sendall(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    raise _Closed(
                        f"the daemon closed the connection ({event.code} {event.reason or ''})".strip()
                    )
        return self._frames.pop(0)

    def send_raw(self, text: str) -> None:
        """Send one frame as is (tests and fuzzing)."""
        self._send(text)

    def _receive_frame(self, timeout: float) -> dict[str, Any]:
        """The next frame as a JSON object. A reply can come from a paired machine through the gateway, so it
        is parsed within bounds like any peer input; a frame that is not an object ends the connection."""
        frame = parse_json(self._receive(timeout), max_bytes=REPLY_BYTES)
        if not isinstance(frame, dict):
            detail = frame.detail if isinstance(frame, JsonRefused) else "not a JSON object"
            raise _Closed(f"the daemon sent a frame that is not one: {detail}")
        return frame

    def receive_raw(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        return self._receive_frame(timeout)

    def request(
        self,
        action: str,
        *,
        team_id: str | None = None,
        member_key: str | None = None,
        owner_token: str | None = None,
        fields: dict[str, Any] | None = None,
        operation_id: str | None = None,
        timeout: float = REPLY_TIMEOUT,
    ) -> Any:
        """Send one request and return its result; raises RemoteError, Uncertain or Unreachable."""
        if self._sock is None:
            raise Unreachable("not connected")
        request_id = secrets.token_hex(8)
        frame = request_frame(
            request_id, action, team_id=team_id, member_key=member_key, owner_token=owner_token, fields=fields
        )
        if len(frame.encode()) > MAX_FRAME_BYTES:
            raise RemoteError(
                "bad_request", f"the request is larger than {MAX_FRAME_BYTES} bytes", operation_id
            )
        try:
            self._send(frame)
        except OSError as error:
            raise Uncertain(f"the connection broke while sending ({error})", operation_id) from None
        return self._result(request_id, operation_id, timeout)

    def _result(self, request_id: str, operation_id: str | None, timeout: float) -> Any:
        while True:
            try:
                reply = self._receive_frame(timeout)
            except TimeoutError:
                raise Uncertain(f"no answer within {timeout:g} s", operation_id) from None
            except (OSError, _Closed) as error:
                raise Uncertain(f"the daemon went away before answering ({error})", operation_id) from None
            if reply.get("requestId") != request_id:
                continue  # a frame of another request on this connection (a subscription's snapshot)
            if reply.get("type") != RESULT_TYPE:
                continue
            if "error" in reply:
                raise RemoteError(
                    str(reply["error"]),
                    str(reply.get("detail", "")),
                    reply.get("operationId", operation_id),
                    reply.get("bound"),
                )
            return reply.get("result")

    def check_compatible(self) -> dict[str, Any]:
        """Ask the daemon what it speaks; raise RemoteError(incompatible) when it cannot serve this client."""
        try:
            capabilities = self.request("capabilities")
        except RemoteError as error:  # a daemon so old it does not know `capabilities`
            raise RemoteError(
                INCOMPATIBLE, f"the daemon at {self.socket_path} does not speak {PROTOCOL}: {error.detail}"
            ) from None
        if not isinstance(capabilities, dict):
            raise RemoteError(INCOMPATIBLE, "the daemon's capabilities are not an object")
        problem = incompatibility(capabilities.get("protocol"), capabilities.get("protocolRevision"))
        if problem is not None:
            raise RemoteError(INCOMPATIBLE, problem)
        return capabilities

    def subscribe(self, team_id: str, owner_token: str | None, timeout: float | None = None) -> Iterator[Any]:
        """Team snapshots as they change, the current one first. Ends when the daemon closes or `timeout`
        seconds pass without a change."""
        # Imported here: the records' codec is not on a plain command's start-up path.
        from harness.core.team_delta import apply_team_delta

        capabilities = self.request("capabilities")
        features = capabilities.get("features", []) if isinstance(capabilities, dict) else []
        fields = {"deltas": True} if "team-delta" in features else None  # else whole snapshots are pushed
        request_id = secrets.token_hex(8)
        self._send(
            request_frame(request_id, "subscribe", team_id=team_id, owner_token=owner_token, fields=fields)
        )
        team = self._result(request_id, None, REPLY_TIMEOUT)
        yield team
        while True:
            try:
                frame = self._receive_frame(timeout if timeout is not None else 1e9)
            except (TimeoutError, OSError, _Closed):
                return
            if frame.get("requestId") != request_id:
                continue
            if frame.get("type") == SNAPSHOT_TYPE:
                team = frame["team"]
                yield team
            elif frame.get("type") == DELTA_TYPE:
                team = apply_team_delta(team, frame.get("delta"))
                if team is None:
                    raise RemoteError(INCOMPATIBLE, "the daemon sent a delta from a revision this view lacks")
                yield team
            elif "error" in frame:
                raise RemoteError(str(frame["error"]), str(frame.get("detail", "")))
