# Pairing under strangers (issue 15). Whoever knows a daemon's public key (it is in every code that machine
# printed, and on the relay) can send it pairing requests: one nested request used to end the daemon (finding
# 1), every refusal was a log line taken under a file lock (finding 7), and a code let a third machine take
# over a paired machine's id (finding 4). The findings are reproduced with the real processes (`harness relay
# serve`, `harness daemon run`, `harness pair create/accept`); the parsing and the counters also in process.
from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings

from harness.io import home as homes
from harness.io import pairing
from harness.io.relay import Frame, Notice
from harness.io.seal import IDENTITY_FILE, Identity, b64
from harness.io.throttled_log import ThrottledLog
from tests import test_relay_processes
from tests.hostile_relay import (
    WAIT,
    as_stranger,
    nested,
    pairing_blobs,
    pairing_request,
    unknown_code_request,
)
from tests.test_relay_processes import World, ask_and_reach_b, eventually, files, harness, ok

# test_relay_processes' `world` fixture: a relay and two paired daemons (processes), a team across them
paired_world = test_relay_processes.world
REFUSED = "pairing request refused"


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[tuple[World, str]]:
    """A relay and machine A's daemon on it, with a pairing code A printed; B has a home and no daemon."""
    world = World(tmp_path)
    try:
        world.start_relay()
        code = ok(harness("pair", "create", "--relay", world.url, "--home", str(world.a.home)))["code"]
        world.start_daemon(world.a, wait=False)
        world.wait_relay()
        world.wait_daemon(world.a, 0)
        yield world, code
        log = world.a.daemon.text()
        assert "internal error" not in log and "Traceback" not in log, log
    finally:
        world.close()


def refusal_lines(world: World) -> list[str]:
    return [line for line in world.a.daemon.text().splitlines() if REFUSED in line]


def replies(back: list[Frame | Notice], sender: str) -> int:
    return sum(isinstance(e, Frame) and e.sender == sender and e.blob[0] == pairing.PAIR_REPLY for e in back)


def send_round(world: World, blobs: list[bytes]) -> int:
    """Send `blobs` to A as a stranger and wait for A's first reply; the replies that came."""
    until_a_reply = lambda back: replies(back, world.a.address) == 1  # noqa: E731
    back = trio.run(lambda: as_stranger(world.url, world.a.address, blobs, until=until_a_reply))
    return replies(back, world.a.address)


