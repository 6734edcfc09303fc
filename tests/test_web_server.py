# The page server's guards without a browser: what it serves, whom it refuses, and what it will relay.
# A real daemon in this trio loop; the page side is a plain WebSocket client that sends what a page would.
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, wrap_client_stream

from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.web import REFUSED, SESSION_IDLE_SECONDS, TICKET_SECONDS, WebServer

TEAM = "t1"
DEADLINE = 60.0  # generous: the server and its client share a loaded two-core machine
MEMBERS = [{"id": "m-ann", "machineId": "machine-1", "agentId": "agent-ann", "name": "ann"}]


@asynccontextmanager
async def serving(
    tmp_path: Path, clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[tuple[Daemon, WebServer]]:
    home = tmp_path / "home"
    daemon = Daemon(home, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)

        def create() -> None:
            with Client(daemon.socket_path) as client:
                token = homes.read_owner_token(home)
                client.request(
                    "create", owner_token=token, fields={"id": TEAM, "name": "B", "members": MEMBERS}
                )

        await trio.to_thread.run_sync(create)
        server = WebServer(home, TEAM, clock=clock)
        await nursery.start(server.run, 0)
        try:
            yield daemon, server
        finally:
            daemon.stop()
            nursery.cancel_scope.cancel()
    assert daemon.internal_errors == 0


async def http_get(port: int, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        request = f"GET {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n\r\n"
        await stream.send_all(request.encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


@asynccontextmanager
async def page(server: WebServer, origin: str | None = None) -> AsyncIterator[WebSocketConnection]:
    """A page's socket. The stream is closed here: trio-websocket's own client leaves it open when the server
    is the side that closes."""
    headers = [(b"origin", (origin or f"http://127.0.0.1:{server.port}").encode())]
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, f"127.0.0.1:{server.port}", "/ws", extra_headers=headers
        )
        try:
            yield ws
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()


async def frames_until(ws: WebSocketConnection, kind: str) -> dict[str, Any]:
    with trio.fail_after(DEADLINE):
        while True:
            frame: dict[str, Any] = json.loads(await ws.get_message())
            if frame.get("type") == kind:
                return frame


async def test_static_files_carry_a_strict_policy_and_nothing_else_is_served(tmp_path: Path) -> None:
    async with serving(tmp_path) as (_, server):
        status, headers, body = await http_get(server.port, "/")
        assert status == 200 and b'<script type="module" src="/app.js">' in body
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["cache-control"] == "no-store" and headers["referrer-policy"] == "no-referrer"
        for path in ("/app.js", "/app.css"):
            assert (await http_get(server.port, path))[0] == 200
        assert (await http_get(server.port, "/../pyproject.toml"))[0] == 404
        assert (await http_get(server.port, "/owner-token"))[0] == 404
        # Another name that resolves here (DNS rebinding) gets nothing.
        assert (await http_get(server.port, "/", host="evil.example:80"))[0] == 421


async def test_a_foreign_origin_cannot_open_the_socket(tmp_path: Path) -> None:
    rejected = False
    async with serving(tmp_path) as (_, server):
        try:
            async with page(server, origin="http://evil.example"):
                raise AssertionError("a foreign origin was let in")
        except* HandshakeError:
            rejected = True
    assert rejected


async def test_the_ticket_is_spent_once_and_the_session_reconnects(tmp_path: Path) -> None:
    async with serving(tmp_path) as (_, server):
        ticket = server.mint_ticket()
        async with page(server) as ws:
            await ws.send_message(json.dumps({"type": "hello", "ticket": ticket}))
            hello = await frames_until(ws, "web_hello")
            assert hello["teamId"] == TEAM
            assert (await frames_until(ws, "web_link"))["state"] == "live"
        async with page(server) as ws:
            await ws.send_message(json.dumps({"type": "hello", "ticket": ticket}))
            assert "already used" in (await frames_until(ws, "web_refused"))["detail"]
            with trio.fail_after(DEADLINE), pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason.code == REFUSED
        async with page(server) as ws:
            await ws.send_message(json.dumps({"type": "hello", "session": hello["session"]}))
            assert (await frames_until(ws, "web_link"))["state"] == "live"


async def hello_answer(server: WebServer, hello: dict[str, str]) -> dict[str, Any]:
    """What a page saying `hello` is answered first (web_hello or web_refused), once the server has seen the
    page close again (its session's idle time starts then)."""
    before = server.open_pages
    async with page(server) as ws:
        await ws.send_message(json.dumps({"type": "hello", **hello}))
        with trio.fail_after(DEADLINE):
            while (frame := json.loads(await ws.get_message()))["type"] not in ("web_hello", "web_refused"):
                pass
    with trio.fail_after(DEADLINE):
        while server.open_pages > before:
            await trio.sleep(0.01)
    answer: dict[str, Any] = frame
    return answer


async def test_a_ticket_and_an_idle_session_lapse_and_an_open_page_keeps_its_session(tmp_path: Path) -> None:
    """A launch ticket copied out of scrollback or a shell's history, or a session read out of a browser's
    storage, used to reach the owner's actions for as long as `harness web` ran. A ticket lapses
    TICKET_SECONDS after it was minted, a session SESSION_IDLE_SECONDS after its last use; a page open all
    that time still comes back with its session once, after it closes."""
    now = [1_000.0]
    async with serving(tmp_path, clock=lambda: now[0]) as (_, server):
        stale = server.mint_ticket()
        now[0] += TICKET_SECONDS + 1
        assert (await hello_answer(server, {"ticket": stale}))["type"] == "web_refused"
        fresh = server.mint_ticket()
        now[0] += TICKET_SECONDS - 1
        async with page(server) as ws:
            await ws.send_message(json.dumps({"type": "hello", "ticket": fresh}))
            session = (await frames_until(ws, "web_hello"))["session"]
            assert (await frames_until(ws, "web_link"))["state"] == "live"
            now[0] += SESSION_IDLE_SECONDS + 1  # open all along; another page's hello lapses what is idle
            assert (await hello_answer(server, {"ticket": "unknown"}))["type"] == "web_refused"
        with trio.fail_after(DEADLINE):
            while server.open_pages:
                await trio.sleep(0.01)
        assert (await hello_answer(server, {"session": session}))["type"] == "web_hello"
        now[0] += SESSION_IDLE_SECONDS - 1
        assert (await hello_answer(server, {"session": session}))["type"] == "web_hello"
        now[0] += SESSION_IDLE_SECONDS + 1
        refused = await hello_answer(server, {"session": session})
        assert refused["type"] == "web_refused" and "lapsed" in refused["detail"]


async def test_only_the_pages_actions_on_its_own_team_are_relayed(tmp_path: Path) -> None:
    async with serving(tmp_path) as (_, server), page(server) as ws:
        await ws.send_message(json.dumps({"type": "hello", "ticket": server.mint_ticket()}))
        await frames_until(ws, "web_link")

        async def ask(action: str, **fields: Any) -> dict[str, Any]:
            request = {"type": "team", "requestId": f"r-{action}", "action": action, **fields}
            await ws.send_message(json.dumps(request))
            return await frames_until(ws, "team_result")

        # A member key never reaches the page, nor do membership edits or asks, nor board commands.
        for action in ("key", "add", "remove", "ask", "reply", "create", "list", "board"):
            reply = await ask(action, memberId="m-ann", command={"type": "add_task", "title": "x"})
            assert reply["error"] == "unauthorized", reply
        # The board is read, for the server's team (issue 20: shown read-only), and nothing above wrote it.
        board = await ask("board_get", teamId="another-team")
        assert (board["result"]["teamId"], board["result"]["tasks"]) == (TEAM, [])
        # The page's team is the server's, whatever the frame says; the owner token is added here.
        got = await ask("get", teamId="another-team", ownerToken="forged")
        assert got["result"]["id"] == TEAM
        paused = await ask("pause")
        assert paused["result"]["state"] == "paused"


async def test_the_page_is_shown_only_agents_of_its_own_team(tmp_path: Path) -> None:
    """A review read an agent of no team (its tmux socket and pane) through a team's page: the page asks
    `agent_show` with its server's team, and an agent holding no membership of it here is not found."""
    async with serving(tmp_path) as (daemon, server), page(server) as ws:
        home = tmp_path / "home"

        def owner(action: str, team_id: str | None = None, **fields: Any) -> Any:
            with Client(daemon.socket_path) as client:
                token = homes.read_owner_token(home)
                return client.request(action, team_id=team_id, owner_token=token, fields=fields)

        here = homes.machine_id(home)
        tmux = {"socket": "harness-test", "target": "%3"}
        await trio.to_thread.run_sync(
            lambda: owner("add", TEAM, id="m-local", machineId=here, agentId="agent-local", name="loc")
        )
        for agent in ("agent-local", "agent-outsider"):
            await trio.to_thread.run_sync(
                lambda a=agent: owner("agent_register", agentId=a, name=a, engine="claude", tmux=tmux)
            )
        await ws.send_message(json.dumps({"type": "hello", "ticket": server.mint_ticket()}))
        await frames_until(ws, "web_link")

        async def show(agent: str) -> dict[str, Any]:
            request = {"type": "team", "requestId": f"r-{agent}", "action": "agent_show", "agentId": agent}
            await ws.send_message(json.dumps(request))
            return await frames_until(ws, "team_result")

        assert (await show("agent-local"))["result"]["tmux"] == tmux
        refused = await show("agent-outsider")
        assert refused["error"] == "not_found" and "tmux" not in json.dumps(refused), refused
        # The owner's own call names no team and sees every agent of the machine.
        shown = await trio.to_thread.run_sync(lambda: owner("agent_show", agentId="agent-outsider"))
        assert shown["tmux"] == tmux
