# End-to-end sealing of frames between paired machines, so the relay (and anything that records its traffic)
# only ever holds ciphertext. Each machine has a long-term X25519 identity; each direction between two
# machines runs its own session, so no handshake round trip is needed and the two directions never race:
#
# - The sender draws an ephemeral X25519 key per session (an "epoch"). The session key is
#   BLAKE2b(DH(ephemeral, receiver) || DH(sender, receiver) || ephemeral || sender || receiver || epoch):
#   only the sender's long-term key or the receiver's can produce it, so an opened frame is authenticated.
# - Nonces are never random: they hold an explicit 64-bit counter. Before a counter is used the sender has
#   durably reserved a block containing it (temp file, fsync, rename, fsync directory); after a crash it
#   resumes at the end of the reserved block, so no (key, nonce) pair is ever used twice.
# - The receiver keeps a sliding replay window over counters and durably persists the high-water mark (with
#   the epoch) before it hands a frame on, so frames accepted before a restart are refused after it. The mark
#   is written in place (two checksummed slots, alternating, fdatasync), which costs one small synced write
#   per frame instead of a temp file, a rename and two fsyncs; a torn write leaves the other slot intact.
# - A frame that fails any check changes no state. Older epochs are refused; the sender rekeys (next epoch)
#   well before its counters could run out.
#
# Frame layout (all integers big-endian):  kind 0x01 | epoch u32 | ephemeral public key 32 | counter u64 |
# XSalsa20-Poly1305 box (16-byte tag + body).  Nonce = 16 zero bytes || counter u64.
from __future__ import annotations

import base64
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Final

import attrs
import nacl.bindings
import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.public

from harness.core.bounded_json import parse_own
from harness.io.home import PRIVATE_FILE_MODE, read_or_create_secret, write_private_json

SEALED: Final = 0x01  # first byte of a sealed frame; other first bytes belong to the pairing handshake
_HEADER: Final = struct.Struct(">BI32sQ")
HEADER_BYTES: Final = _HEADER.size
OVERHEAD: Final = HEADER_BYTES + nacl.bindings.crypto_secretbox_MACBYTES
_PERSON: Final = b"harness-seal-v1"
# Counters reserved per fsync. A crash skips the rest of a block, which costs nothing: 2**64 is far away.
DEFAULT_BLOCK: Final = 1024
# A sender moves to a new epoch (fresh ephemeral key, counters from 1) once its counter reaches this.
DEFAULT_REKEY_AT: Final = 1 << 48
MAX_COUNTER: Final = (1 << 64) - 1
MAX_EPOCH: Final = (1 << 32) - 1
# Receiver mark file: two slots of (write sequence u64, epoch u32, mark u64, crc32 u32).
_SLOT: Final = struct.Struct(">QIQI")
# Frames this far behind the newest accepted one may still arrive out of order and be accepted once.
DEFAULT_WINDOW: Final = 1024
IDENTITY_FILE: Final = "identity.key"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def fingerprint(public_key: bytes) -> str:
    """A machine's relay address: 160 bits of BLAKE2b of its public key, lower-case base32 (32 chars)."""
    digest = nacl.hash.blake2b(
        public_key, digest_size=20, person=b"harness-addr-v1", encoder=nacl.encoding.RawEncoder
    )
    return base64.b32encode(digest).decode().lower()


@attrs.frozen
class Identity:
    """A long-term X25519 key pair."""

    secret: bytes = attrs.field(repr=False)
    public: bytes

    @property
    def address(self) -> str:
        return fingerprint(self.public)

    @classmethod
    def generate(cls) -> Identity:
        key = nacl.public.PrivateKey.generate()
        return cls(bytes(key), bytes(key.public_key))


def load_identity(directory: Path) -> Identity:
    """This machine's identity in `directory` (0600 file), created once (O_EXCL, so racing creators agree)."""
    secret = unb64(read_or_create_secret(directory / IDENTITY_FILE, lambda: b64(Identity.generate().secret)))
    return Identity(secret, nacl.bindings.crypto_scalarmult_base(secret))


