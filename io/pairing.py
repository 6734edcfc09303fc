# Pairing two machines so they can seal frames to each other, and the private files that remember it.
# `pair create` on machine A writes a one-time code (A's relay, machine id, public key, a code id and a
# secret) and keeps the secret in a 0600 file; `pair accept CODE` on machine B connects to the relay with a
# throw-away key, sends A a request boxed to A's public key and authenticated by a MAC under the secret, and
# A's daemon answers with a box of its own plus a MAC. Each side stores the other's identity only after the
# other proved it knows the secret; the relay sees two boxes. A code is used once, then refused, as is an
# expired code or a wrong secret; every refusal names its reason.
#
# Code: "hpair1." + base64url (no padding) of  version 1 | expiresAt u32 (unix s) | codeId 8 | secret 16 |
#       publicKey 32 | machineId length u8 | machineId | relay URL (rest), all UTF-8.
# Request blob:  0x10 | ephemeral public key 32 | box(ephemeral -> A, JSON {codeId, machineId, publicKey,
#                mac})
# Reply blob:    0x11 | box(A -> ephemeral, JSON {ok, machineId, mac} or {ok: false, error, detail})
# mac = BLAKE2b-256 keyed by BLAKE2b(secret), over "req"|"res" | A key | B key | codeId | A id | B id.
from __future__ import annotations

import base64
import contextlib
import fcntl
import hmac
import json
import os
import secrets
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.public
import trio

from harness.io import home as homes
from harness.io.relay import Frame, RelayError, connect_relay
from harness.io.seal import Identity, b64, fingerprint, load_identity, unb64

REMOTE_DIR: Final = "remote"
PEERS_FILE: Final = "peers.json"
CODES_FILE: Final = "pairing.json"
CONFIG_FILE: Final = "relay.json"
SEAL_DIR: Final = "seal"
LOCK_FILE: Final = "lock"

CODE_PREFIX: Final = "hpair1."
PAIR_REQUEST: Final = 0x10
PAIR_REPLY: Final = 0x11
DEFAULT_CODE_TTL: Final = 600.0  # seconds
MAX_CODE_TTL: Final = 24 * 3600.0
ACCEPT_TIMEOUT: Final = 15.0
_HEAD: Final = struct.Struct(">BI8s16s32sB")

CODE_UNKNOWN: Final = "code_unknown"
CODE_USED: Final = "code_used"
CODE_EXPIRED: Final = "code_expired"
BAD_SECRET: Final = "bad_secret"
OFFLINE: Final = "offline"


class PairingError(Exception):
    """Pairing failed; `code` is a stable string (code_used, code_expired, bad_secret, offline, ...)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


def remote_dir(home: Path) -> Path:
    """The private directory of this machine's identity, peers, pairing codes and seal counters."""
    homes.ensure_home(home)
    directory = home / REMOTE_DIR
    directory.mkdir(mode=homes.PRIVATE_DIR_MODE, exist_ok=True)
    (directory / SEAL_DIR).mkdir(mode=homes.PRIVATE_DIR_MODE, exist_ok=True)
    return directory


def identity(home: Path) -> Identity:
    return load_identity(remote_dir(home))


@contextlib.contextmanager
def locked(home: Path) -> Iterator[Path]:
    """Serialize read-modify-write of the remote files between the daemon and CLI processes."""
    directory = remote_dir(home)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, homes.PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield directory
    finally:
        os.close(fd)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise homes.HomeError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise homes.HomeError(f"{path} is not a JSON object")
    return data


# --- configuration and peers --------------------------------------------------------------------------------


def relay_url(home: Path) -> str | None:
    url = _read(remote_dir(home) / CONFIG_FILE).get("url")
    return url if isinstance(url, str) else None


def set_relay_url(home: Path, url: str) -> None:
    with locked(home) as directory:
        homes.write_private_json(directory / CONFIG_FILE, {"url": url})


