# What a stranger on the relay can send, shared by the relay and pairing tests, their fuzz suite and
# scripts/bench_relay_fuzz.py (which runs the same strategies at 10,000 examples each): hellos, frames after
# authentication, and boxed pairing requests that are nested, truncated, oversized, of the wrong types or
# plain noise; and the clients that send them over a real connection.
from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence

import nacl.public
import trio
from hypothesis import strategies as st
from trio_websocket import ConnectionClosed

from harness.io import pairing
from harness.io.relay import Frame, Notice, RelayLimits, connect_relay, open_ws
from harness.io.seal import Identity, b64

LIMITS = RelayLimits()
WAIT = 60.0  # seconds any one expected answer may take on a loaded machine


def nested(depth: int, opener: str = "[") -> str:
    """A JSON document nested `depth` levels deep: arrays, or objects {"a": {"a": ...}}."""
    if opener == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "0" + "}" * depth


def pairing_request(to_public: bytes, payload: bytes, *, ephemeral: Identity | None = None) -> bytes:
    """A pairing request blob boxed to `to_public` around any payload, as a stranger can make one."""
    sender = ephemeral or Identity.generate()
    box = nacl.public.Box(nacl.public.PrivateKey(sender.secret), nacl.public.PublicKey(to_public))
    return bytes([pairing.PAIR_REQUEST]) + sender.public + bytes(box.encrypt(payload))


def unknown_code_request() -> bytes:
    """The JSON of a well-formed request for a code that does not exist (the owner answers code_unknown)."""
    fields = {
        "codeId": secrets.token_hex(8),
        "machineId": "stranger-" + secrets.token_hex(4),
        "publicKey": b64(Identity.generate().public),
        "mac": b64(secrets.token_bytes(32)),
    }
    return json.dumps(fields).encode()


# --- strategies ---------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
deep = st.builds(nested, st.integers(2, 6000), st.sampled_from(["[", "{"]))
# Nested values to put inside a field (the standard encoder, like the parser, stops near 1,000 levels).
deep_values = st.builds(nested, st.integers(2, 900), st.sampled_from(["[", "{"])).map(json.loads)
base64_keys = st.binary(min_size=0, max_size=40).map(b64)
noise = st.one_of(st.text(max_size=300), st.binary(max_size=300))


def _truncations(whole: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(whole) - 1).map(lambda end: whole[:end])


_HELLO = json.dumps({"type": "hello", "publicKey": b64(bytes(32)), "proof": b64(bytes(88))})
hellos = st.one_of(
    deep,
    noise,
    _truncations(_HELLO),
    st.integers(LIMITS.hello_bytes, 2 * LIMITS.hello_bytes).map(lambda n: json.dumps("x" * n)),
    st.fixed_dictionaries(
        {"type": st.just("hello") | json_values, "publicKey": base64_keys | json_values},
        optional={"proof": base64_keys | json_values | deep_values},
    ).map(json.dumps),
)

_ADDRESS = "a" * 32
_FRAME = json.dumps({"to": _ADDRESS, "blob": b64(b"hello"), "id": "r1"})
frames = st.one_of(
    deep,
    noise,
    _truncations(_FRAME),
    st.fixed_dictionaries(
        {"to": st.just(_ADDRESS) | json_values, "blob": base64_keys | json_values},
        optional={"id": json_values | st.text(max_size=100)},
    ).map(json.dumps),
    st.fixed_dictionaries({"to": st.just(_ADDRESS), "blob": deep_values}).map(json.dumps),
    st.just(json.dumps({"to": _ADDRESS, "blob": "A" * (LIMITS.message_chars + 4)})),  # oversized
)

_REQUEST = unknown_code_request().decode()
request_fields = st.fixed_dictionaries(
    {},
    optional={
        "codeId": st.text(max_size=20) | json_values | st.just(secrets.token_hex(8)),
        "machineId": st.text(max_size=300) | json_values,
        "publicKey": base64_keys | json_values,
        "mac": base64_keys | json_values,
    },
)
# The payload inside a pairing box: its JSON (nested, truncated, oversized, of the wrong types) or noise.
pairing_payloads = st.one_of(
    deep.map(str.encode),
    st.binary(max_size=300),
    _truncations(_REQUEST).map(str.encode),
    request_fields.map(lambda fields: json.dumps(fields).encode()),
    st.integers(pairing.MAX_BLOB_BYTES, 4 * pairing.MAX_BLOB_BYTES).map(lambda n: b'"' + b"x" * n + b'"'),
)


def pairing_blobs(to_public: bytes) -> st.SearchStrategy[bytes]:
    """Whole blobs sent to a machine: boxed payloads, and blobs mangled around the box (truncated, a
    low-order ephemeral key, a reply's kind byte, noise)."""
    boxed = pairing_payloads.map(lambda payload: pairing_request(to_public, payload))
    return st.one_of(
        boxed,
        st.tuples(boxed, st.integers(0, 100)).map(lambda cut: cut[0][: len(cut[0]) - cut[1] - 1]),
        boxed.map(lambda blob: blob[:1] + bytes(32) + blob[33:]),
        boxed.map(lambda blob: bytes([pairing.PAIR_REPLY]) + blob[1:]),
        st.binary(max_size=200).map(lambda tail: bytes([pairing.PAIR_REQUEST]) + tail),
    )


# --- clients ------------------------------------------------------------------------------------------------


async def send_hello(url: str, hello: str | bytes) -> tuple[list[str | bytes], int | None]:
    """Answer the relay's challenge with `hello`: what came back after it, and the close code."""
    back: list[str | bytes] = []
    async with open_ws(url, max_message_size=1 << 16) as ws:
        await ws.get_message()  # the challenge
        with trio.fail_after(WAIT):
            try:
                await ws.send_message(hello)
                while True:
                    back.append(await ws.get_message())
            except ConnectionClosed as closed:
                return back, None if closed.reason is None else closed.reason.code
    raise AssertionError("unreachable")


async def as_stranger(
    url: str,
    to: str,
    blobs: list[bytes],
    *,
    until: Callable[[list[Frame | Notice]], bool] = lambda back: True,
    raw: Sequence[str | bytes] = (),
) -> list[Frame | Notice]:
    """Connect as a fresh throw-away identity, send `raw` messages and then `blobs` to `to`, and collect
    what comes back until `until` holds (at most WAIT seconds)."""
    back: list[Frame | Notice] = []
    async with connect_relay(url, Identity.generate()) as client:
        for message in raw:
            await client.ws.send_message(message)
        for blob in blobs:
            await client.send(to, blob)
        with trio.move_on_after(WAIT):
            while not until(back):
                back.append(await client.receive())
    return back