@contextmanager
def remote_files_locked(home: Path) -> Iterator[None]:
    """Hold the lock of `home`'s remote files from this process: anything that takes it waits."""
    fd = os.open(pairing.remote_dir(home) / pairing.LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- finding 1 ----------------------------------------------------------------------------------------------


def test_finding_1_nested_pairing_request_refused(owner: tuple[World, str]) -> None:
    """One pairing request whose boxed JSON is nested 2,000 levels (well inside the relay's bounds) used to
    end the daemon with RecursionError. It is refused, logged once, and the daemon still pairs."""
    world, code = owner
    blob = pairing_request(pairing.identity(world.a.home).public, nested(2000).encode())
    back = trio.run(as_stranger, world.url, world.a.address, [blob])
    assert back == []
    eventually(lambda: refusal_lines(world) or not world.a.daemon.running, "A to refuse the request")
    assert world.a.daemon.running, world.a.daemon.text()
    assert len(refusal_lines(world)) == 1 and "nested deeper than" in refusal_lines(world)[0]

    peer = ok(harness("pair", "accept", code, "--home", str(world.b.home)))
    assert peer["machineId"] == world.a.machine_id
    assert list(pairing.peers(world.a.home)) == [world.b.machine_id]


# --- finding 4 ----------------------------------------------------------------------------------------------


def test_finding_4_pairing_takeover_refused(paired_world: World) -> None:
    """A third machine C that claims B's machine id while accepting A's code used to replace B's entry on A
    (B unpaired, C handed B's notices). A refuses it, C's `pair accept` says why, B stays paired and
    served; only after an explicit `harness pair remove` on A may that id be paired with another key."""
    world = paired_world
    c_home = world.tmp / "c"
    homes.ensure_home(c_home)
    (c_home / homes.MACHINE_FILE).write_text(world.b.machine_id + "\n")  # C claims B's id
    b_before = pairing.peers(world.a.home)[world.b.machine_id]
    code = ok(harness("pair", "create", "--home", str(world.a.home)))["code"]

    status, refused = harness("pair", "accept", code, "--home", str(c_home))
    assert (status, refused["error"]) == (1, "identity_conflict"), refused
    taken = f"machine {world.b.machine_id} is already paired with machine {world.a.machine_id}"
    assert taken in refused["detail"], refused
    assert f"harness pair remove {world.b.machine_id}" in refused["detail"]
    eventually(lambda: any("identity_conflict" in line for line in refusal_lines(world)), "A's refusal")
    assert pairing.peers(world.a.home) == {world.b.machine_id: b_before}
    assert pairing.peers(c_home) == {}
    ask_and_reach_b(world, "q1")  # B still receives A's notices

    # The other side: a code that claims A's id under C's key is refused by B before anyone is asked.
    homes.ensure_home(world.tmp / "c2")
    (world.tmp / "c2" / homes.MACHINE_FILE).write_text(world.a.machine_id + "\n")
    forged = ok(harness("pair", "create", "--relay", world.url, "--home", str(world.tmp / "c2")))["code"]
    status, refused = harness("pair", "accept", forged, "--home", str(world.b.home))
    assert (status, refused["error"]) == (1, "identity_conflict"), refused
    assert f"machine {world.a.machine_id} is already paired with this machine" in refused["detail"]
    assert list(pairing.peers(world.b.home)) == [world.a.machine_id]

    # Re-binding is an explicit act of A's owner: remove, then the same unused code pairs C under that id.
    ok(harness("pair", "remove", world.b.machine_id, "--home", str(world.a.home)))
    assert ok(harness("pair", "accept", code, "--home", str(c_home)))["machineId"] == world.a.machine_id
    assert pairing.peers(world.a.home)[world.b.machine_id].public_key == pairing.identity(c_home).public


# --- finding 7 ----------------------------------------------------------------------------------------------


def test_finding_7_stranger_refusals_throttled(owner: tuple[World, str]) -> None:
    """500 requests from strangers (noise, nested boxes, unknown codes) used to be 500 log lines, each under
    the remote files' lock. Now they are answered while this test holds that lock (no lock taken), touch
    no file, and make one log line per refusal code."""
    world, code = owner
    a_public = pairing.identity(world.a.home).public
    before = files(world.a.home)
    answered = 0
    with remote_files_locked(world.a.home):
        for _ in range(20):  # in rounds, each ended by a request A answers: all before it were handled
            noise = [bytes([pairing.PAIR_REQUEST]) + secrets.token_bytes(32 + 80) for _ in range(16)]
            deep = [pairing_request(a_public, nested(1000 + n).encode()) for n in range(8)]
            probe = pairing_request(a_public, unknown_code_request())
            got = send_round(world, [*noise, *deep, probe])
            answered += got
            if not got:  # A is stuck or gone: no use waiting for the other rounds
                break
    assert answered == 20
    assert files(world.a.home) == before
    lines = refusal_lines(world)
    assert len(lines) == 2, lines  # bad_request (noise and nested), code_unknown: once each
    assert world.a.daemon.running
    assert ok(harness("pair", "accept", code, "--home", str(world.b.home)))["machineId"] == world.a.machine_id


# --- in process: the responder's parsing, counters and lock -------------------------------------------------


def test_finding_7_refusals_are_counted_and_cost_no_lock(tmp_path: Path) -> None:
    home = tmp_path / "a"
    me = pairing.identity(home)
    pairing.create_code(home, "ws://127.0.0.1:1")
    lines: list[str] = []
    stats: Counter[str] = Counter()
    responder = pairing.Responder(home, me, log=lines.append, stats=stats)
    blobs = (
        [bytes([pairing.PAIR_REQUEST]) + secrets.token_bytes(100) for _ in range(300)]
        + [pairing_request(me.public, nested(3000).encode()) for _ in range(100)]
        + [pairing_request(me.public, unknown_code_request()) for _ in range(100)]
    )
    answers: list[bytes | None] = []
    with remote_files_locked(home):
        worker = threading.Thread(target=lambda: answers.extend(responder.answer(blob) for blob in blobs))
        worker.start()
        worker.join(WAIT)  # would block on the lock if a stranger's request took it
        assert not worker.is_alive()
    assert sum(a is not None for a in answers) == 100  # only the opened, well-formed ones get an answer
    assert stats == Counter(pairing_refused_bad_request=400, pairing_refused_code_unknown=100)
    assert len(lines) == 2 and all(line.startswith(REFUSED) for line in lines), lines


def test_refusal_log_names_how_many_were_left_out() -> None:
    now = [0.0]
    lines: list[str] = []
    log = ThrottledLog(lines.append, interval=60.0, clock=lambda: now[0])
    assert [log("a", "first a"), log("a", "second a"), log("b", "first b")] == [True, False, True]
    now[0] = 59.0
    assert not log("a", "third a")
    now[0] = 61.0
    assert log("a", "fourth a")
    assert lines == ["first a", "first b", "fourth a (and 2 more like it in the last 61 s, not logged)"]


FUZZ_OWNER = Identity.generate()  # machine A's key in the fuzz below, so that blobs are boxed to it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=pairing_blobs(FUZZ_OWNER.public))
def test_any_pairing_blob_is_a_counted_refusal_that_changes_nothing(tmp_path: Path, blob: bytes) -> None:
    """Nested, truncated, oversized, mistyped, mangled: each blob to A is refused (with or without an
    answer), counted once, and no file of A changes."""
    home = tmp_path / "a"
    directory = pairing.remote_dir(home)
    homes.read_or_create_secret(directory / IDENTITY_FILE, lambda: b64(FUZZ_OWNER.secret))
    if not (directory / pairing.CODES_FILE).exists():  # a code to be refused against (code_id unknown)
        pairing.create_code(home, "ws://127.0.0.1:1")
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    stats: Counter[str] = Counter()
    responder = pairing.Responder(home, pairing.identity(home), log=lambda line: None, stats=stats)
    responder.answer(blob)
    assert sum(stats.values()) == 1 and all(key.startswith("pairing_refused_") for key in stats), stats
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()} == before


