# Teams across machines: the `team` and `team_delivery` RPCs of team.v1 carried sealed through the relay.
# A `RemoteNode` runs beside a machine's daemon. It keeps one relay connection (supervised: any failure to
# reach, authenticate with or keep the relay, a refusal such as a full relay's HTTP 503 included, is a retry
# after a capped, jittered backoff, shown in `daemon status`, and never ends the daemon),
# seals every frame per peer (seal.py), and plays three parts:
#
# - owner: `destination(machine)` is the TeamDelivery of a paired machine. Its requests (the desk's own
#   commands) go into that peer's ordered outbox, which a worker hands over one at a time, retrying with the
#   same request id until the destination answers. Losing a reply never
#   cancels or resends work: the destination deduplicates by request id (and by notice id), so a retry is
#   harmless. A peer that is offline or unpaired shows as `queued` with reason `offline`/`unpaired`.
# - destination: requests from a team's owner reach the local TeamDelivery; its reports about remote-owned
#   teams travel back to the owner through the same kind of outbox. The destination owns its receipts.
# - gateway: a member's CLI on this machine (`--machine MACHINE_ID`) sends its ordinary `team` frame to the
#   gateway, a Unix socket in the data directory (this user only, as the daemon's own socket), which forwards
#   it sealed to the owning machine and returns the owner's `team_result`.
#   A frame arriving from a peer never carries owner authority (its ownerToken is dropped), except to observe:
#   the gateway serves only its own machine's owner, and a paired machine's owner may read a team (`get`,
#   `members`, `list`: what `watch --machine` shows), never change it or learn a member key.
#
# Sealed message bodies (JSON inside a sealed frame):
#   {"k":"req","id":RID,"ch":"team","frame":TEXT}                     -> {"k":"res","id":RID,"frame":TEXT}
#   {"k":"req","id":RID,"ch":"delivery","command":DESK_COMMAND}        -> {"k":"res","id":RID,"result":true}
#     (a submit's DESK_COMMAND carries no text but "content": the notice's ledger fields, rendered here)
#   {"k":"req","id":RID,"ch":"restate","commands":[DESK_COMMAND...]}   -> {"k":"res","id":RID,"result":N}
#   {"k":"req","id":RID,"ch":"status","teamId":T,"noticeIds":[...]}   -> {"k":"res","id":RID,"result":[...]}
#   {"k":"req","id":RID,"ch":"report","report":{teamId,noticeId,state,reason}}
#   any request may be answered {"k":"res","id":RID,"error":CODE,"detail":TEXT}
# Blobs whose first byte is 0x02 carry no secret: "I have no pairing with you" (`unpaired`).
from __future__ import annotations

import collections
import contextlib
import hmac
import json
import os
import random
import re
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio
from immutables import Map
from trio_websocket import ConnectionClosed, WebSocketConnection

from harness.core import delivery as d
from harness.core.bounded_json import JsonRefused, parse_json
from harness.core.codec import desk_command_from_json, desk_command_to_json, from_json, to_json
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import reject
from harness.core.records import NoticeKind
from harness.core.remote_grant import Grants, admit, rendered_here, request_teams
from harness.core.system import NoticeContent
from harness.io import home as homes
from harness.io import pairing
from harness.io.listeners import Listener, ListenerLimits, Slot, close_websocket, local_listener
from harness.io.local_socket import same_user
from harness.io.relay import (
    DROPPED,
    OFFLINE,
    Frame,
    RelayClient,
    RelayError,
    RelayLimits,
    connect_relay,
)
from harness.io.relay import Notice as RelayNotice
from harness.io.remote_client import (
    DEFAULT_REQUEST_TIMEOUT,
    GATEWAY_FILE,
    REMOTE_WAIT_MARGIN,
)
from harness.io.rpc import BAD_REQUEST, HARD_FRAME_BYTES, UNAUTHORIZED, FrameError, error_frame, parse_frame
from harness.io.seal import (
    DEFAULT_BLOCK,
    DEFAULT_REKEY_AT,
    OVERHEAD,
    SEALED,
    ReceiveSession,
    SealError,
    SendSession,
)
from harness.io.stderr_log import stderr_log
from harness.io.team_delivery import (
    DeliveryReport,
    OwnerRequest,
    Reporter,
    TeamDelivery,
    remote_command_prefix,
)
from harness.io.team_delivery import request as delivery_request

UNPAIRED: Final = "unpaired"
UNCERTAIN: Final = "uncertain"
UNPAIRED_BLOB: Final = b"\x02"
GATEWAY_SOCKET: Final = "gateway.sock"
ROUTES_FILE: Final = "routes.json"
# Answered request ids remembered per peer, so a retry is answered, not redone. At least the seal's replay
# window: an old frame that still passes the window must find its request id here (the model checker's
# `serve-retried-request-again` mutant shows what serving it again does).
DONE_CACHE: Final = 4096
INBOUND_LIMIT: Final = 64  # requests from peers served at once; more are refused (`busy`), never queued
OUTBOX_LIMIT: Final = 10_000  # items waiting for one peer
RESTATE_CHUNK_CHARS: Final = 256 << 10  # desk commands per `restate` request, well inside a sealed frame
PEERS_POLL: Final = 1.0  # seconds between looks at peers.json for machines paired since (by `pair accept`)
# One attempt of an outbox item: short, because a retry is harmless (same request id) and only a retry can
# learn that the peer left after taking the frame (the relay then answers `offline`), so the items behind it
# show `queued/offline` within seconds instead of after DEFAULT_REQUEST_TIMEOUT.
OUTBOX_ATTEMPT_TIMEOUT: Final = 3.0
# Owner reads a paired machine may make (of the teams it has a member in: core `observable`).
OBSERVATION_ACTIONS: Final = frozenset({"get", "members", "list", "board_get"})
# Answers that say "not now" rather than "no": an outbox item keeps its place and is tried again.
PASSING_REFUSALS: Final = frozenset({"busy", OFFLINE, UNCERTAIN})
# The largest response body sent back: a sealed frame above the relay's blob bound would be refused there.
RESPONSE_BYTES: Final = RelayLimits().blob_bytes - OVERHEAD
REQUEST_ID_CHARS: Final = 64  # a request id in a sealed body, as long as the relay's own frame ids
REASON: Final = re.compile(r"[a-z_]{1,40}")  # a delivery reason as desks and outboxes give them