@attrs.frozen
class Peer:
    machine_id: str
    public_key: bytes
    relay: str
    paired_at: int
    # A secret of this pairing only (from the code both sides held), mixed into every session key: frames
    # of an earlier pairing of the same two machines never open under this one, even replayed by the relay.
    bond: bytes = attrs.field(default=b"", repr=False)
    address: str = attrs.field(init=False, eq=False)  # its relay address, derived from the key

    @address.default
    def _address(self) -> str:
        return fingerprint(self.public_key)

    def view(self) -> dict[str, Any]:
        return {
            "machineId": self.machine_id,
            "address": self.address,
            "publicKey": b64(self.public_key),
            "relay": self.relay,
            "pairedAt": self.paired_at,
        }


def _peer(data: dict[str, Any]) -> Peer:
    bond = unb64(str(data.get("bond", "")))  # none in a peers.json from before bonds: sessions as they were
    return Peer(
        str(data["machineId"]), unb64(data["publicKey"]), str(data["relay"]), int(data["pairedAt"]), bond
    )


def peers(home: Path) -> dict[str, Peer]:
    """Paired machines by machine id."""
    return {mid: _peer(data) for mid, data in _read(remote_dir(home) / PEERS_FILE).items()}


def find_peer(home: Path, ref: str) -> Peer | None:
    """A paired machine by its machine id or its relay address."""
    known = peers(home)
    return known.get(ref) or next((p for p in known.values() if p.address == ref), None)


def seal_paths(home: Path, peer_address: str) -> tuple[Path, Path]:
    """Where the send and receive session state for one peer live."""
    directory = remote_dir(home) / SEAL_DIR
    return directory / f"{peer_address}.send.json", directory / f"{peer_address}.recv.json"


def _forget_sessions(home: Path, address: str) -> None:
    for path in seal_paths(home, address):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _store_peer(home: Path, peer: Peer) -> None:
    with locked(home) as directory:
        known = _read(directory / PEERS_FILE)
        old = known.get(peer.machine_id)
        if old is not None:
            _forget_sessions(home, fingerprint(unb64(old["publicKey"])))
        # A fresh pairing starts fresh sessions both ways (the peer forgot its side too).
        _forget_sessions(home, peer.address)
        known[peer.machine_id] = peer.view() | {"bond": b64(peer.bond)}  # the bond stays in this file
        homes.write_private_json(directory / PEERS_FILE, known)


def remove_peer(home: Path, ref: str) -> Peer | None:
    """Forget a paired machine (and its session state); None when it was not paired."""
    with locked(home) as directory:
        known = _read(directory / PEERS_FILE)
        peer = next(
            (_peer(d) for mid, d in known.items() if ref in (mid, fingerprint(unb64(d["publicKey"])))), None
        )
        if peer is None:
            return None
        del known[peer.machine_id]
        homes.write_private_json(directory / PEERS_FILE, known)
        _forget_sessions(home, peer.address)
        return peer


# --- codes --------------------------------------------------------------------------------------------------


