# The `team` RPC front of a daemon: the frames of one connection (this user's, behind the listener guard of
# io/listeners.py), or one frame a member on a paired machine sent through the relay, each parsed, authorized
# (the owner token, or a member key for the member actions) and answered by its action handler. Split from
# the handlers so the connection rules read on their own:
# - A handler that loses its client keeps waiting (shielded submissions), so a disconnect never cancels or
#   repeats work; waits and subscriptions end with their connection.
# - A fault of the daemon while answering closes that one connection (or answers a remote frame with none)
#   and is counted; it never reaches the daemon's nurseries.
from __future__ import annotations

import hmac
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from harness.core.codec import team_view, to_json
from harness.core.errors import ErrorCode
from harness.core.team_delta import team_delta
from harness.io.listeners import Listener, Slot, close_websocket
from harness.io.remote import TeamAnswer
from harness.io.rpc import (
    ACTIONS,
    BAD_REQUEST,
    FEATURES,
    PROTOCOL,
    PROTOCOL_REVISION,
    FrameError,
    Request,
    delta_frame,
    error_frame,
    parse_request,
    result_frame,
    snapshot_frame,
)
from harness.io.team_access import ActionError, Handler, TeamAccess, carrying

# Requests one connection may have in flight (waits and subscriptions included); more stop its reads.
CONNECTION_REQUESTS = 16
# Answered here rather than by a handler: capabilities needs no authority, subscribe needs the connection.
FRONT_ACTIONS = frozenset({"capabilities", "subscribe"})

E = ErrorCode


class TeamRpc:
    """Answers `team` frames with `handlers`, one per action (all of ACTIONS but FRONT_ACTIONS)."""

    def __init__(
        self,
        listener: Listener,
        owner_token: str,
        machine_id: str,
        access: TeamAccess,
        handlers: Mapping[str, Handler],
        *,
        fault: Callable[[str], None],
    ) -> None:
        assert set(handlers) == set(ACTIONS) - FRONT_ACTIONS, "every action has one handler"
        self.listener = listener
        self._token = owner_token
        self.machine_id = machine_id
        self.access = access
        self._handlers = handlers
        self._fault = fault  # a fault of the daemon outside a connection: counted and logged

    async def connection(self, ws: WebSocketConnection, slot: Slot) -> None:
        slots = trio.Semaphore(CONNECTION_REQUESTS)
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    message = await ws.get_message()
                    slot.touch()
                    try:  # a free slot without a turn of the event loop: get_message has just taken one
                        slots.acquire_nowait()
                    except trio.WouldBlock:
                        await slots.acquire()
                    nursery.start_soon(self._one_request, ws, message, slots, slot)
            except ConnectionClosed:
                pass
            # The client is gone: waits and subscriptions end; shielded submissions still finish.
            nursery.cancel_scope.cancel()

    async def _one_request(
        self, ws: WebSocketConnection, message: str | bytes, slots: trio.Semaphore, slot: Slot
    ) -> None:
        try:
            with slot.working():  # a request in flight (a wait, a subscription) keeps its connection open
                frame = await self._answer(ws, message)
                if frame is not None:
                    await ws.send_message(frame)
        except ConnectionClosed:
            pass
        except Exception:
            # A fault of this daemon, not of the request: close this one connection and keep serving.
            self.listener.fault()
            await close_websocket(ws, 1011, "internal error")
        finally:
            slots.release()

    async def answer_frame(self, message: str, origin: str) -> TeamAnswer:
        """One `team` frame from a member on paired machine `origin` (the remote node strips owner tokens),
        with the reads it made moot on `origin`'s desk, which travel with the reply. A fault of this daemon is
        not raised, which would take the remote node and the daemon down: a reply of None says that no
        answer exists, and the member's CLI reports the outcome as uncertain, as for a local connection."""
        with carrying(origin) as carried:
            try:
                reply = await self._answer(None, message)
            except Exception:
                self._fault("internal error while serving a remote request:\n" + traceback.format_exc())
                reply = None
        return TeamAnswer(reply, tuple(carried))

    async def _answer(self, ws: WebSocketConnection | None, message: str | bytes) -> str | None:
        """The reply frame to one request; `ws` is None for remote frames, which cannot subscribe."""
        try:
            request = parse_request(message)
        except FrameError as error:
            if ws is not None:
                self.listener.stats.refused_frames += 1
            return error_frame(error.request_id, BAD_REQUEST, error.detail)
        try:
            if request.action == "subscribe":
                if ws is None:
                    raise ActionError(BAD_REQUEST, "subscribe needs a connection to the owner's daemon")
                await self._subscribe(ws, request)
                return None
            return result_frame(request.request_id, await self._dispatch(request))
        except FrameError as error:
            return error_frame(request.request_id, BAD_REQUEST, error.detail)
        except ActionError as error:
            return error_frame(request.request_id, error.code, error.detail, error.operation_id, error.bound)

    def _authorize(self, request: Request) -> None:
        if request.member_key is not None:
            if ACTIONS[request.action].owner_only:
                raise ActionError(E.UNAUTHORIZED.value, f"'{request.action}' is an owner operation")
            return
        token = request.owner_token
        if token is None or not hmac.compare_digest(token.encode(), self._token.encode()):
            raise ActionError(
                E.UNAUTHORIZED.value,
                "owner requests need the owner token of the daemon's data directory; "
                "members send their memberKey",
            )

    async def _dispatch(self, request: Request) -> object:
        if request.action == "capabilities":
            return self.capabilities()
        self._authorize(request)
        return await self._handlers[request.action](request)

    def capabilities(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "protocolRevision": PROTOCOL_REVISION,
            "actions": sorted(ACTIONS),
            "features": list(FEATURES),
            "machineId": self.machine_id,
            "limits": to_json(self.access.ledger.limits),
        }

    async def _subscribe(self, ws: WebSocketConnection, request: Request) -> None:
        self._authorize(request)
        deltas = request.fields.get("deltas", False)
        if not isinstance(deltas, bool):
            raise FrameError("subscribe: 'deltas' must be true or false", request.request_id)
        sent = self.access.team(request)
        await ws.send_message(result_frame(request.request_id, team_view(sent)))
        while True:
            # Register for the next change before looking: a commit during the send above would otherwise
            # find no event to set, and this watcher would miss it until some later change.
            changed = self.access.ledger.changed(sent.id)
            team = self.access.team(request)
            if team.revision == sent.revision:
                await changed.wait()
                continue
            # Watchers want the latest, not every step between: a delta spans all the steps since `sent`.
            delta = team_delta(sent, team) if deltas else None
            if delta is None:
                await ws.send_message(snapshot_frame(request.request_id, team_view(team)))
            else:
                await ws.send_message(delta_frame(request.request_id, delta))
            sent = team
