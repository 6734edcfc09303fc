# Teams across machines with every part a real process on loopback: `harness relay serve --record FILE`,
# two `harness daemon run` with separate data directories, paired with `harness pair create` / `accept`,
# and every member action a `harness team` call (bob, whose agent lives on machine B, answers from B with
# `--machine A`). The relay's record is the view of everything it saw: it must hold routing and ciphertext
# only. Sealed frames taken from that record and sent again as machine A (replayed, reordered, truncated,
# tampered, or older than a restart of B) must change nothing on B; and a relay killed mid-exchange and
# restarted must lose and duplicate nothing.
#
# No agent runs in a terminal, so the notices wait `queued` on their desks (B holds bob's introduction and,
# behind it, his questions; A holds alice's answer notices). The test reads a desk read-only from its
# journal, as `harness doctor` does, beside the running daemon; the owner's view comes from the CLI.
from __future__ import annotations

import base64
import collections
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest
import trio

from harness.core import delivery as d
from harness.core.codec import desk_command_from_json
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.io import home as homes
from harness.io import pairing
from harness.io.desk_runner import replay_desk
from harness.io.journal_files import delivery_store_dir, scan_store_consistent
from harness.io.relay import connect_relay
from harness.io.seal import HEADER_BYTES, SEALED, Identity, SendSession

HARNESS = [sys.executable, "-m", "harness.cli.main"]
TEAM_ID = "team0000000000000000000000zq7x41"
TEAM_NAME = "Quetzal Larkspur Initiative"
BODY = "Which endpoint returns the vault state? (a private question: ultramarine-okapi)"
ANSWER = "GET /v1/vault/state, see src/vault.ts:42 (a private answer: vermilion-pangolin)"
HEADER = struct.Struct(">BI32sQ")  # seal.py's frame header: kind, epoch, ephemeral key, counter
REFUSAL = re.compile(r"refused a sealed frame from machine (\S+) \((\w+): ([^\n]*)\)")
WAIT = 20.0  # seconds any one expected change may take (reconnect backoff is up to 5 s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def eventually(predicate: Callable[[], object], what: str, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


T = TypeVar("T")


