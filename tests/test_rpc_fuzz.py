# Hostile frames: the parser is total (a Request or a FrameError, nothing else), and a live daemon answers or
# closes the one connection for any frame, never crashes, and never lets a frame without authority touch a
# ledger. The daemon runs in its own thread and trio loop so Hypothesis can drive it synchronously.
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.rpc import ACTIONS, FrameError, Request, parse_request

KEYS = [
    "type", "requestId", "action", "teamId", "memberKey", "ownerToken", "id", "to", "text", "questionId",
    "seconds", "evidence", "members", "name", "memberId", "ttlMs", "notify", "from", "context", "parentId",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
frames = st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=8),
    json_values | st.sampled_from(["team", *ACTIONS, "t1", "r1"]),
    max_size=8,
).map(lambda frame: {"type": "team", "requestId": "r", **frame} if len(frame) % 2 else frame)


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300), frames.map(json.dumps)))
def test_the_parser_is_total(message: str | bytes) -> None:
    try:
        request = parse_request(message)
    except FrameError as error:
        assert error.detail
    else:
        assert isinstance(request, Request) and request.action in ACTIONS


class ThreadedDaemon:
    """A daemon serving from a background thread, stopped cleanly by `close`."""

    def __init__(self, home: Path) -> None:
        self.daemon = Daemon(home, log=lambda line: None)
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        assert self._ready.wait(60)  # generous: a loaded two-core machine

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.daemon.run)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()

    def close(self) -> None:
        assert self._token is not None
        trio.from_thread.run_sync(self.daemon.stop, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadedDaemon, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("fuzz-home")
    threaded = ThreadedDaemon(home)
    with Client(threaded.daemon.socket_path) as owner:
        token = homes.read_owner_token(home)
        # No members: no notices, so no delivery report moves the team while the fuzzer runs.
        owner.request("create", owner_token=token, fields={"id": "t1", "name": "Fuzz"})
        before = owner.request("get", team_id="t1", owner_token=token)
    yield threaded, before
    threaded.close()
    assert threaded.daemon.internal_errors == 0


class Connection:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.client = self._open()

    def _open(self) -> Client:
        client = Client(self.path)
        client.connect()
        return client

    def exchange(self, message: str | bytes) -> dict[str, Any] | None:
        """Send one frame; its reply, or None when the daemon closed this connection (then reopen)."""
        from wsproto.events import BytesMessage

        try:
            if isinstance(message, bytes):
                sock, ws = self.client._sock, self.client._ws
                assert sock is not None and ws is not None
                sock.sendall(ws.send(BytesMessage(data=message)))
            else:
                self.client.send_raw(message)
            return self.client.receive_raw(10)
        except TimeoutError:
            raise
        except Exception:  # the daemon may close the connection for any frame; it must keep serving others
            self.client.close()
            self.client = self._open()
            return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=st.one_of(frames.map(json.dumps), st.text(max_size=200), st.binary(max_size=200)))
def test_a_live_daemon_survives_any_frame(
    served: tuple[ThreadedDaemon, dict[str, Any]], message: Any
) -> None:
    threaded, before = served
    connection = Connection(threaded.daemon.socket_path)
    try:
        reply = connection.exchange(message)
        if reply is not None:
            assert reply["type"] == "team_result" and ("error" in reply or "result" in reply)
        # Still serving, and nothing without authority changed the ledger.
        token = homes.read_owner_token(threaded.daemon.home)
        assert connection.client.request("get", team_id="t1", owner_token=token) == before
    finally:
        connection.client.close()
    assert threaded.daemon.internal_errors == 0