@attrs.frozen
class TeamAnswer:
    """The owner's answer to a `team` frame from a paired machine: the reply frame (None: no answer exists,
    a fault) and what the request told the asking machine's desk (a member's read makes notices moot). The
    desk commands travel with the reply, so a consumption is not lost with the owner's outbox."""

    reply: str | None
    carried: tuple[OwnerRequest, ...] = ()


# (frame text, the asking machine's id) -> the owner's answer
TeamHandler = Callable[[str, str], Awaitable[TeamAnswer]]


class RemoteUnavailable(Exception):
    """The request certainly did not reach the peer: `code` is offline, unpaired, dropped or too_large."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class RemoteUncertain(Exception):
    """The request went out but no answer came back: retry with the same request (operation) id."""


class RemoteRefused(Exception):
    """The peer answered with an error."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


REFUSAL_DETAIL_CHARS: Final = 500


def _refusal(response: dict[str, Any]) -> RemoteRefused:
    """The peer's error answer, as far as this machine takes its word: a code becomes a notice's delivery
    reason in the ledger, so one that is not a short code is `malformed`; the detail is only shown, cut."""
    code = response["error"]
    if not (isinstance(code, str) and REASON.fullmatch(code)):
        code = "malformed"
    return RemoteRefused(code, str(response.get("detail", ""))[:REFUSAL_DETAIL_CHARS])


@attrs.define(eq=False)
class _Waiter:
    address: str
    done: trio.Event = attrs.Factory(trio.Event)
    response: dict[str, Any] | None = None
    failure: str | None = None  # a relay notice kind, or UNCERTAIN when the relay went away


@attrs.define(eq=False)
class _Item:
    request_id: str
    body: dict[str, Any]
    notice: d.Submit | None = None  # the owner reports `queued` for it while the peer is unreachable
    reported: bool = False  # the owner was told it waits (once per item)
    maybe_delivered: bool = False  # an attempt went out unanswered: the destination's own report wins


@attrs.define(eq=False)
class _Outbox:
    items: collections.deque[_Item] = attrs.Factory(collections.deque)
    wake: trio.Event = attrs.Factory(trio.Event)


def _report_from_json(data: object) -> DeliveryReport:
    if not isinstance(data, dict):
        raise TypeError("a report is one JSON object")
    reason = data.get("reason")
    d.DeliveryState(data["state"])  # a known state, or ValueError
    if reason is not None and not (isinstance(reason, str) and REASON.fullmatch(reason)):
        raise ValueError(f"a report's reason is a short code, not {str(reason)[:40]!r}")
    times = [data.get(key) for key in ("startedAt", "seenAt")]
    if any(t is not None and (type(t) is not int or t < 0) for t in times):
        raise ValueError("a report's startedAt and seenAt are epoch milliseconds")
    return DeliveryReport(
        str(data["teamId"]),
        str(data["noticeId"]),
        str(data["state"]),
        None if reason is None else str(reason),
        *times,
    )


LINK_UNCONFIGURED: Final = "unconfigured"  # no relay named yet (`harness pair create --relay URL`)
LINK_CONNECTING: Final = "connecting"
LINK_CONNECTED: Final = "connected"
LINK_RETRYING: Final = "retrying"  # the last attempt failed (`lastError`); the next comes after a backoff


@attrs.define
class RelayLink:
    """The state of this machine's relay connection, as a person checking on it needs it."""

    state: str = LINK_UNCONFIGURED
    url: str | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    connected_at: float | None = None
    failures_in_a_row: int = 0

    def connected(self, now: float) -> None:
        self.state, self.connected_at, self.failures_in_a_row = LINK_CONNECTED, now, 0

    def failed(self, error: str, now: float) -> None:
        self.state, self.last_error, self.last_error_at = LINK_RETRYING, error, now
        self.failures_in_a_row += 1

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "relay": self.url,
            "lastError": self.last_error,
            "lastErrorAt": self.last_error_at,
            "connectedAt": self.connected_at,
            "failuresInARow": self.failures_in_a_row,
        }


