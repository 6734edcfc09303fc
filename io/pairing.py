# Pairing two machines so they can seal frames to each other, and the private files that remember it.
# `pair create` on machine A writes a one-time code (A's relay, machine id, public key, a code id and a
# secret) and keeps the secret in a 0600 file; `pair accept CODE` on machine B connects to the relay with a
# throw-away key, sends A a request boxed to A's public key and authenticated by a MAC under the secret, and
# A's daemon answers with a box of its own plus a MAC. Each side stores the other's identity only after the
# other proved it knows the secret; the relay sees two boxes. A code is used once, then refused, as is an
# expired code or a wrong secret; every refusal names its reason. A machine id stays bound to the key it was
# paired with: a code never re-binds it to another key (`pair remove` first).
#
# Anyone who knows A's public key (it is in every code A printed, and on the relay) can send A requests, so
# A's side is built for strangers: a box is bounded before it is parsed (core/bounded_json), every failure
# is a refusal, and a request that does not prove a code's secret costs no lock and no write.
#
# Code: "hpair1." + base64url (no padding) of  version 1 | expiresAt u32 (unix s) | codeId 8 | secret 16 |
#       publicKey 32 | machineId length u8 | machineId | relay URL (rest), all UTF-8.
# Request blob:  0x10 | ephemeral public key 32 | box(ephemeral -> A, JSON {codeId, machineId, publicKey,
#                mac})
# Reply blob:    0x11 | box(A -> ephemeral, JSON {ok, machineId, mac} or {ok: false, error, detail})
# mac = BLAKE2b-256 keyed by BLAKE2b(secret), over "req"|"res" | A key | B key | codeId | A id | B id.
from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import fcntl
import hmac
import json
import os
import re
import secrets
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.public

from harness.core.bounded_json import JsonRefused, parse_json, parse_own
from harness.io import home as homes
from harness.io.seal import Identity, b64, fingerprint, load_identity, unb64
from harness.io.throttled_log import ThrottledLog

REMOTE_DIR: Final = homes.REMOTE_DIR
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
# A request or reply blob: kind byte, ephemeral key, box of one flat JSON object of four short fields (about
# 300 bytes). Anything longer is refused before it is opened.
MAX_BLOB_BYTES: Final = 4096
MAX_MACHINE_ID_BYTES: Final = 255  # the code keeps the length in one byte
MAX_DETAIL_CHARS: Final = 500  # of a refusal's detail in a reply, as B shows it
_CODE_ID: Final = re.compile(r"[0-9a-f]{16}")
_ERROR: Final = re.compile(r"[a-z_]{1,40}")

BAD_CODE: Final = "bad_code"
BAD_REQUEST: Final = "bad_request"
BAD_REPLY: Final = "bad_reply"
CODE_UNKNOWN: Final = "code_unknown"
CODE_USED: Final = "code_used"
CODE_EXPIRED: Final = "code_expired"
BAD_SECRET: Final = "bad_secret"
IDENTITY_CONFLICT: Final = "identity_conflict"
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
        data = parse_own(path.read_text())
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


def _check_binding(known: dict[str, Any], machine_id: str, public_key: bytes, side: str | None) -> None:
    """Refuse to pair `machine_id` with `public_key` when either is already paired with another key or id
    (`known`: peers.json). A code proves that its holder knows the secret, not who they are: it never
    takes over a paired machine's entry (its notices, its members' keys, its sessions). `side` names the
    refusing machine in the message (None: this one)."""
    where = "with this machine" if side is None else f"with machine {side}"
    on = "on this machine" if side is None else f"on machine {side}"
    for mid, data in known.items():
        same_id, same_key = mid == machine_id, unb64(data["publicKey"]) == public_key
        if same_id != same_key:
            what = (
                f"machine {mid} is already paired {where} under another identity key"
                if same_id
                else f"that identity key is already paired {where} as machine {mid}"
            )
            raise PairingError(
                IDENTITY_CONFLICT,
                f"{what}; a pairing code cannot re-bind it (if that machine really changed, run "
                f"`harness pair remove {mid}` {on} first)",
            )


