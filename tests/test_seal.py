# Sealing between two machines: round trips, tampering and replays change nothing, the persisted high-water
# mark and counter reservations survive restarts and crashes, and epochs roll over before counters run out.
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io.seal import (
    HEADER_BYTES,
    Identity,
    ReceiveSession,
    SealError,
    SendSession,
    _read_mark,
    fingerprint,
    load_identity,
)

A = Identity.generate()
B = Identity.generate()


def pair(tmp: Path, **options: int) -> tuple[SendSession, ReceiveSession]:
    block, rekey_at = options.get("block", 8), options.get("rekey_at", 1 << 40)
    sender = SendSession(tmp / "a-to-b.send.json", A, B.public, block=block, rekey_at=rekey_at)
    receiver = ReceiveSession(tmp / "a-to-b.recv.json", B, A.public, window=options.get("window", 64))
    return sender, receiver


def reopen_receiver(receiver: ReceiveSession) -> ReceiveSession:
    return ReceiveSession(receiver.path, B, A.public, window=receiver.window)


def state(receiver: ReceiveSession) -> tuple[int, int, int, bytes]:
    on_disk = receiver.path.read_bytes() if receiver.path.exists() else b""
    return receiver.epoch, receiver.hwm, receiver.seen, on_disk


def test_identity_is_private_and_stable(tmp_path: Path) -> None:
    first = load_identity(tmp_path)
    again = load_identity(tmp_path)
    assert first == again and len(first.address) == 32 and first.address == fingerprint(first.public)
    assert stat.S_IMODE(os.stat(tmp_path / "identity.key").st_mode) == 0o600