class RemoteNode:
    """One machine's presence on the relay. `await nursery.start(node.run, team_handler)`."""

    def __init__(
        self,
        home: Path,
        *,
        relay_url: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        attempt_timeout: float = OUTBOX_ATTEMPT_TIMEOUT,
        retry_min: float = 0.2,
        retry_max: float = 5.0,
        seal_block: int = DEFAULT_BLOCK,
        rekey_at: int = DEFAULT_REKEY_AT,
        log: Callable[[str], None] | None = None,
        listener_limits: ListenerLimits | None = None,
    ) -> None:
        self.home = home
        self.identity = pairing.identity(home)
        self.machine_id = homes.machine_id(home)
        self.relay_url = relay_url
        self.request_timeout = request_timeout
        self.attempt_timeout = attempt_timeout
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.stats: collections.Counter[str] = collections.Counter()
        self.local_delivery: TeamDelivery | None = None  # this machine's desk, for requests from owners
        self.report_local: Reporter | None = None  # this machine's ledger, for reports from destinations
        # This machine's ledger, for its own desk's reports about teams owned here (None: `report_local`).
        self.report_own: Reporter | None = None
        self.on_paired: Callable[[str], None] | None = None  # told each machine paired while running
        # Whether this machine's ledger owns a team: no peer may steer or hear about such a team here.
        self.owns_team: Callable[[str], bool] = lambda team_id: False
        # What a notice this machine's ledger owes a paired machine's agent says (None: nothing to send);
        # the destination renders it, so only ledger fields cross, never a terminal text.
        self.content_of: Callable[[d.Submit], NoticeContent | None] = lambda submit: None
        self.limits: Limits = DEFAULT_LIMITS  # the bounds of a paired owner's notices rendered here
        self._seal_block = seal_block
        self._rekey_at = rekey_at
        self._log = log or stderr_log("harness remote")
        self._pairing = pairing.Responder(home, self.identity, log=self._log, stats=self.stats)
        self._token = homes.owner_token(home)
        self._handle_team: TeamHandler | None = None
        self._client: RelayClient | None = None
        self._connected = trio.Event()
        self._peers: dict[str, pairing.Peer] = {}
        self._peers_stamp: int | None = -1
        self._remote_dir = pairing.remote_dir(home)  # made once: later uses only read and write in it
        self.gateway_socket = self._remote_dir / GATEWAY_SOCKET
        self.gateway = Listener(
            "gateway", listener_limits or ListenerLimits(), self._log, peer_ok=lambda s: same_user(s.socket)
        )
        self._peers_path = self._remote_dir / pairing.PEERS_FILE
        self._peers_loaded = False  # after the first load, machines paired (again) are told to `on_paired`
        self._send: dict[str, SendSession] = {}
        self._receive: dict[str, ReceiveSession] = {}
        self._waiting: dict[str, _Waiter] = {}
        self._done: dict[str, collections.OrderedDict[str, dict[str, Any]]] = {}  # by machine, request id
        self._running: dict[tuple[str, str], trio.Event] = {}
        self._inbound: collections.Counter[str] = collections.Counter()  # requests served, by peer address
        self._last_refusal: tuple[str, str] | None = None
        self._outboxes: dict[str, _Outbox] = {}
        # Remembered across restarts: each paired owner's grant here (the remote teams whose notices this
        # desk holds, and the memberships their owners introduced; reports go back to the owner) and, for
        # teams owned here, the machines that hold their notices (what core/routing.py `Known` calls holders).
        self._grants, self._holders = self._read_routes()
        self._nursery: trio.Nursery | None = None
        self.link = RelayLink()

    # --- peers and sessions --------------------------------------------------------------------------------

    def _reload_peers(self) -> None:
        path = self._peers_path
        try:
            stamp: int | None = path.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != self._peers_stamp:
            self._peers_stamp = stamp
            before = {p.address: p.paired_at for p in self._peers.values()}
            self._peers = pairing.peers(self.home)
            now = {p.address: p.paired_at for p in self._peers.values()}
            # Unpaired, or paired again (fresh seal state both ways): its sessions restart from the files.
            for address in list(self._send.keys() | self._receive.keys()):
                if now.get(address) != before.get(address):
                    self._send.pop(address, None)
                    self._receive.pop(address, None)
            fresh = {p.machine_id for p in self._peers.values() if before.get(p.address) != p.paired_at}
            if self._peers_loaded and self.on_paired is not None:
                for machine in sorted(fresh):
                    self.on_paired(machine)
            self._peers_loaded = True

    def peer(self, ref: str) -> pairing.Peer | None:
        """A paired machine by machine id or relay address (re-reading peers.json when it changed)."""
        by_address = self.peer_at(ref)  # re-reads peers.json first
        return self._peers.get(ref) or by_address

    def peer_at(self, address: str) -> pairing.Peer | None:
        """The paired machine at relay address `address`: how a frame's sender is known. Never by machine
        id, which each machine declares for itself: one naming another peer's address took its frames."""
        self._reload_peers()
        return next((p for p in self._peers.values() if p.address == address), None)

    def _sender(self, peer: pairing.Peer) -> SendSession:
        session = self._send.get(peer.address)
        if session is None:
            path = pairing.seal_paths(self.home, peer.address)[0]
            session = SendSession(
                path,
                self.identity,
                peer.public_key,
                block=self._seal_block,
                rekey_at=self._rekey_at,
                bond=peer.bond,
            )
            self._send[peer.address] = session
        return session

    def _receiver(self, peer: pairing.Peer) -> ReceiveSession:
        session = self._receive.get(peer.address)
        if session is None:
            path = pairing.seal_paths(self.home, peer.address)[1]
            session = ReceiveSession(path, self.identity, peer.public_key, bond=peer.bond)
            self._receive[peer.address] = session
        return session

    def _read_routes(self) -> tuple[Grants, dict[str, list[str]]]:
        data = pairing._read(self._remote_dir / ROUTES_FILE)  # clear errors for a damaged file
        owners, members, holders = data.get("owners", {}), data.get("members", {}), data.get("holders", {})
        grants = Grants(Map(owners), Map({team: Map(held) for team, held in members.items()}))
        return grants, {team: list(machines) for team, machines in holders.items()}

    def _save_routes(self) -> None:
        routes = {
            "owners": dict(self._grants.owners),
            "members": {team: dict(held) for team, held in self._grants.members.items()},
            "holders": self._holders,
        }
        homes.write_private_json(self._remote_dir / ROUTES_FILE, routes)

    def _grant(self, grants: Grants) -> None:
        """The grants after an admitted request, durable before the desk acts on that request."""
        if grants != self._grants:
            self._grants = grants
            self._save_routes()

    def _learn_holder(self, team_id: str, machine: str) -> None:
        holders = self._holders.setdefault(team_id, [])
        if machine not in holders:
            holders.append(machine)
            self._save_routes()

    # --- running -------------------------------------------------------------------------------------------

    async def run(
        self,
        handle_team: TeamHandler | None = None,
        *,
        task_status: trio.TaskStatus[RemoteNode] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled: the relay connection, the CLI gateway, the outbox workers."""
        self._handle_team = handle_team
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                listener = local_listener(self.gateway_socket)
                handler = self.gateway.websockets(self._gateway, HARD_FRAME_BYTES)
                await nursery.start(self.gateway.serve, listener, handler)
                homes.write_private_json(
                    self._remote_dir / GATEWAY_FILE,
                    {"socket": str(self.gateway_socket), "pid": os.getpid()},
                )
                for machine, outbox in self._outboxes.items():
                    nursery.start_soon(self._outbox_worker, machine, outbox)
                nursery.start_soon(self._relay_loop)
                nursery.start_soon(self._watch_peers)
                task_status.started(self)
        finally:
            self._nursery = None
            with contextlib.suppress(FileNotFoundError):
                (self._remote_dir / GATEWAY_FILE).unlink()
            with contextlib.suppress(FileNotFoundError):
                self.gateway_socket.unlink()

    def stop(self) -> None:
        """Leave the relay and stop serving; `run` returns."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    async def _watch_peers(self) -> None:
        while True:
            self._reload_peers()
            await trio.sleep(PEERS_POLL)

    async def _relay_loop(self) -> None:
        delay = self.retry_min
        while True:
            url = self.relay_url or pairing.relay_url(self.home)
            if url is None:  # not paired with anyone yet: `pair create` names the relay
                self.link.state = LINK_UNCONFIGURED
                await trio.sleep(min(self.retry_max, PEERS_POLL))
                continue
            self.link.state, self.link.url = LINK_CONNECTING, url
            try:
                async with connect_relay(url, self.identity) as client:
                    self._client = client
                    self._connected.set()
                    delay = self.retry_min
                    self.stats["relay_connects"] += 1
                    self.link.connected(time.time())
                    await self._receive_loop(client)
            except RelayError as error:
                self.stats["relay_errors"] += 1
                self._link_failed(url, str(error))
            except Exception as error:  # a fault of this node while serving the link: logged, then retried
                self.stats["relay_internal_errors"] += 1
                self._log("internal error on the relay link:\n" + traceback.format_exc())
                self._link_failed(url, f"internal error: {error!r}")
            finally:
                self._client = None
                self._connected = trio.Event()
                for waiter in self._waiting.values():
                    if not waiter.done.is_set():
                        waiter.failure = UNCERTAIN
                        waiter.done.set()
            # Jittered, so machines that lost one relay together do not come back in lock step.
            await trio.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, self.retry_max)

    def _link_failed(self, url: str, error: str) -> None:
        """The link is down: said once per distinct error in a row (a relay that stays full: one line)."""
        if error != self.link.last_error:
            self._log(f"relay {url}: {error}")
        self.link.failed(error, time.time())

    def view(self) -> dict[str, Any]:
        """What `daemon status` and `doctor` show of this node: the relay link and the refusal counters."""
        counters = dict(sorted(self.stats.items()))
        return {"link": self.link.view(), "peers": len(self._peers), "counters": counters}

    async def _receive_loop(self, client: RelayClient) -> None:
        assert self._nursery is not None
        while True:
            event = await client.receive()
            if isinstance(event, RelayNotice):
                self._on_notice(event)
                continue
            kind = event.blob[:1]
            if kind == bytes([pairing.PAIR_REQUEST]):
                await self._on_pair_request(client, event)
            elif kind == UNPAIRED_BLOB:
                self._fail_address(event.sender, UNPAIRED)
            elif kind == bytes([SEALED]):
                await self._on_sealed(client, event)

    def _on_notice(self, notice: RelayNotice) -> None:
        self.stats[f"notice_{notice.kind}"] += 1
        if notice.ref is not None:
            waiter = self._waiting.get(notice.ref)
            if waiter is not None and not waiter.done.is_set():
                waiter.failure = notice.kind
                waiter.done.set()
        elif notice.to is not None and notice.kind == OFFLINE:
            # About a frame that was no request (a response, a report's answer): the peer left, and the
            # requests waiting on it may have reached it before it did.
            self._fail_address(notice.to, UNCERTAIN)

    def _fail_address(self, address: str, kind: str) -> None:
        for waiter in self._waiting.values():
            if waiter.address == address and not waiter.done.is_set():
                waiter.failure = kind
                waiter.done.set()

    async def _on_pair_request(self, client: RelayClient, frame: Frame) -> None:
        reply = self._pairing.answer(frame.blob)  # never raises: refusals are counted, their log throttled
        if reply is not None:
            await client.send(frame.sender, reply)

    async def _on_sealed(self, client: RelayClient, frame: Frame) -> None:
        peer = self.peer_at(frame.sender)
        if peer is None:
            self.stats["unpaired_frames"] += 1
            await client.send(frame.sender, UNPAIRED_BLOB)
            return
        try:
            opened = self._receiver(peer).open(frame.blob)
        except SealError as error:
            self._refused(peer, error.reason, str(error))
            return
        # Bounded like every listener's input: no depth that ends the parser, no lone surrogate that the
        # journal could not write when a field of it lands in a record.
        message = parse_json(opened, max_bytes=RelayLimits().blob_bytes)
        if isinstance(message, JsonRefused):
            self._refused(peer, "malformed", f"the opened frame is refused: {message.detail}")
            return
        self._last_refusal = None
        if not isinstance(message, dict):
            return
        if message.get("k") == "res":
            waiter = self._waiting.get(str(message.get("id")))
            if waiter is not None and waiter.address == peer.address and not waiter.done.is_set():
                waiter.response = message
                waiter.done.set()
        elif message.get("k") == "req" and isinstance(message.get("id"), str):
            if len(message["id"]) > REQUEST_ID_CHARS:  # it is kept (DONE_CACHE) and echoed: a bounded key
                self._refused(peer, "malformed", f"a request id longer than {REQUEST_ID_CHARS} characters")
                return
            assert self._nursery is not None
            if self._inbound[peer.address] >= INBOUND_LIMIT:
                await self._respond(
                    peer, {"k": "res", "id": message["id"], "error": "busy", "detail": "retry"}
                )
                return
            self._inbound[peer.address] += 1
            self._nursery.start_soon(self._serve_request, peer, message)

    def _refused(self, peer: pairing.Peer, reason: str, detail: str) -> None:
        """A frame that changed nothing: counted, and logged once per reason in a row (a flood: one line)."""
        self.stats[f"refused_{reason}"] += 1
        if self._last_refusal != (peer.address, reason):
            self._last_refusal = (peer.address, reason)
            self._log(f"refused a sealed frame from machine {peer.machine_id} ({detail})")

    # --- requests out --------------------------------------------------------------------------------------

    async def _seal_and_send(self, peer: pairing.Peer, body: dict[str, Any], ref: str | None = None) -> None:
        client = self._client
        if client is None:
            raise RemoteUnavailable(OFFLINE, "this machine is not connected to its relay")
        blob = self._sender(peer).seal(json.dumps(body, separators=(",", ":")).encode())
        await client.send(peer.address, blob, ref)

    async def request(
        self,
        machine: str,
        body: dict[str, Any],
        *,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one request to a paired machine and return its response body (`result`, `frame`).

        Raises RemoteUnavailable (certainly not delivered), RemoteUncertain (maybe delivered: retry with the
        same `request_id`) or RemoteRefused (the peer answered with an error)."""
        peer = self.peer(machine)
        if peer is None:
            raise RemoteUnavailable(UNPAIRED, f"machine {machine} is not paired with this one (harness pair)")
        rid = request_id or secrets.token_hex(12)
        waiter = _Waiter(peer.address)
        self._waiting[rid] = waiter
        try:
            try:
                await self._seal_and_send(peer, {"k": "req", "id": rid, **body}, rid)
            except RelayError as error:
                raise RemoteUnavailable(OFFLINE, str(error)) from None
            with trio.move_on_after(self.request_timeout if timeout is None else timeout):
                await waiter.done.wait()
        finally:
            del self._waiting[rid]
        if waiter.response is not None:
            if "error" in waiter.response:
                raise _refusal(waiter.response)
            return waiter.response
        if waiter.failure is None or waiter.failure == UNCERTAIN:
            raise RemoteUncertain(f"no answer from machine {peer.machine_id}; retry with the same id")
        detail = {
            OFFLINE: f"machine {peer.machine_id} is not connected to the relay",
            UNPAIRED: f"machine {peer.machine_id} has no pairing with this one; pair them again",
            DROPPED: f"machine {peer.machine_id} is not keeping up; the relay dropped the request",
        }.get(waiter.failure, f"the relay refused the request ({waiter.failure})")
        raise RemoteUnavailable(waiter.failure, detail)

    def enqueue(self, machine: str, body: dict[str, Any], notice: d.Submit | None = None) -> None:
        """Hand `body` to `machine` in order, retried until it answers (never blocks the caller)."""
        outbox = self._outboxes.get(machine)
        if outbox is None:
            outbox = self._outboxes[machine] = _Outbox()
            if self._nursery is not None:
                self._nursery.start_soon(self._outbox_worker, machine, outbox)
        if len(outbox.items) >= OUTBOX_LIMIT:
            self.stats["outbox_overflow"] += 1
            self._log(f"outbox for machine {machine} is full; dropped a {body.get('op') or body.get('ch')}")
            return
        outbox.items.append(_Item(secrets.token_hex(12), body, notice))
        outbox.wake.set()

    async def _outbox_worker(self, machine: str, outbox: _Outbox) -> None:
        while True:
            if not outbox.items:
                outbox.wake = trio.Event()
                await outbox.wake.wait()
                continue
            item = outbox.items[0]
            delay = self.retry_min
            while True:
                try:
                    await self.request(
                        machine, item.body, request_id=item.request_id, timeout=self.attempt_timeout
                    )
                    break
                except RemoteRefused as error:
                    if error.code not in PASSING_REFUSALS:
                        self.stats["outbox_refused"] += 1
                        self._log(
                            f"machine {machine} refused {item.body.get('op') or item.body.get('ch')}: {error}"
                        )
                        if item.notice is not None and self.report_local is not None:  # never silent loss
                            notice = item.notice
                            refused = DeliveryReport(notice.team_id, notice.notice_id, "rejected", error.code)
                            await self.report_local(refused)
                        break
                    item.maybe_delivered |= error.code == UNCERTAIN
                except RemoteUnavailable as error:
                    await self._report_waiting(outbox, error.code)
                except RemoteUncertain:
                    item.maybe_delivered = True
                await trio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
            outbox.items.popleft()

    async def _report_waiting(self, outbox: _Outbox, code: str) -> None:
        """The peer is certainly unreachable (`code`): every notice in its outbox waits, and the owner's view
        says so once per notice, unless an attempt of it may have reached the destination. A code the relay
        made up (its notice's kind) is a delivery reason only if it is a short code."""
        code = code if REASON.fullmatch(code) else "malformed"
        for item in list(outbox.items):
            notice = item.notice
            if notice is None or item.reported or item.maybe_delivered or self.report_local is None:
                continue
            item.reported = True
            await self.report_local(DeliveryReport(notice.team_id, notice.notice_id, "queued", code))

    # --- requests in ---------------------------------------------------------------------------------------

    async def _respond(self, peer: pairing.Peer, body: dict[str, Any]) -> None:
        size = len(json.dumps(body, separators=(",", ":")).encode())
        if size > RESPONSE_BYTES:  # the relay would refuse it, and the asker could only retry forever
            detail = f"the answer has {size} bytes; the relay carries at most {RESPONSE_BYTES} (blob_bytes)"
            body = {"k": "res", "id": body["id"], "error": "bound_exceeded", "detail": detail}
        with contextlib.suppress(RemoteUnavailable, RelayError):
            await self._seal_and_send(peer, body)

    async def _serve_request(self, peer: pairing.Peer, message: dict[str, Any]) -> None:
        key = (peer.machine_id, str(message["id"]))
        done = self._done.setdefault(peer.machine_id, collections.OrderedDict())
        try:
            response = done.get(key[1])
            if response is None and key in self._running:
                await self._running[key].wait()  # a retry of a request still being served
                response = done.get(key[1])
            if response is None:
                self._running[key] = trio.Event()
                try:
                    response = await self._execute(peer, message)
                except Exception:  # a fault of this machine, not of the peer: it must not end the node
                    self._log("internal error serving a peer's request:\n" + traceback.format_exc())
                    response = {"error": UNCERTAIN, "detail": "this machine failed while serving it"}
                finally:
                    self._running.pop(key).set()
                # Not a `team` answer (a gateway never retries one: the frame's own id does) nor a "not now"
                # refusal, which the sender retries under the same id and must be able to get past.
                if message.get("ch") != "team" and response.get("error") not in PASSING_REFUSALS:
                    done[key[1]] = response
                while len(done) > DONE_CACHE:
                    done.popitem(last=False)
            await self._respond(peer, {"k": "res", "id": key[1], **response})
        finally:
            self._inbound[peer.address] -= 1
            if not self._inbound[peer.address]:
                del self._inbound[peer.address]

    async def _execute(self, peer: pairing.Peer, message: dict[str, Any]) -> dict[str, Any]:
        try:
            channel = message.get("ch")
            if channel == "team":
                return await self._execute_team(peer, message["frame"])
            if channel == "delivery":
                return await self._execute_delivery(peer, message["command"])
            if channel == "restate":
                return await self._execute_restate(peer, message["commands"])
            if channel == "status":
                return await self._execute_status(peer, str(message["teamId"]), message["noticeIds"])
            if channel == "report":
                report = _report_from_json(message["report"])
                if peer.machine_id not in self._holders.get(report.team_id, ()):
                    detail = f"no notices of team {report.team_id} went to machine {peer.machine_id}"
                    return {"error": "not_found", "detail": detail}
                if self.report_local is None:
                    return {"error": OFFLINE, "detail": "this machine owns no ledger"}
                await self.report_local(report)
                return {"result": True}
            return {"error": BAD_REQUEST, "detail": f"unknown channel {channel!r}"}
        except (KeyError, ValueError, TypeError, RecursionError) as error:
            detail = f"malformed request ({type(error).__name__}: {error})"[:500]
            return {"error": BAD_REQUEST, "detail": detail}

    async def _execute_team(self, peer: pairing.Peer, text: str) -> dict[str, Any]:
        frame = json.loads(text)
        if not isinstance(frame, dict):
            raise ValueError("a team frame is one JSON object")
        frame.pop("ownerToken", None)  # owner authority never crosses machines...
        if "memberKey" not in frame and frame.get("action") in OBSERVATION_ACTIONS:
            frame["ownerToken"] = self._token  # ...but a paired machine's owner may observe
        request_id = frame.get("requestId") if isinstance(frame.get("requestId"), str) else None
        if frame.get("action") == "subscribe":
            return {"frame": error_frame(request_id, BAD_REQUEST, "subscribe is not carried over the relay")}
        if self._handle_team is None:
            return {
                "frame": error_frame(request_id, OFFLINE, "this machine owns no teams (no daemon attached)")
            }
        answer = await self._handle_team(json.dumps(frame, ensure_ascii=False), peer.machine_id)
        if answer.reply is None:  # the owner has no answer (its fault, logged there): the outcome is unknown
            return {"error": UNCERTAIN, "detail": "the owning daemon failed while serving the request"}
        if not answer.carried:
            return {"frame": answer.reply}
        return {"frame": answer.reply, "desk": [desk_command_to_json(c) for c in answer.carried]}

    async def _execute_delivery(self, peer: pairing.Peer, data: object) -> dict[str, Any]:
        """One owner request from `peer`, admitted only within its grant (core `admit`); a submit's text is
        rendered here from the content it carries (core `rendered_here`). A refusal is counted and changes
        nothing."""
        local = self.local_delivery
        if local is None:
            return {"error": OFFLINE, "detail": "this machine has no delivery desk attached"}
        content = None
        if isinstance(data, dict):
            content = data.get("content")
            data = {key: value for key, value in data.items() if key != "content"}
        command = desk_command_from_json(data)
        if isinstance(command, Rejected):
            return self._grant_refusal(peer, BAD_REQUEST, command.detail)
        if not isinstance(command, OwnerRequest):
            return self._grant_refusal(peer, BAD_REQUEST, "only an owner's requests travel to a desk")
        owned = [team for team in request_teams(command) if self.owns_team(team)]
        grants = admit(
            self._grants, here=self.machine_id, sender=peer.machine_id, command=command, owned_here=owned
        )
        if isinstance(grants, Rejected):
            return self._grant_refusal(peer, grants.code.value, grants.detail)
        if isinstance(command, d.Submit):
            rendered = self._render_here(peer, command, content)
            if isinstance(rendered, Rejected):
                return self._grant_refusal(peer, rendered.code.value, rendered.detail)
            command = rendered
        self._grant(grants)
        if isinstance(command, d.WithdrawMember):
            homes.remove_member_key(self.home, command.team_id, command.membership_id)
        await delivery_request(local, command)
        return {"result": True}

    def _render_here(self, peer: pairing.Peer, command: d.Submit, content: object) -> d.Submit | Rejected:
        """The submit with this machine's rendering of its content; an introduction's key goes to the
        member's private key file here (durably) before the prefix naming that file can reach the desk."""
        if content is None:
            return reject(ErrorCode.BAD_REQUEST, "a submit travels with its content, never a text")
        parsed = from_json(content, NoticeContent)
        if isinstance(parsed, Rejected):
            return parsed
        key_file = homes.member_key_path(self.home, command.team_id, command.membership_id)
        prefix = partial(_here_prefix, self.home, peer.machine_id, key_file)
        rendered = rendered_here(command, parsed, self.limits, prefix)
        if isinstance(rendered, d.Submit) and parsed.kind is NoticeKind.INTRODUCTION:
            homes.write_member_key(self.home, command.team_id, command.membership_id, parsed.member_key)
        return rendered

    def _grant_refusal(self, peer: pairing.Peer, code: str, detail: str) -> dict[str, Any]:
        """A request outside `peer`'s grant (or malformed): counted by code, answered, nothing changed."""
        self.stats[f"grant_refused_{code}"] += 1
        return {"error": code, "detail": detail}

    async def _execute_restate(self, peer: pairing.Peer, commands: object) -> dict[str, Any]:
        """An owner's restatement after its restart: each command as if sent alone, in order. One that does
        not apply here (a team this machine never held) is skipped; the rest still apply."""
        if not isinstance(commands, list):
            raise TypeError("commands must be a list")
        if self.local_delivery is None:  # passing: the restatement keeps its place in the owner's outbox
            return {"error": OFFLINE, "detail": "this machine has no delivery desk attached"}
        applied = 0
        for data in commands:
            response = await self._execute_delivery(peer, data)
            applied += "error" not in response
        return {"result": applied}

    async def _execute_status(self, peer: pairing.Peer, team_id: str, notice_ids: object) -> dict[str, Any]:
        if self.local_delivery is None or self._grants.owner(team_id) != peer.machine_id:
            return {"error": "not_found", "detail": f"no notices of team {team_id} from that machine here"}
        if not isinstance(notice_ids, list):
            raise TypeError("noticeIds must be a list")
        reports = await self.local_delivery.status(team_id, [str(n) for n in notice_ids])
        return {"result": [to_json(r) for r in reports]}

    def owned_elsewhere(self, team_id: str) -> bool:
        """Whether the team is a paired machine's: this machine's desk reports on it back to that owner."""
        owner = self._grants.owner(team_id)
        return owner is not None and owner != self.machine_id and not self.owns_team(team_id)

    async def route_report(self, report: DeliveryReport) -> None:
        """The local desk's reporter: reports about a remote-owned team go back to its owner."""
        owner = self._grants.owner(report.team_id)
        own = self.report_own or self.report_local
        if owner is not None and self.owned_elsewhere(report.team_id):
            self.enqueue(owner, {"ch": "report", "report": to_json(report)})
        elif own is not None:
            await own(report)

    def holders(self, team_id: str) -> list[str]:
        """The paired machines that were sent notices of the team: core routing sends them its team-wide
        requests, and no hold before a notice (they heard the pause)."""
        return list(self._holders.get(team_id, ()))

    def restate(self, machine: str, commands: Sequence[OwnerRequest]) -> None:
        """Hand `machine` an owner's restatement (core `restatement`) in as few requests as fit, in order."""
        for command in commands:
            if isinstance(command, d.Submit):
                self._learn_holder(command.team_id, machine)
        chunk: list[dict[str, Any]] = []
        size = 0
        for command in commands:
            data = self.wire(command)
            chars = len(json.dumps(data))
            if chunk and size + chars > RESTATE_CHUNK_CHARS:
                self.enqueue(machine, {"ch": "restate", "commands": chunk})
                chunk, size = [], 0
            chunk.append(data)
            size += chars
        if chunk:
            self.enqueue(machine, {"ch": "restate", "commands": chunk})

    def wire(self, command: OwnerRequest) -> dict[str, Any]:
        """A desk command as it crosses to a paired machine: a submit without its text, with its content."""
        data = desk_command_to_json(command)
        if isinstance(command, d.Submit):
            content = self.content_of(command)
            data["text"] = ""
            data["content"] = None if content is None else to_json(content)
        return data

    def destination(self, machine: str) -> TeamDelivery | None:
        """The `team_delivery` of a paired machine, for the owner's delivery worker; None when unpaired."""
        return None if self.peer(machine) is None else PeerDelivery(self, machine)

    # --- the CLI gateway -----------------------------------------------------------------------------------

    async def _gateway(self, ws: WebSocketConnection, slot: Slot) -> None:
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    message = await ws.get_message()
                    slot.touch()
                    nursery.start_soon(self._gateway_request, ws, message, slot)
            except ConnectionClosed:
                nursery.cancel_scope.cancel()

    async def _gateway_request(self, ws: WebSocketConnection, message: str | bytes, slot: Slot) -> None:
        with slot.working():
            await self._gateway_answer(ws, message)

    async def _gateway_answer(self, ws: WebSocketConnection, message: str | bytes) -> None:
        try:
            frame = parse_frame(message)
        except FrameError as error:
            self.gateway.stats.refused_frames += 1
            await ws.send_message(error_frame(None, BAD_REQUEST, error.detail))
            return
        request_id = frame.get("requestId") if isinstance(frame.get("requestId"), str) else None
        token = frame.pop("ownerToken", None)
        machine = frame.pop("machineId", None)
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token.encode()):
            await ws.send_message(error_frame(request_id, UNAUTHORIZED, "the gateway serves this user only"))
            return
        if not isinstance(machine, str):
            await ws.send_message(error_frame(request_id, BAD_REQUEST, "name the owning machine: machineId"))
            return
        seconds = frame.get("seconds")
        timeout = self.request_timeout
        if frame.get("action") == "wait" and isinstance(seconds, int | float):
            timeout = max(timeout, float(seconds) + REMOTE_WAIT_MARGIN)
        text = json.dumps(frame, ensure_ascii=False)
        try:
            response = await self.request(machine, {"ch": "team", "frame": text}, timeout=timeout)
            reply = str(response["frame"])
            await self._apply_carried(machine, response.get("desk"))
        except RemoteUnavailable as error:
            reply = error_frame(request_id, error.code, error.detail)
        except RemoteRefused as error:
            if error.code == UNCERTAIN:
                await close_websocket(ws, 1011, f"uncertain: {error.detail}"[:120])
                return
            reply = error_frame(request_id, error.code, error.detail)
        except RemoteUncertain as error:
            # No answer is the honest answer: the client reports an uncertain outcome (exit 4).
            await close_websocket(ws, 1011, f"uncertain: {error}"[:120])
            return
        with contextlib.suppress(ConnectionClosed):
            await ws.send_message(reply)


    async def _apply_carried(self, machine: str, carried: object) -> None:
        """What the owner's answer told this machine's desk (a member's read), applied before the member
        sees the answer, under the same checks as the owner's own requests. Bad data is ignored: the owner
        sends the same through its outbox too."""
        peer = self.peer(machine)
        if peer is None or not isinstance(carried, list):
            return
        for data in carried:
            try:
                response = await self._execute_delivery(peer, data)
            except (KeyError, ValueError, TypeError, RecursionError):
                response = {"error": BAD_REQUEST}
            if "error" in response:
                self.stats["carried_refused"] += 1


class PeerDelivery:
    """`team_delivery` to one paired machine: requests are handed over in order through its outbox."""

    def __init__(self, node: RemoteNode, machine: str) -> None:
        self.node = node
        self.machine = machine

    def _send(self, command: OwnerRequest) -> None:
        notice = command if isinstance(command, d.Submit) else None
        self.node.enqueue(self.machine, {"ch": "delivery", "command": self.node.wire(command)}, notice)

    async def submit(self, command: d.Submit) -> None:
        self.node._learn_holder(command.team_id, self.machine)
        self._send(command)

    async def status(self, team_id: str, notice_ids: Sequence[str]) -> list[DeliveryReport]:
        """What the destination's desk holds of these notices now. Raises RemoteUnavailable, RemoteUncertain
        or RemoteRefused when it cannot be asked: "not asked" is not "not held"."""
        body = {"ch": "status", "teamId": team_id, "noticeIds": list(notice_ids)}
        response = await self.node.request(self.machine, body)
        return [_report_from_json(r) for r in response.get("result") or ()]

    async def hold(self, command: d.Hold) -> None:
        self._send(command)

    async def release(self, command: d.Release) -> None:
        self._send(command)

    async def cancel(self, command: d.Withdraw | d.WithdrawMember | d.WithdrawTeam) -> None:
        self._send(command)

    async def consume(self, command: d.InboxRead | d.AnswerRetrieved) -> None:
        self._send(command)


# --- integration and the CLI side -------------------------------------------------------------------------


class RemoteHost(Protocol):
    """What a daemon offers the remote layer."""

    home: Path

    @property
    def desk(self) -> TeamDelivery | None:
        """This machine's delivery desk (requests from remote owners go there)."""

    async def report(self, report: DeliveryReport) -> None:
        """Record a destination's report in the owner ledger (the daemon's RecordDelivery path)."""

    async def answer_frame(self, message: str, origin: str) -> TeamAnswer:
        """Answer one `team` frame from machine `origin` as a local connection would (reply None when no
        answer exists, a fault), with the desk commands the request meant for `origin`'s desk."""


async def attach_remote(
    host: RemoteHost, node: RemoteNode, *, task_status: trio.TaskStatus[RemoteNode] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run `node` for `host` until cancelled; start it in the daemon's nursery once the desk is open."""
    node.local_delivery = host.desk
    node.report_local = host.report
    await node.run(host.answer_frame, task_status=task_status)


def _here_prefix(home: Path, owner: str, key_file: Path, team_id: str, member_key: str) -> str:
    """The command prefix an introduction rendered here teaches (the key is in `key_file`, never shown)."""
    return remote_command_prefix(home, owner, team_id, key_file)