def test_each_hostile_request_field_is_refused_with_a_reply_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "a"
    me = pairing.identity(home)
    code = pairing.create_code(home, "ws://127.0.0.1:1")
    good = {
        "codeId": code.code_id.hex(),
        "machineId": "b",
        "publicKey": b64(Identity.generate().public),
        "mac": b64(bytes(32)),
    }
    bad: list[dict[str, object]] = [
        good | {"codeId": 7},
        good | {"codeId": "zz" * 8},
        good | {"machineId": "x" * 256},
        good | {"machineId": "\x1b[2J"},
        good | {"machineId": None},
        good | {"publicKey": b64(bytes(31))},
        good | {"publicKey": "not base64!"},
        good | {"mac": "é" * 44},
        {k: v for k, v in good.items() if k != "mac"},
    ]
    before = {p.name: p.read_bytes() for p in (home / "remote").iterdir() if p.is_file()}
    stats: Counter[str] = Counter()
    responder = pairing.Responder(home, me, log=lambda line: None, stats=stats)
    for fields in bad:
        assert responder.answer(pairing_request(me.public, json.dumps(fields).encode())) is not None, fields
    assert stats == Counter(pairing_refused_bad_request=len(bad))
    good_but_wrong_secret = pairing_request(me.public, json.dumps(good).encode())
    assert responder.answer(good_but_wrong_secret) is not None and stats["pairing_refused_bad_secret"] == 1
    assert {p.name: p.read_bytes() for p in (home / "remote").iterdir() if p.is_file()} == before