def test_round_trip_and_private_state_files(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path)
    for body in (b"", b"hello", os.urandom(70_000)):
        assert receiver.open(sender.seal(body)) == body
    for path in (sender.path, receiver.path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert b"hello" not in sender.seal(b"hello")


def test_tampered_frame_rejected_and_state_unchanged(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path)
    receiver.open(sender.seal(b"first"))
    frame = bytearray(sender.seal(b"second"))
    before = state(receiver)
    for index in (0, 1, 6, HEADER_BYTES - 1, HEADER_BYTES, len(frame) - 1):
        bad = bytearray(frame)
        bad[index] ^= 0x01
        with pytest.raises(SealError):
            receiver.open(bytes(bad))
        assert state(receiver) == before
    with pytest.raises(SealError, match="malformed"):
        receiver.open(bytes(frame[:20]))
    assert state(receiver) == before
    assert receiver.open(bytes(frame)) == b"second"  # the genuine frame still opens


def test_frame_from_someone_else_is_forged(tmp_path: Path) -> None:
    mallory = Identity.generate()
    forger = SendSession(tmp_path / "m.send.json", mallory, B.public)
    _, receiver = pair(tmp_path)
    with pytest.raises(SealError, match="forged"):
        receiver.open(forger.seal(b"hi"))
    assert receiver.hwm == 0 and not receiver.path.exists()


def test_replay_rejected_also_after_restart(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path)
    frames = [sender.seal(b"%d" % i) for i in range(5)]
    for frame in frames:
        receiver.open(frame)
    with pytest.raises(SealError, match="replay"):
        receiver.open(frames[2])
    restarted = reopen_receiver(receiver)  # the process died; only the persisted mark survives
    for frame in frames:
        with pytest.raises(SealError, match="replay"):
            restarted.open(frame)
    assert restarted.open(sender.seal(b"new")) == b"new"


def test_mark_is_durable_before_the_frame_is_handed_on(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path)
    receiver.open(sender.seal(b"x"))
    assert _read_mark(receiver.path) == (1, 1, 1)  # (writes, epoch, mark) on disk before open returned
    receiver.open(sender.seal(b"y"))
    assert _read_mark(receiver.path) == (2, 1, 2)


def test_torn_mark_write_falls_back_to_the_other_slot(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path)
    frames = [sender.seal(b"%d" % i) for i in range(3)]
    for frame in frames:
        receiver.open(frame)
    data = bytearray(receiver.path.read_bytes())
    data[40] ^= 0xFF  # the slot of the last write (write 3, slot 1) is torn
    receiver.path.write_bytes(bytes(data))
    restarted = reopen_receiver(receiver)
    assert (restarted.epoch, restarted.hwm) == (1, 2)  # the previous mark survives
    with pytest.raises(SealError, match="replay"):
        restarted.open(frames[1])


def test_counter_reservation_survives_a_crash_mid_block(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path, block=16)
    used = [int.from_bytes(sender.seal(b"x")[37:45], "big") for _ in range(5)]
    assert json.loads(sender.path.read_text())["reserved"] == 17  # one block reserved before its first use
    # Crash: the in-memory counter is gone. A restart must never hand out a counter that may have been used.
    after = SendSession(sender.path, A, B.public, block=16)
    frame = after.seal(b"after the crash")
    counter = int.from_bytes(frame[37:45], "big")
    assert counter > max(used) and counter >= 17
    assert receiver.open(frame) == b"after the crash"


def test_crash_before_reservation_is_durable_uses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender, _receiver = pair(tmp_path, block=4)
    for _ in range(4):
        sender.seal(b"x")
    failing = OSError("disk full")

    def broken(path: Path, data: object) -> None:
        raise failing

    monkeypatch.setattr("harness.io.seal.write_private_json", broken)
    with pytest.raises(OSError):
        sender.seal(b"needs a new block")
    monkeypatch.undo()
    assert sender.next == 5  # nothing was used; the next reservation starts where the last one ended
    assert int.from_bytes(sender.seal(b"ok")[37:45], "big") == 5


def test_rekey_before_exhaustion(tmp_path: Path) -> None:
    sender, receiver = pair(tmp_path, block=2, rekey_at=4)
    epochs = []
    old_frames = []
    for i in range(10):
        frame = sender.seal(b"%d" % i)
        epochs.append(int.from_bytes(frame[1:5], "big"))
        old_frames.append(frame)
        assert receiver.open(frame) == b"%d" % i
    assert epochs == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    assert max(int.from_bytes(f[37:45], "big") for f in old_frames) < 4
    with pytest.raises(SealError, match="stale"):
        receiver.open(old_frames[0])  # a frame of an older epoch never comes back
    # Epoch and ephemeral key persist: a restarted sender continues in its epoch, past its reservation.
    again = SendSession(sender.path, A, B.public, block=2, rekey_at=4)
    assert receiver.open(again.seal(b"later")) == b"later"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_window_property(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    tmp = tmp_path_factory.mktemp("seal")
    window = 16
    sender, receiver = pair(tmp, window=window)
    frames = [sender.seal(b"%d" % i) for i in range(data.draw(st.integers(1, 40), label="frames"))]
    # Deliver a shuffled sequence with duplicates; each frame is accepted at most once, and a frame is
    # accepted exactly when it is new and not `window` or more behind the newest accepted one.
    order = data.draw(st.lists(st.integers(0, len(frames) - 1), max_size=80), label="order")
    accepted: set[int] = set()
    newest = 0
    for index in order:
        counter = index + 1
        expect = counter not in accepted and counter > newest - window
        before = state(receiver)
        try:
            assert receiver.open(frames[index]) == b"%d" % index
            got = True
        except SealError:
            got = False
            assert state(receiver) == before
        assert got == expect, (index, sorted(accepted), newest)
        if got:
            accepted.add(counter)
            newest = max(newest, counter)
    # After a restart, everything accepted (indeed everything up to the mark) stays refused.
    restarted = reopen_receiver(receiver)
    for counter in accepted:
        with pytest.raises(SealError):
            restarted.open(frames[counter - 1])


def test_a_counter_far_ahead_moves_the_mark_without_growing_the_window(tmp_path: Path) -> None:
    # A frame far beyond the mark (a peer's bug, or its keys in the wrong hands) costs what any frame costs.
    sender, receiver = pair(tmp_path)
    first = sender.seal(b"one")
    assert receiver.open(first) == b"one"
    sender.next, sender.reserved = 1 << 39, (1 << 39) + 8  # below rekey_at: the same epoch
    assert receiver.open(sender.seal(b"far")) == b"far"
    assert receiver.hwm == 1 << 39 and receiver.seen == 1
    with pytest.raises(SealError) as refused:
        receiver.open(first)
    assert refused.value.reason == "replay"
    assert receiver.open(sender.seal(b"next")) == b"next"