def settled(read: Callable[[], T], what: str, quiet: float, seconds: float = 60.0) -> T:
    """What `read` returns once it stayed the same for `quiet` seconds: a loaded machine may run a daemon's
    late work long after the change a test waited for, so "done" is "no change for a while", not a pause."""
    deadline = time.monotonic() + seconds
    value, since = read(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} to settle")
        time.sleep(0.2)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def harness(*args: str, timeout: float = 60) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_MEMBER_KEY", "HARNESS_HOME"}}
    done = subprocess.run(
        [*HARNESS, *args, "--json"], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    try:
        body = json.loads(done.stdout)
    except ValueError:
        detail = f"`harness {' '.join(args)}` printed no JSON: {done.stdout!r} {done.stderr!r}"
        raise AssertionError(detail) from None
    return done.returncode, body


def ok(result: tuple[int, Any]) -> Any:
    status, body = result
    assert status == 0, body
    return body


class Process:
    """One `harness` process, its stderr in a log file; stopped by pid."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv = argv
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None

    def start(self) -> None:
        assert not self.running
        if self._err is not None:
            self._err.close()
        self._err = self.log.open("ab")
        self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._err, stderr=self._err)

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Signal the process and reap it; its exit status."""
        assert self.popen is not None
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
        try:
            status = self.popen.wait(15)
        finally:
            if self.popen.poll() is None:  # it ignored the signal: the test fails, the process still goes
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
            if self._err is not None:
                self._err.close()
        return status

    def text(self) -> str:
        return self.log.read_text(errors="replace")


class Machine:
    """A data directory and the daemon process that serves it."""

    def __init__(self, name: str, home: Path, logs: Path) -> None:
        self.name = name
        self.home = home
        self.daemon = Process([*HARNESS, "daemon", "run", "--home", str(home)], logs / name)

    @property
    def machine_id(self) -> str:
        return homes.machine_id(self.home)

    @property
    def address(self) -> str:
        return pairing.identity(self.home).address

    def refusals(self) -> list[tuple[str, str, str]]:
        """(machine, reason, detail) of every `refused a sealed frame` line in its daemon's log."""
        return REFUSAL.findall(self.daemon.text())


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        logs = tmp_path / "logs"
        logs.mkdir()
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.record = tmp_path / "relay.jsonl"
        self.relay = Process(
            [*HARNESS, "relay", "serve", "--port", str(self.port), "--record", str(self.record)],
            logs / "relay",
        )
        self.a = Machine("a", tmp_path / "a", logs)
        self.b = Machine("b", tmp_path / "b", logs)
        self.relay_starts = 0
        self.keys: dict[str, str] = {}

    # --- processes ----------------------------------------------------------------------------------------

    def start_relay(self) -> None:
        self.relay.start()
        self.relay_starts += 1

    def wait_relay(self) -> None:
        want = self.relay_starts
        eventually(
            lambda: self.relay.text().count("harness relay: listening on") >= want or not self.relay.running,
            "the relay to listen",
        )
        assert self.relay.running, self.relay.text()

    def start_daemon(self, machine: Machine, *, wait: bool = True) -> None:
        """Start `machine`'s daemon; unless told not to, wait until it listens and the relay welcomed it."""
        welcomed = self.welcomes(machine.address)
        machine.daemon.start()
        if wait:
            self.wait_daemon(machine, welcomed)

    def wait_daemon(self, machine: Machine, welcomed: int) -> None:
        def listening() -> bool:
            info = homes.read_daemon_info(machine.home)
            assert machine.daemon.running, machine.daemon.text()
            return info is not None and info.get("pid") == machine.daemon.pid

        eventually(listening, f"daemon {machine.name} to listen")
        self.wait_welcomed(machine, welcomed)

    def wait_welcomed(self, machine: Machine, before: int) -> None:
        eventually(lambda: self.welcomes(machine.address) > before, f"the relay to welcome {machine.name}")

    def close(self) -> None:
        """Kill every process this world started (also stopped ones: SIGKILL needs no SIGCONT)."""
        for process in (self.a.daemon, self.b.daemon, self.relay):
            if process.popen is not None:
                process.stop(signal.SIGKILL)

    # --- the relay's record -------------------------------------------------------------------------------

    def seen(self) -> list[tuple[str, dict[str, Any]]]:
        """(direction, message) of every message in the relay's record."""
        if not self.record.exists():
            return []
        # The relay is still writing: a last line without its newline is not there yet.
        complete = self.record.read_text().rpartition("\n")[0]
        lines = [json.loads(line) for line in complete.split("\n") if line]  # not splitlines: U+2028 is text
        return [(line["direction"], json.loads(line["message"])) for line in lines]

    def welcomes(self, address: str) -> int:
        return sum(1 for _, m in self.seen() if m.get("type") == "welcome" and m.get("address") == address)

    def sealed_from(self, sender: Machine) -> list[bytes]:
        """The sealed frames the relay handed on from `sender` (to the other machine, its only peer)."""
        blobs = []
        for way, message in self.seen():
            if way == "out" and message.get("from") == sender.address:
                blob = base64.b64decode(message["blob"])
                if blob[:1] == bytes([SEALED]):
                    blobs.append(blob)
        return blobs

    # --- the team -----------------------------------------------------------------------------------------

    def owner(self, *args: str) -> tuple[int, Any]:
        return harness("team", "--home", str(self.a.home), "--team", TEAM_ID, *args)

    def alice(self, *args: str) -> tuple[int, Any]:
        return harness(
            "team", "--home", str(self.a.home), "--team", TEAM_ID, "--key", self.keys["alice"], *args
        )

    def bob(self, *args: str) -> tuple[int, Any]:
        """Bob acts from machine B, through B's daemon and the relay, on the team machine A owns."""
        machine = ("--machine", self.a.machine_id)
        return harness(
            "team", "--home", str(self.b.home), *machine, "--team", TEAM_ID, "--key", self.keys["bob"], *args
        )

    def exchange(self, question: str) -> dict[str, Any]:
        """The owner's view of one exchange."""
        return dict(ok(self.owner("status", question)))


def notice(question: str, kind: str) -> str:
    return f"{TEAM_ID}/{question}/{kind}"


def desk_journal(home: Path) -> tuple[d.Desk, list[d.DeskCommand]]:
    """A machine's delivery desk and its journaled commands, read without disturbing its running daemon."""
    scan = scan_store_consistent(delivery_store_dir(home))
    assert scan.recovery.checkpoint is None  # few entries here: the journal holds every command ever taken
    commands = []
    for entry in scan.recovery.entries:
        command = desk_command_from_json(entry.body)
        assert not isinstance(command, Rejected), command
        commands.append(command)
    return replay_desk(homes.machine_id(home), scan.recovery, DEFAULT_LIMITS), commands


def desk_state(home: Path, notice_id: str) -> str | None:
    if not delivery_store_dir(home).is_dir():
        return None
    held = desk_journal(home)[0].notices.get(notice_id)
    return None if held is None else held.state.value


def on_desk(machine: Machine, notice_id: str, state: str) -> Callable[[], bool]:
    return lambda: desk_state(machine.home, notice_id) == state


def on_owners_desk(world: World, question: str, kind: str, state: str) -> Callable[[], bool]:
    """Whether the owner's own desk (A's) holds a notice in `state`, asked of the desk itself (`team
    delivery`): it journals the owner's requests with its next durable append, so its file may not show them
    yet."""

    def holds() -> bool:
        checked = ok(world.owner("delivery", question, *(["--answer"] if kind == "answer" else [])))
        return bool(checked["held"]) and checked["delivery"]["state"] == state

    return holds


def stopped_submits(machine: Machine) -> collections.Counter[str]:
    """`submits` of a machine whose daemon is stopped first (cleanly: it writes what rode its next append)."""
    assert machine.daemon.stop() == 0
    return submits(machine.home)


def submits(home: Path) -> collections.Counter[str]:
    """How many times the desk took each notice (a duplicate submit is never journaled twice)."""
    return collections.Counter(c.notice_id for c in desk_journal(home)[1] if isinstance(c, d.Submit))


def files(home: Path) -> dict[str, bytes]:
    """Every file of a data directory (desk journal, replay marks, routes, ...), byte for byte."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A relay and two daemons, paired with the CLI, and team TEAM_ID on A with alice (A) and bob (B)."""
    here = World(tmp_path)
    try:
        here.start_relay()
        # `pair create` before A's daemon starts, so that it finds its relay at once (a daemon without a
        # relay configured looks again only every 5 s); `pair accept` needs A's daemon on the relay, not B's.
        code = ok(harness("pair", "create", "--relay", here.url, "--home", str(here.a.home)))
        here.start_daemon(here.a, wait=False)
        here.wait_relay()
        here.wait_daemon(here.a, 0)
        peer = ok(harness("pair", "accept", code["code"], "--home", str(here.b.home)))
        assert peer["machineId"] == here.a.machine_id == code["machineId"]
        here.start_daemon(here.b)
        members = [
            {"machineId": here.a.machine_id, "agentId": "agent-alice", "name": "alice"},
            {"machineId": here.b.machine_id, "agentId": "agent-bob", "name": "bob"},
        ]
        team_file = tmp_path / "team.json"
        team_file.write_text(json.dumps({"id": TEAM_ID, "name": TEAM_NAME, "members": members}))
        ok(harness("team", "--home", str(here.a.home), "create", "--file", str(team_file)))
        for name in ("alice", "bob"):
            here.keys[name] = ok(here.owner("key", name))["memberKey"]
        yield here
        for machine in (here.a, here.b):
            log = machine.daemon.text()
            assert "internal error" not in log and "Traceback" not in log, log
    finally:
        here.close()


def ask_and_reach_b(world: World, question: str, text: str = BODY) -> dict[str, Any]:
    """Alice asks bob on A; wait until B's desk holds the notice and the owner shows B's report of it."""
    asked = ok(world.alice("ask", "bob", text, "--id", question))
    assert (asked["id"], asked["state"], asked["text"]) == (question, "open", text)
    held = notice(question, "question")
    eventually(on_desk(world.b, held, "queued"), f"B's desk to hold {held}")
    return reported_by_b(world, question)


def reported_by_b(world: World, question: str) -> dict[str, Any]:
    """The owner's exchange once its delivery view is what B's desk says of the notice (state and reason)."""
    held = notice(question, "question")

    def agrees() -> bool:
        desk = desk_journal(world.b.home)[0].notices.get(held)
        view = world.exchange(question)["delivery"]
        return (
            desk is not None
            and view is not None
            and (view["state"], view["reason"]) == (desk.state.value, desk.reason and desk.reason.value)
        )

    eventually(agrees, f"the owner to record B's report of {held}")
    return world.exchange(question)


# --- 1. the full path ---------------------------------------------------------------------------------------


def test_question_reply_and_continuation_across_machines(world: World) -> None:
    exchange = ask_and_reach_b(world, "q1")
    # The notice lives on B's desk only, waiting for bob's terminal; the owner's view is B's report (B's
    # desk queues it behind bob's introduction: reason `pressure`, which only B's desk can say).
    assert desk_state(world.a.home, notice("q1", "question")) is None
    assert exchange["delivery"]["state"] == "queued" and exchange["delivery"]["reason"] == "pressure"
    bob_id = exchange["to"]

    # Bob reads his inbox from B; the owner tells B's desk the notice was read there, and B reports back.
    inbox = ok(world.bob("inbox"))
    assert [q["id"] for q in inbox["questions"]] == ["q1"] and inbox["questions"][0]["text"] == BODY
    eventually(on_desk(world.b, notice("q1", "question"), "withdrawn"), "B's desk: read")
    assert reported_by_b(world, "q1")["delivery"]["reason"] == "inbox"

    # Bob answers explicitly from B; the owner records it and owes alice (on A) the continuation.
    replied = ok(world.bob("reply", "q1", ANSWER, "--evidence", "src/vault.ts:42"))
    assert replied["state"] == "answered" and replied["answer"]["text"] == ANSWER
    assert replied["answer"]["author"] == bob_id and replied["answer"]["evidence"] == ["src/vault.ts:42"]
    continuation = notice("q1", "answer")
    eventually(on_owners_desk(world, "q1", "answer", "queued"), "A's desk to hold the answer")
    assert desk_state(world.b.home, continuation) is None
    owed = world.exchange("q1")["answerDelivery"]
    assert owed is not None and owed["state"] == "queued", owed

    # Alice's wait ends with the correlated answer; having it, her continuation notice is withdrawn.
    woke = ok(world.alice("wait", "q1", "--seconds", "10"))
    assert woke["reason"] == "answered" and woke["exchange"]["id"] == "q1"
    assert woke["exchange"]["answer"]["text"] == ANSWER and woke["exchange"]["answer"]["author"] == bob_id
    eventually(on_owners_desk(world, "q1", "answer", "withdrawn"), "the continuation retrieved")
    assert submits(world.b.home)[notice("q1", "question")] == 1

    # A member on B never gets owner authority through the relay, and an unknown machine is refused.
    status, refused = world.bob("get")
    assert (status, refused["error"]) == (1, "unauthorized")
    elsewhere = ("team", "--home", str(world.b.home), "--machine", "not-paired", "--team", TEAM_ID)
    status, unpaired = harness(*elsewhere, "--key", world.keys["bob"], "inbox")
    assert (status, unpaired["error"]) == (1, "unpaired")
    assert stopped_submits(world.a)[continuation] == 1


# --- 2. a duplicated reply ----------------------------------------------------------------------------------


def test_a_repeated_reply_is_the_same_record_and_a_different_one_conflicts(world: World) -> None:
    ask_and_reach_b(world, "q1")
    first = ok(world.bob("reply", "q1", ANSWER))
    continuation = notice("q1", "answer")
    eventually(on_owners_desk(world, "q1", "answer", "queued"), "A's desk to hold the answer")
    before = ok(world.owner("get"))

    # The reply's identity is its question: the same reply again (a retry after an uncertain outcome) is
    # answered with the recorded exchange and changes nothing.
    again = ok(world.bob("reply", "q1", ANSWER))
    assert again["answer"] == first["answer"] and again["state"] == "answered"
    status, conflict = world.bob("reply", "q1", ANSWER + " (changed my mind)")
    assert (status, conflict["error"]) == (1, "conflict"), conflict

    after = ok(world.owner("get"))
    assert after["revision"] == before["revision"]
    assert after["exchanges"] == before["exchanges"]
    assert [e["answer"]["text"] for e in after["exchanges"]] == [ANSWER]
    answers = ok(world.alice("inbox"))["answers"]
    assert [(a["id"], a["answer"]["text"]) for a in answers] == [("q1", ANSWER)]
    assert stopped_submits(world.a)[continuation] == 1  # one continuation for alice, not two


# --- 3. what the relay saw ----------------------------------------------------------------------------------

ROUTING_SHAPES = {
    "in": [{"type", "publicKey", "proof"}, {"to", "blob"}, {"to", "blob", "id"}],
    "out": [
        {"type", "relayKey", "nonce"},
        {"type", "address"},
        {"from", "blob"},
        {"notice", "detail"},
        {"notice", "detail", "to", "id"},
    ],
}
BLOB_KINDS = {0x01: "sealed", 0x02: "unpaired", pairing.PAIR_REQUEST: "pair", pairing.PAIR_REPLY: "pair"}


def test_the_relay_sees_routing_and_ciphertext_only(world: World) -> None:
    ask_and_reach_b(world, "q1")
    ok(world.bob("inbox"))
    bob_id = ok(world.bob("reply", "q1", ANSWER))["answer"]["author"]
    assert ok(world.alice("wait", "q1", "--seconds", "10"))["reason"] == "answered"
    alice_id = world.exchange("q1")["from"]

    raw = world.record.read_text()
    assert world.record.stat().st_mode & 0o777 == 0o600  # routing and ciphertext, still nobody else's
    seen = world.seen()
    secrets = {
        "question": BODY,
        "answer": ANSWER,
        "question words": "ultramarine-okapi",
        "answer words": "vermilion-pangolin",
        "alice's key": world.keys["alice"],
        "bob's key": world.keys["bob"],
        "team name": TEAM_NAME,
        "team id": TEAM_ID,
        "alice's member id": alice_id,
        "bob's member id": bob_id,
        "agent": "agent-bob",
        "key field": "memberKey",
        "A's machine id": world.a.machine_id,
        "B's machine id": world.b.machine_id,
    }
    blobs = collections.Counter[str]()
    senders = collections.Counter[str]()
    for way, message in seen:
        assert set(message) in ROUTING_SHAPES[way], (way, message)
        for field in ("publicKey", "proof", "blob"):
            if field in message:
                data = base64.b64decode(message[field], validate=True)
                if field == "blob":
                    blobs[BLOB_KINDS[data[0]]] += 1  # every blob is a sealed frame or a pairing message
                for what, secret in secrets.items():
                    assert secret.encode() not in data, f"the relay saw {what} inside a {field}"
        assert message.get("id") not in {"q1", alice_id, bob_id}  # routing ids are the relay's own
        if "from" in message and base64.b64decode(message["blob"])[0] == SEALED:
            senders[message["from"]] += 1
    for what, secret in secrets.items():
        assert secret not in raw, f"the relay saw {what}"
    # Not vacuous: the relay carried the whole exchange, sealed, both ways, and the pairing.
    assert senders[world.a.address] >= 3 and senders[world.b.address] >= 3, senders
    assert blobs["pair"] == 4 and blobs["sealed"] >= 12, blobs  # each counted in and out
    assert {m.get("address") for _, m in seen if m.get("type") == "welcome"} >= {
        world.a.address,
        world.b.address,
    }


# --- 4, 5. frames sent again as machine A -------------------------------------------------------------------


def header(frame: bytes) -> tuple[int, int]:
    """(epoch, counter) of a sealed frame."""
    _, epoch, _, counter = HEADER.unpack_from(frame)
    return epoch, counter


def fresh_frames(world: World, count: int) -> list[bytes]:
    """Sealed frames A -> B that B never saw, with counters far beyond A's own: made with A's keys on a copy
    of A's sealing state, so A's real session is untouched (they only ever reach B tampered)."""
    copy = world.tmp / "a-send-copy.json"
    shutil.copyfile(pairing.seal_paths(world.a.home, world.b.address)[0], copy)
    peer = pairing.peers(world.a.home)[world.b.machine_id]
    session = SendSession(copy, pairing.identity(world.a.home), peer.public_key, bond=peer.bond)
    session.next = session.reserved = session.reserved + 1_000_000
    body = json.dumps({"k": "req", "id": "forged", "ch": "status", "teamId": TEAM_ID, "noticeIds": []})
    return [session.seal(body.encode()) for _ in range(count)]


def recount(frame: bytes, counter: int) -> bytes:
    kind, epoch, ephemeral, _ = HEADER.unpack_from(frame)
    return HEADER.pack(kind, epoch, ephemeral, counter) + frame[HEADER_BYTES:]


def flip(frame: bytes, at: int) -> bytes:
    return frame[:at] + bytes([frame[at] ^ 0x01]) + frame[at + 1 :]


def send_as(world: World, sender: Machine, to: Machine, blobs: list[bytes], refusals: int) -> list[object]:
    """Connect to the relay as `sender` (proving its address with its key) and send `blobs` to `to`; wait
    until `to`'s daemon logged `refusals` refusals in all, and return whatever came back meanwhile. The
    sender's daemon must be down: the relay keeps only the newest connection of an address."""
    identity: Identity = pairing.identity(sender.home)

    async def run() -> list[object]:
        back: list[object] = []
        async with connect_relay(world.url, identity) as client:
            for blob in blobs:
                await client.send(to.address, blob)
            with trio.move_on_after(WAIT):
                while len(to.refusals()) < refusals:
                    with trio.move_on_after(0.05):
                        back.append(await client.receive())
            with trio.move_on_after(0.5):  # anything the destination might still answer
                back.append(await client.receive())
        return back

    back = trio.run(run)
    assert len(to.refusals()) == refusals, to.daemon.text()
    return back


def test_replayed_reordered_truncated_and_tampered_frames_change_nothing(world: World) -> None:
    ask_and_reach_b(world, "q1")
    frames = world.sealed_from(world.a)
    assert len(frames) >= 2  # bob's introduction and the question, at least
    (epoch, first), (_, last) = header(frames[0]), header(frames[-1])
    assert first < last
    fresh = fresh_frames(world, 2)
    far = header(fresh[1])[1] + 10
    assert world.a.daemon.stop() == 0  # SIGTERM: A stops cleanly and leaves the relay to the injector
    b_before = settled(lambda: files(world.b.home), "B's files after the question", 1.0)
    # Each refusal differs from the one before, so B logs each (it logs a run of one reason once).
    injected = [
        (frames[-1], "replay", f"counter {last} of epoch {epoch} was already accepted"),  # exact replay
        (flip(fresh[0], -1), "forged", "does not open"),  # one flipped byte in the box
        (frames[0], "replay", f"counter {first} of epoch {epoch} was already accepted"),  # older after newer
        (fresh[1][:-7], "forged", "does not open"),  # truncated box
        (frames[-1][:HEADER_BYTES], "malformed", "at least"),  # truncated to its header
        (recount(frames[-1], far), "forged", "does not open"),  # the header's counter tampered
        (frames[-1][:5], "malformed", "at least"),  # truncated inside the header
    ]
    back = send_as(world, world.a, world.b, [blob for blob, _, _ in injected], len(injected))
    assert back == []  # B answered none of them (an `offline` notice would mean B never got them)
    for (machine, reason, detail), (_, want, phrase) in zip(world.b.refusals(), injected, strict=True):
        assert (machine, reason) == (world.a.machine_id, want) and phrase in detail, (reason, detail)
    assert files(world.b.home) == b_before  # no desk entry, no replay mark, no route: nothing changed

    # Both directions still work after the refusals: bob answers from B, alice's next question reaches B.
    world.start_daemon(world.a)
    assert ok(world.bob("reply", "q1", ANSWER))["state"] == "answered"
    assert ok(world.alice("wait", "q1", "--seconds", "10"))["exchange"]["answer"]["text"] == ANSWER
    ask_and_reach_b(world, "q2")
    assert world.a.refusals() == [] and len(world.b.refusals()) == len(injected)


def test_a_restarted_daemon_refuses_frames_from_before_its_restart(world: World) -> None:
    ask_and_reach_b(world, "q1")
    frames = world.sealed_from(world.a)
    counters = [header(f)[1] for f in frames]
    assert world.b.daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    world.start_daemon(world.b)
    assert world.a.daemon.stop() == 0
    eventually(on_desk(world.b, notice("q1", "question"), "queued"), "B's desk restored")
    b_before = settled(lambda: files(world.b.home), "B's files after its restart", 1.0)
    # A malformed frame after each replay, so B logs every replay (it logs a run of one reason once).
    noise = b"\x01" + bytes(10)
    injected = [blob for frame in frames for blob in (frame, noise)]
    send_as(world, world.a, world.b, injected, len(injected))
    refused = world.b.refusals()
    assert [reason for _, reason, _ in refused] == ["replay", "malformed"] * len(frames)
    for (_, _, detail), counter in zip(refused[::2], counters, strict=True):
        assert f"counter {counter} of epoch" in detail, detail
    assert files(world.b.home) == b_before

    # A fresh exchange after the restarts: a new question reaches B, bob's answer comes back.
    world.start_daemon(world.a)
    ask_and_reach_b(world, "q2")
    assert ok(world.bob("reply", "q2", ANSWER))["state"] == "answered"
    woke = ok(world.alice("wait", "q2", "--seconds", "10"))
    assert woke["reason"] == "answered" and woke["exchange"]["answer"]["text"] == ANSWER
    assert submits(world.b.home)[notice("q1", "question")] == 1
    assert world.a.refusals() == []


# --- 6. the relay killed mid-exchange -----------------------------------------------------------------------


def kill_relay_under_a_question(world: World, question: str) -> None:
    """Alice asks `question` and the relay dies while its notice is handed to B: B is stopped (SIGSTOP), so
    the relay forwards the frame into B's socket but no answer can come back before it is killed. A cannot
    know whether B got it; B resumes (SIGCONT) and finds its relay gone."""
    os.kill(world.b.daemon.pid, signal.SIGSTOP)
    try:
        handed = len(world.sealed_from(world.a))
        ok(world.alice("ask", "bob", f"{BODY} ({question})", "--id", question))
        eventually(lambda: len(world.sealed_from(world.a)) > handed, "the relay to forward the notice")
        assert world.relay.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        os.kill(world.b.daemon.pid, signal.SIGCONT)


def restart_relay(world: World) -> None:
    """The relay again on the same port; both daemons find it on their own (their backoff is up to 5 s)."""
    welcomes = world.welcomes(world.a.address), world.welcomes(world.b.address)
    world.start_relay()
    world.wait_relay()
    world.wait_welcomed(world.a, welcomes[0])
    world.wait_welcomed(world.b, welcomes[1])


def test_a_relay_killed_mid_exchange_loses_and_duplicates_nothing(world: World) -> None:
    ask_and_reach_b(world, "q1")
    kill_relay_under_a_question(world, "q2")
    # While the relay is down: asking works (the ledger is A's), bob's answer cannot reach the owner: it is
    # refused as `offline`, certainly not recorded.
    ok(world.alice("ask", "bob", f"{BODY} (q3)", "--id", "q3"))
    status, refused = world.bob("reply", "q1", ANSWER)
    assert (status, refused["error"]) == (1, "offline"), refused
    assert world.exchange("q1")["state"] == "open"
    restart_relay(world)
    for question in ("q2", "q3"):
        eventually(on_desk(world.b, notice(question, "question"), "queued"), question)
        reported_by_b(world, question)

    # Now the relay dies under bob's reply: forwarded into A's socket (A stopped), no answer back. Bob's
    # CLI cannot know whether it was recorded: `uncertain` (exit 4), retry with the same reply.
    # Nothing else in flight between A and B (a late report from B, or B's answer to a late request from A,
    # would be the next frame counted below), so the relay dies under bob's reply and nothing else.
    settled(lambda: (len(world.sealed_from(world.a)), len(world.sealed_from(world.b))), "the frames", 2.0)
    os.kill(world.a.daemon.pid, signal.SIGSTOP)
    try:
        handed = len(world.sealed_from(world.b))
        env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_MEMBER_KEY", "HARNESS_HOME"}}
        machine = ("--machine", world.a.machine_id, "--team", TEAM_ID, "--key", world.keys["bob"])
        argv = [*HARNESS, "team", "--home", str(world.b.home), *machine, "reply", "q1", ANSWER, "--json"]
        reply = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            eventually(lambda: len(world.sealed_from(world.b)) > handed, "the relay to forward the reply")
            assert world.relay.stop(signal.SIGKILL) == -signal.SIGKILL
            out, err = reply.communicate(timeout=30)
        finally:
            if reply.poll() is None:
                reply.kill()
            reply.communicate()
    finally:
        os.kill(world.a.daemon.pid, signal.SIGCONT)
    assert (reply.returncode, json.loads(out)["error"]) == (4, "uncertain"), (out, err)
    restart_relay(world)

    # Bob retries (the same reply is the same record, whether or not an earlier try got through).
    answered = {}
    for question in ("q1", "q2", "q3"):
        reported_by_b(world, question)
        answered[question] = ok(world.bob("reply", question, ANSWER))["answer"]
        assert answered[question]["text"] == ANSWER
    assert ok(world.bob("reply", "q2", ANSWER))["answer"] == answered["q2"]

    # Exactly once everywhere: one notice per question on B, one answer and one continuation per question.
    questions = submits(world.b.home)
    assert [questions[notice(q, "question")] for q in ("q1", "q2", "q3")] == [1, 1, 1], questions
    assert sum(questions.values()) == 4, questions  # and bob's introduction
    for question in ("q1", "q2", "q3"):
        eventually(on_owners_desk(world, question, "answer", "queued"), question)
    team = ok(world.owner("get"))
    assert [(e["id"], e["state"], e["answer"]) for e in team["exchanges"]] == [
        (q, "answered", answered[q]) for q in ("q1", "q2", "q3")
    ]
    answers = ok(world.alice("inbox"))["answers"]
    assert sorted(a["id"] for a in answers) == ["q1", "q2", "q3"]
    assert world.a.refusals() == world.b.refusals() == []
    continuations = stopped_submits(world.a)
    assert [continuations[notice(q, "answer")] for q in ("q1", "q2", "q3")] == [1, 1, 1], continuations


def test_a_notice_waiting_behind_an_uncertain_one_shows_offline(world: World) -> None:
    ask_and_reach_b(world, "q1")
    kill_relay_under_a_question(world, "q2")
    ok(world.alice("ask", "bob", f"{BODY} (q3)", "--id", "q3"))
    # q3 waits behind q2 (which may have reached B: its view stays B's to give), certainly not handed over.
    # The owner's own first view is `queued/unobserved`; the outbox's word on q3 follows within seconds.
    eventually(lambda: world.exchange("q3")["delivery"]["reason"] == "offline", "q3 shown offline", 10.0)
