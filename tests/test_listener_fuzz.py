# Hypothesis against every listener of a machine (issue 14: "a Hypothesis fuzz suite per listener"): the
# daemon's RPC socket, the remote gateway's socket and the web page's port, before and after its ticket. Each
# example opens one connection and writes what Hypothesis draws: JSON frames of any shape, text and binary
# frames of anything, nesting up to 100,000 levels, raw bytes that are no frame at all, and a frame cut short
# before its end. Then the connection either still answers an ordinary request in order or was closed, the
# process is up, the listener serves a fresh client, and no fault was counted. Modest example counts keep the
# suite quick; scripts/bench_listeners.py sends 10,000 fuzzed frames per listener.
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.io.rpc import ACTIONS
from tests import raw_ws
from tests.listener_world import TEAM, Machine
from tests.test_listener_hostility import opened, serves, stats

KEYS = ["type", "requestId", "action", "teamId", "memberKey", "ownerToken", "machineId", "ticket", "session",
        "id", "to", "text", "questionId", "seconds", "members", "name"]  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=8),
    json_values | st.sampled_from(["team", "hello", *ACTIONS, TEAM, "r1", "nowhere"]),
    max_size=8,
)
nesting = st.builds(
    lambda opener, depth, tail: (opener * depth + tail).encode(),
    st.sampled_from(["[", '{"a":', '[{"a":']),
    st.sampled_from([1, 31, 33, 1000, 100_000]),
    st.sampled_from(["", "1", "]" * 40]),
)
payloads = st.one_of(
    objects.map(lambda data: json.dumps(data).encode()),
    st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
    nesting,
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("text"), payloads),
        st.tuples(st.just("binary"), payloads),
        st.tuples(st.just("raw"), st.binary(min_size=1, max_size=64)),
    ),
    min_size=1,
    max_size=4,
)
cut = st.none() | st.tuples(payloads, st.integers(1, 1 << 20))  # a last frame announced longer than sent


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    running = Machine(tmp_path_factory.mktemp("fuzz") / "home")
    try:
        yield running
    finally:
        running.close()
    assert running.daemon.internal_errors == 0


def final_request(machine: Machine, listener: str) -> dict[str, Any] | None:
    """An ordinary request for this connection, and the reply it must get if the connection lives."""
    if listener == "rpc":
        return {
            "type": "team",
            "requestId": "final",
            "action": "get",
            "teamId": TEAM,
            "ownerToken": machine.token,
        }
    if listener == "gateway":
        return {"type": "team", "requestId": "final", "action": "members", "teamId": TEAM,
                "ownerToken": machine.token, "machineId": "nowhere"}  # fmt: skip
    if listener == "web-session":
        return {"type": "team", "requestId": "final", "action": "get"}
    return None  # before its ticket, a page that sent anything else is refused


def run(
    machine: Machine, listener: str, steps: list[tuple[str, bytes]], last: tuple[bytes, int] | None
) -> None:
    sock = opened(machine, listener)
    try:
        try:
            for kind, data in steps:
                if kind == "raw":
                    sock.sendall(data)
                else:
                    sock.sendall(raw_ws.frame(raw_ws.TEXT if kind == "text" else raw_ws.BINARY, data))
            request = final_request(machine, listener)
            if last is not None:
                payload, declared = last
                sock.sendall(raw_ws.frame(raw_ws.TEXT, payload[: max(0, declared - 1)], declared=declared))
            elif request is not None:
                sock.sendall(raw_ws.text(json.dumps(request)))
                sock.settimeout(20)
                while (answer := raw_ws.reply(sock)) is not None:  # it answers in order, or it closed
                    frame = json.loads(answer)
                    if frame.get("requestId") == "final":
                        assert "result" in frame or frame.get("error") == "unpaired", frame
                        break
        except OSError:
            pass  # closed by the listener while we were writing
    finally:
        raw_ws.close(sock)
    assert machine.alive
    assert serves(machine, listener)
    assert stats(machine, listener).internal_errors == 0


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(steps=operations, last=cut)
def test_the_rpc_socket_survives_any_input(
    machine: Machine, steps: list[tuple[str, bytes]], last: Any
) -> None:
    run(machine, "rpc", steps, last)


@FUZZ
@given(steps=operations, last=cut)
def test_the_gateway_survives_any_input(machine: Machine, steps: list[tuple[str, bytes]], last: Any) -> None:
    run(machine, "gateway", steps, last)


@FUZZ
@given(steps=operations, last=cut, ticket=st.booleans())
def test_the_web_page_survives_any_input(
    machine: Machine, steps: list[tuple[str, bytes]], last: Any, ticket: bool
) -> None:
    run(machine, "web-session" if ticket else "web", steps, last)