class SealError(Exception):
    """A frame that was refused; `reason` is one of malformed, stale, replay, forged, exhausted (sending).
    No state changed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def session_key(
    dh_ephemeral: bytes,
    dh_static: bytes,
    *,
    ephemeral: bytes,
    sender: bytes,
    receiver: bytes,
    epoch: int,
    bond: bytes = b"",
) -> bytes:
    """`bond` is the pairing's own secret: a key of one pairing never opens a frame of another."""
    material = dh_ephemeral + dh_static + ephemeral + sender + receiver + struct.pack(">I", epoch)
    return nacl.hash.blake2b(
        material, digest_size=32, key=bond, person=_PERSON, encoder=nacl.encoding.RawEncoder
    )


def nonce(counter: int) -> bytes:
    return bytes(16) + struct.pack(">Q", counter)


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = parse_own(path.read_text())
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a seal state object")
    return data


def _read_mark(path: Path) -> tuple[int, int, int]:
    """(writes, epoch, mark) of the newest intact slot; zeros when the file does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, 0, 0
    best = (0, 0, 0)
    for offset in (0, _SLOT.size):
        if len(data) >= offset + _SLOT.size:
            writes, epoch, mark, crc = _SLOT.unpack_from(data, offset)
            if crc == zlib.crc32(data[offset : offset + _SLOT.size - 4]) and writes > best[0]:
                best = (writes, epoch, mark)
    if best[0] == 0 and data:
        raise ValueError(f"{path}: neither replay mark slot is intact")
    return best


def _write_mark(path: Path, writes: int, epoch: int, mark: int) -> None:
    """Overwrite the older slot in place and fdatasync; a first write also syncs the directory."""
    head = _SLOT.pack(writes, epoch, mark, 0)[:-4]
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.pwrite(fd, head + struct.pack(">I", zlib.crc32(head)), (writes % 2) * _SLOT.size)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if created:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class SendSession:
    """The sending half of one direction (this machine -> `peer`). Not thread-safe; one owner calls seal."""

    def __init__(
        self,
        path: Path,
        identity: Identity,
        peer: bytes,
        *,
        block: int = DEFAULT_BLOCK,
        rekey_at: int = DEFAULT_REKEY_AT,
        bond: bytes = b"",
    ) -> None:
        assert block >= 1 and 2 <= rekey_at <= MAX_COUNTER - block
        self.path = path
        self.identity = identity
        self.peer = peer
        self.bond = bond
        self.block = block
        self.rekey_at = rekey_at
        state = _read_state(path)
        if state is None:
            self.epoch = 0
            self.next = self.reserved = rekey_at  # forces a fresh epoch on first use
            self._ephemeral = b""
            self.ephemeral_public = b""
        else:
            self.epoch = int(state["epoch"])
            self._ephemeral = unb64(state["ephemeral"])
            # Everything below `reserved` may have been used before a crash: resume past it.
            self.next = self.reserved = int(state["reserved"])
            self.ephemeral_public = nacl.bindings.crypto_scalarmult_base(self._ephemeral)
        self._key = self._derive() if self._ephemeral else b""

    def _derive(self) -> bytes:
        return session_key(
            nacl.bindings.crypto_scalarmult(self._ephemeral, self.peer),
            nacl.bindings.crypto_scalarmult(self.identity.secret, self.peer),
            ephemeral=self.ephemeral_public,
            sender=self.identity.public,
            receiver=self.peer,
            epoch=self.epoch,
            bond=self.bond,
        )

    def _persist(self, epoch: int, ephemeral: bytes, reserved: int) -> None:
        write_private_json(self.path, {"epoch": epoch, "ephemeral": b64(ephemeral), "reserved": reserved})

    def seal(self, plaintext: bytes) -> bytes:
        """One sealed frame. Persists (fsync) a new reservation or a new epoch before its first use."""
        if self.next >= self.rekey_at:
            if self.epoch >= MAX_EPOCH:
                raise SealError("exhausted", "no epochs left for this peer; pair the machines again")
            epoch, ephemeral = self.epoch + 1, bytes(nacl.public.PrivateKey.generate())
            self._persist(epoch, ephemeral, 1 + self.block)
            self.epoch, self._ephemeral, self.next, self.reserved = epoch, ephemeral, 1, 1 + self.block
            self.ephemeral_public = nacl.bindings.crypto_scalarmult_base(ephemeral)
            self._key = self._derive()
        elif self.next >= self.reserved:
            reserved = self.next + self.block
            self._persist(self.epoch, self._ephemeral, reserved)
            self.reserved = reserved
        counter = self.next
        self.next += 1
        header = _HEADER.pack(SEALED, self.epoch, self.ephemeral_public, counter)
        return header + nacl.bindings.crypto_secretbox_easy(plaintext, nonce(counter), self._key)


class ReceiveSession:
    """The receiving half of one direction (`peer` -> this machine). Not thread-safe; one owner calls open."""

    def __init__(
        self, path: Path, identity: Identity, peer: bytes, *, window: int = DEFAULT_WINDOW, bond: bytes = b""
    ) -> None:
        assert window >= 1
        self.path = path
        self.identity = identity
        self.peer = peer
        self.bond = bond
        self.window = window
        self._mask = (1 << window) - 1
        self._writes, self.epoch, self.hwm = _read_mark(path)
        # After a restart nothing is known below the mark, so all of it counts as seen.
        self.seen = self._mask if self._writes else 0
        self._keys: dict[tuple[int, bytes], bytes] = {}

    def _key(self, epoch: int, ephemeral: bytes) -> bytes:
        key = self._keys.get((epoch, ephemeral))
        if key is None:
            key = session_key(
                nacl.bindings.crypto_scalarmult(self.identity.secret, ephemeral),
                nacl.bindings.crypto_scalarmult(self.identity.secret, self.peer),
                ephemeral=ephemeral,
                sender=self.peer,
                receiver=self.identity.public,
                epoch=epoch,
                bond=self.bond,
            )
            if len(self._keys) >= 4:
                self._keys.clear()
            self._keys[(epoch, ephemeral)] = key
        return key

    def check(self, epoch: int, counter: int) -> None:
        """Raise SealError if (epoch, counter) was seen or is too old; reads state only."""
        if epoch < self.epoch:
            raise SealError("stale", f"epoch {epoch} is older than the current epoch {self.epoch}")
        if epoch == self.epoch:
            if counter <= self.hwm - self.window:
                raise SealError("replay", f"counter {counter} is behind the window (mark {self.hwm})")
            if counter <= self.hwm and self.seen >> (self.hwm - counter) & 1:
                raise SealError("replay", f"counter {counter} of epoch {epoch} was already accepted")

    def open(self, frame: bytes) -> bytes:
        """The body of `frame`, after its new mark is durable. Raises SealError (state unchanged)."""
        if len(frame) < OVERHEAD:
            raise SealError("malformed", f"a sealed frame has at least {OVERHEAD} bytes, not {len(frame)}")
        kind, epoch, ephemeral, counter = _HEADER.unpack_from(frame)
        if kind != SEALED or epoch == 0 or counter == 0:
            raise SealError("malformed", "not a sealed frame of this version")
        self.check(epoch, counter)
        try:
            key = self._key(epoch, ephemeral)
            body = nacl.bindings.crypto_secretbox_open_easy(frame[HEADER_BYTES:], nonce(counter), key)
        except nacl.exceptions.CryptoError:  # also a low-order ephemeral key (no shared secret)
            raise SealError("forged", "the frame does not open with this peer's session key") from None
        return self._accept(epoch, counter, body)

    def _accept(self, epoch: int, counter: int, body: bytes) -> bytes:
        if epoch > self.epoch or counter - self.hwm >= self.window:  # a new epoch, or past the whole window
            hwm, seen = counter, 1
        elif counter > self.hwm:
            hwm, seen = counter, ((self.seen << (counter - self.hwm)) | 1) & self._mask
        else:
            self.seen |= 1 << (self.hwm - counter)
            return body
        _write_mark(self.path, self._writes + 1, epoch, hwm)
        self._writes, self.epoch, self.hwm, self.seen = self._writes + 1, epoch, hwm, seen
        return body