def _store_peer(home: Path, directory: Path, known: dict[str, Any], peer: Peer) -> None:
    """Write `peer` into `known` (peers.json, read under the lock the caller holds)."""
    # A fresh pairing (of a new machine, or again of the same machine and key) starts fresh sessions both
    # ways: the peer forgot its side too.
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
        raise PairingError(BAD_CODE, f"a pairing code starts with {CODE_PREFIX!r}")
    body = text[len(CODE_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        version, expires_at, code_id, secret, public, mid_len = _HEAD.unpack_from(raw)
        machine_id = raw[_HEAD.size : _HEAD.size + mid_len].decode()
        relay = raw[_HEAD.size + mid_len :].decode()
    except (ValueError, struct.error) as error:
        raise PairingError(BAD_CODE, f"the pairing code is damaged ({error}); copy it again") from None
    if version != 1 or not _valid_machine_id(machine_id) or not (relay and relay.isprintable()):
        raise PairingError(BAD_CODE, "the pairing code is damaged or from a newer version")
    return Code(expires_at, code_id, secret, public, machine_id, relay)


def create_code(home: Path, url: str, *, ttl: float = DEFAULT_CODE_TTL, now: float | None = None) -> Code:
    """A new one-time code for `url`; its secret is kept (0600) until it is used or expires."""
    if not 1 <= ttl <= MAX_CODE_TTL:
        raise PairingError(BAD_REQUEST, f"a code lives 1 s to {MAX_CODE_TTL:g} s, not {ttl:g}")
    me, my_id = identity(home), homes.machine_id(home)
    if not _valid_machine_id(my_id):
        detail = f"this machine's id is not printable text of 1 to {MAX_MACHINE_ID_BYTES} bytes"
        raise PairingError(BAD_REQUEST, detail)
    at = time.time() if now is None else now
    code = Code(int(at + ttl), secrets.token_bytes(8), secrets.token_bytes(16), me.public, my_id, url)
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


def _box(secret: bytes, public: bytes, refusal: str) -> nacl.public.Box:
    """The box between two keys; PairingError(`refusal`) for a key no box can use (a low-order point)."""
    try:
        return nacl.public.Box(nacl.public.PrivateKey(secret), nacl.public.PublicKey(public))
    except nacl.exceptions.CryptoError:
        raise PairingError(refusal, "a pairing key is not a usable X25519 public key") from None


def _box_json(box: nacl.public.Box, data: dict[str, Any]) -> bytes:
    return bytes(box.encrypt(json.dumps(data).encode()))


def _open_json(box: nacl.public.Box, sealed: bytes, refusal: str) -> dict[str, Any]:
    """The one flat JSON object inside a pairing box, bounded before it is parsed; any failure is
    PairingError(`refusal`)."""
    try:
        opened = box.decrypt(sealed)
    except nacl.exceptions.CryptoError as error:
        raise PairingError(refusal, f"a pairing message did not open ({error})") from None
    data = parse_json(opened, max_bytes=MAX_BLOB_BYTES, max_depth=1)
    if isinstance(data, JsonRefused):
        raise PairingError(refusal, f"a pairing message is not a flat JSON object ({data.detail})")
    if not isinstance(data, dict):
        raise PairingError(refusal, "a pairing message is not a JSON object")
    return data


def _valid_machine_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value.encode()) <= MAX_MACHINE_ID_BYTES and value.isprintable()


@attrs.frozen
class _Request:
    code_id: bytes
    machine_id: str
    public_key: bytes
    mac: bytes = attrs.field(repr=False)


def _request(data: dict[str, Any]) -> _Request:
    """The fields of an opened request, each checked for type and size."""
    code_id, machine_id, public, mac = (data.get(k) for k in ("codeId", "machineId", "publicKey", "mac"))
    if not (isinstance(code_id, str) and _CODE_ID.fullmatch(code_id)):
        raise PairingError(BAD_REQUEST, "codeId is 16 lower-case hex digits")
    if not _valid_machine_id(machine_id):
        raise PairingError(BAD_REQUEST, f"machineId is printable text of 1 to {MAX_MACHINE_ID_BYTES} bytes")
    try:
        key = unb64(public) if isinstance(public, str) else b""
        proof = unb64(mac) if isinstance(mac, str) else b""
    except binascii.Error:
        key = proof = b""
    if len(key) != 32 or len(proof) != 32:
        raise PairingError(BAD_REQUEST, "publicKey and mac are 32 bytes each, in base64")
    assert isinstance(machine_id, str)
    return _Request(bytes.fromhex(code_id), machine_id, key, proof)


@attrs.frozen
class _Record:
    secret: bytes = attrs.field(repr=False)
    expires_at: int
    used_by: str | None


def _record(data: dict[str, Any]) -> _Record:
    used_by = data["usedBy"]
    return _Record(unb64(data["secret"]), int(data["expiresAt"]), None if used_by is None else str(used_by))


def _records(path: Path) -> tuple[dict[str, Any], dict[str, _Record]]:
    """pairing.json as stored and as records by code id (hex); HomeError when it is damaged."""
    data = _read(path)
    try:
        return data, {code_id: _record(record) for code_id, record in data.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise homes.HomeError(f"{path} holds a damaged code record ({error!r})") from None


class _Codes:
    """The issued codes as last read. pairing.json is read again only when a stat shows it was replaced
    (every write replaces it), so a stranger's request costs one stat: no read, no lock."""

    def __init__(self, home: Path) -> None:
        self._path = remote_dir(home) / CODES_FILE
        self._stamp: tuple[int, int] | None = None
        self._records: dict[str, _Record] = {}

    def get(self, code_id: bytes) -> _Record | None:
        try:
            stat = os.stat(self._path)
            stamp: tuple[int, int] | None = (stat.st_ino, stat.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._records = _records(self._path)[1]
            self._stamp = stamp
        return self._records.get(code_id.hex())


@attrs.frozen
class _Answer:
    reply: bytes | None  # None: refused without a word (the request did not open)
    peer: Peer | None = None  # the machine paired by this answer
    refusal: PairingError | None = None


class Responder:
    """Machine A's daemon answering the pairing requests the relay hands it. Anyone who knows A's public key
    can send them, so `answer` never raises: every refusal is counted in `stats` (`pairing_refused_CODE`)
    and logged at most once per code per interval (ThrottledLog), and a request that proves no code's
    secret costs no lock and no file access but one stat."""

    def __init__(
        self,
        home: Path,
        me: Identity,
        *,
        log: Callable[[str], None],
        stats: collections.Counter[str],
    ) -> None:
        self.home = home
        self.identity = me
        self.stats = stats
        self._log = log
        self._refusals = ThrottledLog(log)
        self._my_id = homes.machine_id(home)
        self._codes = _Codes(home)

    def answer(self, blob: bytes, *, now: float | None = None) -> bytes | None:
        """The reply blob to send back to the requester, or None (refused without a reply)."""
        try:
            answer = self._answer(blob, now)
        except homes.HomeError as error:  # this machine's own files are damaged, not the request
            self.stats["pairing_home_errors"] += 1
            self._refusals("home", f"pairing request not answered: {error}")
            return None
        if answer.refusal is not None:
            self.stats[f"pairing_refused_{answer.refusal.code}"] += 1
            self._refusals(answer.refusal.code, f"pairing request refused: {answer.refusal}")
        elif answer.peer is not None:
            self.stats["paired"] += 1
            self._log(f"paired with machine {answer.peer.machine_id} ({answer.peer.address})")
        return answer.reply

    def _answer(self, blob: bytes, now: float | None) -> _Answer:
        """Check a pairing request, burn the code, store the peer; the reply blob to send. Until the request
        proves a code's secret nothing takes the lock or touches a file."""
        if not 33 < len(blob) <= MAX_BLOB_BYTES or blob[0] != PAIR_REQUEST:
            detail = f"not a pairing request (0x10, a key and a box; at most {MAX_BLOB_BYTES} bytes)"
            return _Answer(None, refusal=PairingError(BAD_REQUEST, detail))
        try:
            box = _box(self.identity.secret, blob[1:33], BAD_REQUEST)
            data = _open_json(box, blob[33:], BAD_REQUEST)
        except PairingError as error:  # not from anyone holding a code: nothing to answer
            return _Answer(None, refusal=error)
        try:
            peer, mac = self._pair(_request(data), time.time() if now is None else now)
        except PairingError as error:
            reply = {"ok": False, "error": error.code, "detail": error.detail}
            return _Answer(bytes([PAIR_REPLY]) + _box_json(box, reply), refusal=error)
        reply = {"ok": True, "machineId": self._my_id, "mac": mac}
        return _Answer(bytes([PAIR_REPLY]) + _box_json(box, reply), peer)

    def _pair(self, request: _Request, at: float) -> tuple[Peer, str]:
        """The peer a valid request pairs (stored) and the reply's MAC; PairingError names a refusal."""
        me, my_id, code_id = self.identity, self._my_id, request.code_id
        joiner, joiner_id = request.public_key, request.machine_id
        record = self._codes.get(code_id)
        if record is None:
            raise PairingError(CODE_UNKNOWN, "this machine issued no such pairing code")
        expected = _mac(record.secret, b"req", me.public, joiner, code_id, my_id, joiner_id)
        if not hmac.compare_digest(unb64(expected), request.mac):
            raise PairingError(BAD_SECRET, "the pairing code's secret does not match")
        with locked(self.home) as directory:  # the request proved the secret: now the files, locked
            stored, records = _records(directory / CODES_FILE)
            record = records.get(code_id.hex())
            if record is None:  # dropped meanwhile (a day after it expired)
                raise PairingError(CODE_UNKNOWN, "this machine issued no such pairing code")
            if record.used_by is not None:
                raise PairingError(CODE_USED, f"this pairing code was already used (by {record.used_by})")
            if at > record.expires_at:
                raise PairingError(CODE_EXPIRED, "this pairing code has expired; create a new one")
            if joiner_id == my_id or joiner == me.public:
                raise PairingError(IDENTITY_CONFLICT, f"machine {my_id} cannot pair with its own id or key")
            known = _read(directory / PEERS_FILE)
            _check_binding(known, joiner_id, joiner, my_id)
            stored[code_id.hex()]["usedBy"] = joiner_id
            homes.write_private_json(directory / CODES_FILE, stored)  # burnt before anything else happens
            bond = _bond(record.secret, code_id)
            peer = Peer(joiner_id, joiner, relay_url(self.home) or "", int(at * 1000), bond)
            _store_peer(self.home, directory, known, peer)
        return peer, _mac(record.secret, b"res", me.public, joiner, code_id, my_id, joiner_id)


def _reply_refusal(reply: dict[str, Any]) -> PairingError:
    """A's refusal as B shows it: a short code and printable text of bounded length, or bad_reply."""
    error, detail = reply.get("error"), reply.get("detail")
    if not (isinstance(error, str) and _ERROR.fullmatch(error)):
        return PairingError(BAD_REPLY, "the other machine refused without a usable reason")
    text = "".join(c for c in detail if c.isprintable()) if isinstance(detail, str) else ""
    return PairingError(error, text[:MAX_DETAIL_CHARS] or "the other machine refused without saying why")


async def accept_code(home: Path, text: str, *, timeout: float = ACCEPT_TIMEOUT) -> Peer:
    """Machine B's side of `pair accept CODE`: completes the handshake through the code's relay."""
    # Imported here: only accepting a code talks to a relay; `pair create|list` start without trio.
    import trio

    from harness.io.relay import Frame, RelayError, connect_relay

    code = parse_code(text)
    if time.time() > code.expires_at:
        raise PairingError(CODE_EXPIRED, "this pairing code has expired; ask for a new one")
    me = identity(home)
    my_id = homes.machine_id(home)
    if code.public_key == me.public:
        raise PairingError(BAD_REQUEST, "this code was created on this machine; accept it on the other one")
    current = relay_url(home)
    if current is not None and current != code.relay:
        raise PairingError(BAD_REQUEST, f"this machine uses relay {current}; the code names {code.relay}")
    # Refused before A is asked (and asked again when storing): a code claiming the id of a machine paired
    # here under another key would take over that machine's entry.
    _check_binding(_read(remote_dir(home) / PEERS_FILE), code.machine_id, code.public_key, None)
    ephemeral = Identity.generate()  # the relay address of this one exchange, unlinkable to this machine
    box = _box(ephemeral.secret, code.public_key, BAD_CODE)
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
    reply = _open_json(box, answer, BAD_REPLY)
    if reply.get("ok") is not True:
        raise _reply_refusal(reply)
    expected = _mac(code.secret, b"res", code.public_key, me.public, code.code_id, code.machine_id, my_id)
    proof = reply.get("mac")
    if (
        reply.get("machineId") != code.machine_id
        or not isinstance(proof, str)
        or not hmac.compare_digest(expected.encode(), proof.encode())
    ):
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
    with locked(home) as directory:
        known = _read(directory / PEERS_FILE)
        _check_binding(known, peer.machine_id, peer.public_key, None)
        _store_peer(home, directory, known, peer)
    return peer
