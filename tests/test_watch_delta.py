# A watcher of a real daemon gets deltas (core/team_delta.py, `subscribe` with `deltas: true`): on a full
# team one delivery report costs it a couple of kilobytes instead of the whole team (issue 18: 383 KB per
# report), and the views it rebuilds are the daemon's own.
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core.limits import DEFAULT_LIMITS
from harness.core.team_delta import apply_team_delta
from harness.io import home as homes
from tests import raw_ws
from tests.test_daemon import Api, member, running


def _subscribe(path: Path, token: str, deltas: object) -> tuple[socket.socket, dict[str, Any]]:
    sock = raw_ws.open_unix(path, timeout=60.0)
    assert raw_ws.upgrade(sock).startswith("HTTP/1.1 101")
    fields = {} if deltas is None else {"deltas": deltas}
    request = {"type": "team", "requestId": "w", "action": "subscribe", "teamId": "t1", "ownerToken": token}
    sock.sendall(raw_ws.text(json.dumps({**request, **fields})))
    return sock, _frame(sock)


def _frame(sock: socket.socket) -> dict[str, Any]:
    payload = raw_ws.reply(sock)
    assert payload is not None, "the daemon closed the subscription"
    frame: dict[str, Any] = json.loads(payload)
    frame["bytes"] = len(payload)
    return frame


async def test_a_full_team_pushes_kilobytes_not_the_team(tmp_path: Path) -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, asks_per_minute=1_000)  # the history is made in seconds
    async with running(tmp_path, limits=limits) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="t1", name="Team", members=[member(n) for n in ("alice", "bob")])
        alice = await Api.open(daemon, (await owner("key", "t1", memberId="alice"))["memberKey"])
        for n in range(120):  # asked and cancelled: each stays in the team's history
            await alice("ask", "t1", id=f"q{n}", to="bob", text=f"question {n} " + "x" * 1_000)
            await alice("cancel", "t1", questionId=f"q{n}")
        token = homes.read_owner_token(daemon.home)
        assert token is not None
        watcher, first = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, True)
        whole, whole_first = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, None)
        assert first["result"] == whole_first["result"] and first["bytes"] > 120_000
        await alice("ask", "t1", id="q-last", to="bob", text="one more")  # then its delivery is reported
        snapshot = await trio.to_thread.run_sync(_frame, whole)
        assert snapshot["type"] == "team_snapshot" and snapshot["bytes"] > 120_000
        view = first["result"]
        while view != await owner("get", "t1"):  # each push is one delta, until the watcher is current
            delta = await trio.to_thread.run_sync(_frame, watcher)
            assert delta["type"] == "team_delta" and delta["bytes"] < 2_048
            view = apply_team_delta(view, delta["delta"])
        assert view["exchanges"][-1]["id"] == "q-last"
        watcher.close()
        whole.close()


async def test_a_malformed_deltas_field_is_a_bad_request(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="t1", name="Team", members=[member("alice")])
        token = homes.read_owner_token(daemon.home)
        assert token is not None
        sock, frame = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, "yes")
        assert frame["error"] == "bad_request" and "deltas" in frame["detail"]
        sock.close()