@attrs.frozen
class Code:
    expires_at: int  # unix seconds
    code_id: bytes
    secret: bytes = attrs.field(repr=False)
    public_key: bytes
    machine_id: str
    relay: str

    def text(self) -> str:
        mid = self.machine_id.encode()
        head = _HEAD.pack(1, self.expires_at, self.code_id, self.secret, self.public_key, len(mid))
        raw = head + mid + self.relay.encode()
        return CODE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_code(text: str) -> Code:
    text = "".join(text.split())
    if not text.startswith(CODE_PREFIX):
        raise PairingError("bad_code", f"a pairing code starts with {CODE_PREFIX!r}")
    body = text[len(CODE_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        version, expires_at, code_id, secret, public, mid_len = _HEAD.unpack_from(raw)
        machine_id = raw[_HEAD.size : _HEAD.size + mid_len].decode()
        relay = raw[_HEAD.size + mid_len :].decode()
    except (ValueError, struct.error) as error:
        raise PairingError("bad_code", f"the pairing code is damaged ({error}); copy it again") from None
    if version != 1 or not machine_id or not relay:
        raise PairingError("bad_code", "the pairing code is damaged or from a newer version")
    return Code(expires_at, code_id, secret, public, machine_id, relay)


def create_code(home: Path, url: str, *, ttl: float = DEFAULT_CODE_TTL, now: float | None = None) -> Code:
    """A new one-time code for `url`; its secret is kept (0600) until it is used or expires."""
    if not 1 <= ttl <= MAX_CODE_TTL:
        raise PairingError("bad_request", f"a code lives 1 s to {MAX_CODE_TTL:g} s, not {ttl:g}")
    me = identity(home)
    at = time.time() if now is None else now
    code = Code(
        int(at + ttl), secrets.token_bytes(8), secrets.token_bytes(16), me.public, homes.machine_id(home), url
    )
    with locked(home) as directory:
        codes = _read(directory / CODES_FILE)
        # Drop codes that expired over a day ago; used and recently expired ones stay to explain a refusal.
        codes = {k: v for k, v in codes.items() if v["expiresAt"] > at - 86400}
        codes[code.code_id.hex()] = {"secret": b64(code.secret), "expiresAt": code.expires_at, "usedBy": None}
        homes.write_private_json(directory / CODES_FILE, codes)
        homes.write_private_json(directory / CONFIG_FILE, {"url": url})
    return code


def _mac_key(secret: bytes) -> bytes:
    return nacl.hash.blake2b(
        secret, digest_size=32, person=b"harness-pmac-v1", encoder=nacl.encoding.RawEncoder
    )


def _mac(secret: bytes, label: bytes, *parts: bytes | str) -> str:
    """Over label | A key | B key | codeId | A machine id | B machine id."""
    data = b"|".join([label, *(p.encode() if isinstance(p, str) else p for p in parts)])
    key = _mac_key(secret)
    return b64(nacl.hash.blake2b(data, digest_size=32, key=key, encoder=nacl.encoding.RawEncoder))


def _bond(secret: bytes, code_id: bytes) -> bytes:
    return nacl.hash.blake2b(
        code_id,
        digest_size=32,
        key=_mac_key(secret),
        person=b"harness-bond-v1",
        encoder=nacl.encoding.RawEncoder,
    )


def _box_json(box: nacl.public.Box, data: dict[str, Any]) -> bytes:
    return bytes(box.encrypt(json.dumps(data).encode()))


def _open_json(box: nacl.public.Box, sealed: bytes) -> dict[str, Any]:
    try:
        data = json.loads(box.decrypt(sealed))
    except (nacl.exceptions.CryptoError, ValueError) as error:
        raise PairingError("bad_reply", f"a pairing message did not open ({error})") from None
    if not isinstance(data, dict):
        raise PairingError("bad_reply", "a pairing message is not a JSON object")
    return data


def answer_request(
    home: Path, me: Identity, blob: bytes, *, now: float | None = None
) -> tuple[bytes, Peer | None]:
    """Machine A's side: check a pairing request, burn the code, store the peer; the reply blob to send."""
    if len(blob) < 33 or blob[0] != PAIR_REQUEST:
        raise PairingError("bad_request", "not a pairing request")
    ephemeral = nacl.public.PublicKey(blob[1:33])
    box = nacl.public.Box(nacl.public.PrivateKey(me.secret), ephemeral)
    request = _open_json(box, blob[33:])
    at = time.time() if now is None else now
    my_id = homes.machine_id(home)
    peer: Peer | None = None
    reply: dict[str, Any]
    with locked(home) as directory:
        codes = _read(directory / CODES_FILE)
        try:
            code_id = bytes.fromhex(str(request["codeId"]))
            joiner = unb64(str(request["publicKey"]))
            joiner_id = str(request["machineId"])
            record = codes.get(code_id.hex())
            if record is None:
                raise PairingError(CODE_UNKNOWN, "this machine issued no such pairing code")
            secret = unb64(record["secret"])
            expected = _mac(secret, b"req", me.public, joiner, code_id, my_id, joiner_id)
            if not hmac.compare_digest(expected, str(request["mac"])):
                raise PairingError(BAD_SECRET, "the pairing code's secret does not match")
            if record["usedBy"] is not None:
                raise PairingError(CODE_USED, f"this pairing code was already used (by {record['usedBy']})")
            if at > record["expiresAt"]:
                raise PairingError(CODE_EXPIRED, "this pairing code has expired; create a new one")
        except PairingError as error:
            reply = {"ok": False, "error": error.code, "detail": error.detail}
        except (KeyError, ValueError, TypeError) as error:
            reply = {"ok": False, "error": "bad_request", "detail": f"malformed pairing request ({error})"}
        else:
            record["usedBy"] = joiner_id
            homes.write_private_json(directory / CODES_FILE, codes)  # burnt before anything else happens
            peer = Peer(joiner_id, joiner, relay_url(home) or "", int(at * 1000), _bond(secret, code_id))
            mac = _mac(secret, b"res", me.public, joiner, code_id, my_id, joiner_id)
            reply = {"ok": True, "machineId": my_id, "mac": mac}
    if peer is not None:
        _store_peer(home, peer)
    return bytes([PAIR_REPLY]) + _box_json(box, reply), peer


async def accept_code(home: Path, text: str, *, timeout: float = ACCEPT_TIMEOUT) -> Peer:
    """Machine B's side of `pair accept CODE`: completes the handshake through the code's relay."""
    code = parse_code(text)
    if time.time() > code.expires_at:
        raise PairingError(CODE_EXPIRED, "this pairing code has expired; ask for a new one")
    me = identity(home)
    my_id = homes.machine_id(home)
    if code.public_key == me.public:
        raise PairingError("bad_request", "this code was created on this machine; accept it on the other one")
    current = relay_url(home)
    if current is not None and current != code.relay:
        raise PairingError("bad_request", f"this machine uses relay {current}; the code names {code.relay}")
    ephemeral = Identity.generate()  # the relay address of this one exchange, unlinkable to this machine
    box = nacl.public.Box(nacl.public.PrivateKey(ephemeral.secret), nacl.public.PublicKey(code.public_key))
    mac = _mac(code.secret, b"req", code.public_key, me.public, code.code_id, code.machine_id, my_id)
    request = {"codeId": code.code_id.hex(), "machineId": my_id, "publicKey": b64(me.public), "mac": mac}
    blob = bytes([PAIR_REQUEST]) + ephemeral.public + _box_json(box, request)
    target = fingerprint(code.public_key)
    answer: bytes | None = None
    try:
        async with connect_relay(code.relay, ephemeral) as relay:
            await relay.send(target, blob)
            with trio.move_on_after(timeout):
                while answer is None:
                    event = await relay.receive()
                    if isinstance(event, Frame):
                        if event.sender == target and event.blob[:1] == bytes([PAIR_REPLY]):
                            answer = event.blob[1:]
                    elif event.kind == OFFLINE:
                        raise PairingError(
                            OFFLINE,
                            f"machine {code.machine_id} is not connected to {code.relay}; "
                            "is its daemon running with the relay attached?",
                        )
    except RelayError as error:
        raise PairingError(OFFLINE, str(error)) from None
    if answer is None:
        raise PairingError(OFFLINE, f"no answer from machine {code.machine_id} within {timeout:g} s")
    reply = _open_json(box, answer)
    if not reply.get("ok"):
        raise PairingError(str(reply.get("error")), str(reply.get("detail")))
    expected = _mac(code.secret, b"res", code.public_key, me.public, code.code_id, code.machine_id, my_id)
    if reply.get("machineId") != code.machine_id or not hmac.compare_digest(expected, str(reply.get("mac"))):
        raise PairingError(BAD_SECRET, "the other machine could not prove it issued this code")
    peer = Peer(
        code.machine_id,
        code.public_key,
        code.relay,
        int(time.time() * 1000),
        _bond(code.secret, code.code_id),
    )
    if current is None:
        set_relay_url(home, code.relay)
    _store_peer(home, peer)
    return peer
