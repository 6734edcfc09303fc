# One machine's three listeners, served for the hostile-input tests: a real daemon (its RPC socket and its
# remote gateway socket) and a real `harness web` page server, in their own thread and trio loop so a test
# can attack them with blocking sockets and Hypothesis can drive them synchronously.
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.listeners import ListenerLimits
from harness.io.web import WEB_LIMITS, WebServer
from tests import raw_ws

TEAM = "t1"
START = 60.0  # seconds the listeners may take to start: generous, for a loaded two-core machine
T = TypeVar("T")


class Machine:
    def __init__(
        self,
        home: Path,
        *,
        limits: ListenerLimits | None = None,
        web_limits: ListenerLimits = WEB_LIMITS,
        members: list[dict[str, str]] | None = None,
    ) -> None:
        self.home = home
        self.daemon = Daemon(home, log=lambda line: None, listener_limits=limits)
        self.web = WebServer(home, TEAM, limits=web_limits)
        self._token: trio.lowlevel.TrioToken | None = None
        self._web_scope = trio.CancelScope()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(START), f"the listeners did not start: {self._failure!r}"
        self.token = homes.read_owner_token(home) or ""
        self.owner("create", teamId=None, id=TEAM, name="Hostile", members=members or [])

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # reported by the test through `alive`
            self._failure = error

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.daemon.run)
            await nursery.start(self._serve_web)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()

    async def _serve_web(self, task_status: trio.TaskStatus[WebServer] = trio.TASK_STATUS_IGNORED) -> None:
        with self._web_scope:
            await self.web.run(0, task_status=task_status)

    def _stop(self) -> None:
        self.daemon.stop()
        self._web_scope.cancel()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._failure is None

    @property
    def gateway(self) -> Path:
        assert self.daemon.node is not None
        return self.daemon.node.gateway_socket

    def in_loop(self, function: Callable[..., T], *args: Any) -> T:
        assert self._token is not None
        return trio.from_thread.run_sync(function, *args, trio_token=self._token)

    def owner(self, action: str, teamId: str | None = TEAM, **fields: Any) -> Any:  # noqa: N803
        with Client(self.daemon.socket_path) as client:
            return client.request(action, team_id=teamId, owner_token=self.token, fields=fields)

    # --- one normal request per listener, as a working client makes it ----------------------------------

    def rpc_serves(self) -> bool:
        return self.owner("get")["id"] == TEAM

    def gateway_serves(self) -> bool:
        """A well-formed gateway request for a machine that is not paired: answered `unpaired` at once."""
        sock = raw_ws.open_unix(self.gateway)
        try:
            assert raw_ws.upgrade(sock).startswith("HTTP/1.1 101")
            request = {"type": "team", "requestId": "ok", "action": "members", "teamId": TEAM,
                       "ownerToken": self.token, "machineId": "nowhere"}  # fmt: skip
            sock.sendall(raw_ws.text(json.dumps(request)))
            answer = raw_ws.reply(sock)
            return answer is not None and json.loads(answer).get("error") == "unpaired"
        finally:
            raw_ws.close(sock)

    def web_serves(self) -> bool:
        """A page with a fresh ticket gets its session and a live link to the daemon."""
        sock = self.page()
        try:
            sock.sendall(
                raw_ws.text(json.dumps({"type": "hello", "ticket": self.in_loop(self.web.mint_ticket)}))
            )
            kinds = []
            while (answer := raw_ws.reply(sock)) is not None:
                frame = json.loads(answer)
                kinds.append(frame.get("type"))
                if frame.get("type") == "web_link":
                    return bool(frame.get("state") == "live" and kinds[0] == "web_hello")
            return False
        finally:
            raw_ws.close(sock)

    def page(self) -> Any:
        """A socket that has completed the page's WebSocket handshake (own Host and Origin)."""
        sock = raw_ws.open_tcp(self.web.port)
        where = f"127.0.0.1:{self.web.port}"
        status = raw_ws.upgrade(sock, host=where, path="/ws", origin=f"http://{where}")
        assert status.startswith("HTTP/1.1 101"), status
        return sock

    def close(self) -> None:
        if self._token is not None and self._thread.is_alive():
            self.in_loop(self._stop)
            self._thread.join(30)
            assert not self._thread.is_alive(), "the listeners did not stop"
