# Teams across machines end to end: a real relay on 127.0.0.1 and two real daemons with separate data
# directories, paired the way `harness pair create` / `pair accept` pair them. Daemon A owns the team; its
# member bob lives on machine B, whose desk (no terminals here, so notices wait as `offline`) receives bob's
# notices sealed through the relay and reports their states back to A's ledger. Bob answers from B with the
# CLI's `--machine A`. The relay must see routing and ciphertext only.
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.cli.watch import Link, Snapshot, Subscriber
from harness.core.records import NoticeKind
from harness.io import home as homes
from harness.io import pairing
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.relay import Relay
from harness.io.remote import RemoteNode
from harness.io.remote_client import call_remote
from harness.io.team_delivery import DeliveryReport

TEAM_ID = "team0000000000000000000000000042"
TEAM_NAME = "Secret Project Name"
BODY = "Which endpoint returns daemon state? (a very private question)"
ANSWER = "GET /v1/daemon/state, see src/daemon.ts:42 (a very private answer)"
HARNESS = [sys.executable, "-m", "harness.cli.main"]
DEADLINE = 60.0  # generous: two daemons, a relay and their threads share a loaded two-core machine


def fast_node(home: Path) -> RemoteNode:
    """The daemons' remote node, reconnecting quickly (a relay configured after start is found at once)."""
    return RemoteNode(home, retry_min=0.05, retry_max=0.2, log=lambda line: None)


@attrs.define
class World:
    seen: list[str]
    a: Daemon
    b: Daemon
    relay: Relay


@asynccontextmanager
async def two_daemons(tmp_path: Path) -> AsyncIterator[World]:
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        relay = Relay(observe=lambda direction, message: seen.append(message))
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        a = Daemon(tmp_path / "a", remote=fast_node, log=lambda line: None)
        b = Daemon(tmp_path / "b", remote=fast_node, log=lambda line: None)
        async with trio.open_nursery() as daemons:
            await daemons.start(a.run)
            await daemons.start(b.run)
            await pair(a, b, url)
            try:
                yield World(seen, a, b, relay)
            finally:
                a.stop()
                b.stop()
        nursery.cancel_scope.cancel()  # the daemons are down: the relay goes too
    assert a.internal_errors == b.internal_errors == 0


async def pair(a: Daemon, b: Daemon, url: str) -> None:
    """Paired while both run, as people do: `pair create` on A names the relay, `pair accept` on B."""
    code = pairing.create_code(a.home, url)
    assert a.node is not None and b.node is not None
    await a.node.wait_connected()
    await pairing.accept_code(b.home, code.text())
    await b.node.wait_connected()


def request(
    daemon: Daemon, action: str, key: str | None = None, *, team: str = TEAM_ID, **fields: Any
) -> Any:
    """A `team` request to `daemon` as a local client (the owner unless `key` is given)."""
    token = None if key else homes.read_owner_token(daemon.home)
    team_id = None if action == "create" else team
    with Client(daemon.socket_path) as client:
        return client.request(action, team_id=team_id, member_key=key, owner_token=token, fields=fields)


def harness(home: Path, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_MEMBER_KEY", "HARNESS_HOME"}}
    done = subprocess.run(
        [*HARNESS, *args, "--home", str(home), "--json"], env=env, capture_output=True, text=True, check=False
    )
    return done.returncode, json.loads(done.stdout)


async def eventually(predicate: Callable[[], bool], seconds: float = DEADLINE) -> None:
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.02)


async def alice_on_a_and_bob_on_b(world: World) -> tuple[str, dict[str, Any]]:
    """The team on A: alice on A, bob on B. Alice's member key and bob's `key` view (key, command prefix)."""
    a, b = world.a, world.b
    members = [
        {"machineId": a.machine_id, "agentId": "agent-alice", "name": "alice"},
        {"machineId": b.machine_id, "agentId": "agent-bob", "name": "bob"},
    ]
    await trio.to_thread.run_sync(lambda: request(a, "create", id=TEAM_ID, name=TEAM_NAME, members=members))
    alice = await trio.to_thread.run_sync(lambda: request(a, "key", memberId="alice"))
    bob_view = await trio.to_thread.run_sync(lambda: request(a, "key", memberId="bob"))
    return str(alice["memberKey"]), bob_view


def desk_state(daemon: Daemon, notice_id: str) -> str | None:
    assert daemon.desk is not None
    notice = daemon.desk.desk.notices.get(notice_id)
    return None if notice is None else notice.state.value


def desk_reason(daemon: Daemon, notice_id: str) -> str | None:
    assert daemon.desk is not None
    notice = daemon.desk.desk.notices.get(notice_id)
    return None if notice is None or notice.reason is None else notice.reason.value


async def test_a_question_and_its_answer_cross_machines_sealed(tmp_path: Path) -> None:
    async with two_daemons(tmp_path) as world:
        a, b = world.a, world.b
        call = trio.to_thread.run_sync
        alice, bob_view = await alice_on_a_and_bob_on_b(world)
        bob = bob_view["memberKey"]
        # Bob's introduction, rendered on B, teaches the command that works there: through B's daemon to A,
        # with the key in a private file on B (never on a command line).
        prefix = f"harness team --machine {a.machine_id} --team {TEAM_ID} --key-file"
        assert bob_view["command"] == f"{prefix} KEY_FILE"
        intro = f"{TEAM_ID}/{bob_view['memberId']}/{NoticeKind.INTRODUCTION.value}"
        await eventually(lambda: desk_state(b, intro) == "queued")
        assert b.desk is not None
        taught = b.desk.desk.notices[intro].text
        key_file = homes.member_key_path(b.home, TEAM_ID, bob_view["memberId"])
        taught_prefix = f"harness team --home {b.home} --machine {a.machine_id} --team {TEAM_ID} --key-file"
        assert f"{taught_prefix} {key_file} members" in taught and bob not in taught
        assert homes.read_member_key(key_file) == bob and key_file.stat().st_mode & 0o077 == 0

        await call(lambda: request(a, "ask", alice, id="q1", to="bob", text=BODY))
        question = f"{TEAM_ID}/q1/{NoticeKind.QUESTION.value}"
        # B's desk holds the notice (sealed through the relay) and reports it back: queued, no terminal.
        await eventually(lambda: desk_state(b, question) == "queued")
        assert desk_state(a, question) is None

        def owner_sees(state: str) -> bool:
            delivery = a.durable.teams[TEAM_ID].exchanges["q1"].delivery
            # B's own word: neither the owner's first view (`unobserved`) nor its no-route `unpaired`.
            reported = delivery is not None and delivery.reason not in ("unpaired", "unobserved")
            return reported and delivery is not None and delivery.state == state

        await eventually(lambda: owner_sees("queued"))

        # Bob reads his inbox from B (library gateway call), and the owner tells B's desk it was read.
        inbox = await call(
            lambda: call_remote(b.home, a.machine_id, "inbox", team_id=TEAM_ID, member_key=bob, timeout=10)
        )
        assert [q["id"] for q in inbox["questions"]] == ["q1"]
        await eventually(lambda: desk_state(b, question) not in {None, "queued"})
        moot = desk_state(b, question)
        assert moot is not None
        await eventually(lambda: owner_sees(moot))

        # Hold and release fan out to B, whose desk holds a second question for bob.
        await call(lambda: request(a, "ask", alice, id="q2", to="bob", text=BODY + " (2)"))
        second = f"{TEAM_ID}/q2/{NoticeKind.QUESTION.value}"
        await eventually(lambda: desk_state(b, second) == "queued")
        await call(lambda: request(a, "pause"))
        await eventually(lambda: desk_state(b, second) == "held")
        await call(lambda: request(a, "resume"))
        await eventually(lambda: desk_state(b, second) == "queued")

        # Bob replies with the CLI on B (`--machine A`); the owner records it and alice's wait ends with it.
        def bob_cli(*args: str) -> tuple[int, Any]:
            return harness(b.home, "team", "--team", TEAM_ID, "--machine", a.machine_id, "--key", bob, *args)

        status, replied = await call(bob_cli, "reply", "q1", ANSWER)
        assert status == 0, replied
        assert replied["state"] == "answered" and replied["answer"]["text"] == ANSWER
        woke = await call(lambda: request(a, "wait", alice, questionId="q1", seconds=5))
        assert woke["reason"] == "answered" and woke["exchange"]["answer"]["text"] == ANSWER
        assert woke["exchange"]["answer"]["author"] == bob_view["memberId"]
        # A member on B never gets owner authority: owner-only actions are refused through the relay.
        status, refused = await call(bob_cli, "get")
        assert (status, refused["error"]) == (1, "unauthorized")
        elsewhere = ("team", "--team", TEAM_ID, "--machine", "not-paired", "--key", bob, "inbox")
        status, unpaired = await call(harness, b.home, *elsewhere)
        assert (status, unpaired["error"]) == (1, "unpaired")

    everything = "\n".join(world.seen)
    assert len(world.seen) > 10
    for secret in (BODY, ANSWER, alice, bob, TEAM_NAME, TEAM_ID, "memberKey", a.machine_id, b.machine_id):
        assert secret not in everything


async def test_the_owner_of_a_paired_machine_may_observe_a_team_but_not_change_it(tmp_path: Path) -> None:
    async with two_daemons(tmp_path) as world:
        a, b = world.a, world.b
        call = trio.to_thread.run_sync
        members = [{"machineId": b.machine_id, "agentId": "agent-bob", "name": "bob"}]
        await call(lambda: request(a, "create", id=TEAM_ID, name=TEAM_NAME, members=members))

        def from_b(*args: str) -> tuple[int, Any]:
            return harness(b.home, "team", "--team", TEAM_ID, "--machine", a.machine_id, *args)

        status, team = await call(from_b, "get")
        assert status == 0 and team["name"] == TEAM_NAME and [m["name"] for m in team["members"]] == ["bob"]
        status, roster = await call(from_b, "members")
        assert status == 0 and [m["name"] for m in roster["members"]] == ["bob"], roster
        for change in (("pause",), ("key", "bob"), ("archive",)):
            status, refused = await call(from_b, *change)
            assert (status, refused["error"]) == (1, "unauthorized"), change
        assert a.durable.teams[TEAM_ID].state.value == "active"

        # `watch --json --machine`: the current snapshot, then each newer revision, polled through the relay.
        env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_MEMBER_KEY", "HARNESS_HOME"}}
        argv = [*HARNESS, "team", "--team", TEAM_ID, "--machine", a.machine_id, "--home", str(b.home)]
        with subprocess.Popen(
            [*argv, "watch", "--json", "--seconds", "3"], env=env, stdout=subprocess.PIPE, text=True
        ) as watcher:
            assert watcher.stdout is not None
            first = json.loads(await call(watcher.stdout.readline))
            await call(lambda: request(a, "pause"))
            second = json.loads(await call(watcher.stdout.readline))
            assert (first["state"], second["state"]) == ("active", "paused")
            assert second["revision"] > first["revision"]
            assert await call(watcher.wait) == 0  # three seconds without a change end it

        # The TUI's feed does the same, and says where it reads from.
        posted: list[object] = []
        feed = Subscriber(b.home, TEAM_ID, None, posted.append, machine=a.machine_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.to_thread.run_sync, feed.run, abandon_on_cancel=True))
            await eventually(lambda: any(isinstance(p, Snapshot) for p in posted))
            feed.stop()
        links = [p for p in posted if isinstance(p, Link)]
        assert links[-1].state == "live" and f"machine {a.machine_id} through the relay" in links[-1].detail
        assert next(p for p in posted if isinstance(p, Snapshot)).team["state"] == "paused"


def view_reason(daemon: Daemon, question_id: str) -> str | None:
    delivery = daemon.durable.teams[TEAM_ID].exchanges[question_id].delivery
    return None if delivery is None else delivery.reason


async def test_the_owner_asks_the_destination_desk_what_became_of_a_notice(tmp_path: Path) -> None:
    async with two_daemons(tmp_path) as world:
        a, b = world.a, world.b
        call = trio.to_thread.run_sync
        alice, _ = await alice_on_a_and_bob_on_b(world)
        await call(lambda: request(a, "ask", alice, id="q1", to="bob", text=BODY))
        question = f"{TEAM_ID}/q1/{NoticeKind.QUESTION.value}"
        await eventually(lambda: desk_state(b, question) == "queued")
        # B's own word on it has reached A, so the stale word below is the last A hears, not overtaken by it.
        await eventually(lambda: view_reason(a, "q1") == desk_reason(b, question))

        # The owner's view went stale; asking B's desk (through the relay) tells the truth and records it.
        await a.report(DeliveryReport(TEAM_ID, question, "queued", "offline"))
        await eventually(lambda: view_reason(a, "q1") == "offline")
        status, checked = await call(harness, a.home, "team", "--team", TEAM_ID, "delivery", "q1")
        assert status == 0, checked
        assert checked["asked"] and checked["held"] and checked["machineId"] == b.machine_id
        assert checked["delivery"]["state"] == "queued" and checked["delivery"]["reason"] != "offline"
        await eventually(lambda: view_reason(a, "q1") not in {None, "offline"})
        # No continuation exists yet: the asker's desk (A's own) holds nothing of it.
        status, none = await call(harness, a.home, "team", "--team", TEAM_ID, "delivery", "q1", "--answer")
        assert status == 0 and none["asked"] and not none["held"] and none["delivery"] is None
        # B gone: not asked, and said so (never taken for "not held").
        assert b.node is not None
        b.node.stop()
        await eventually(lambda: len(world.relay.connected()) == 1)
        status, unreachable = await call(harness, a.home, "team", "--team", TEAM_ID, "delivery", "q1")
        assert status == 0 and not unreachable["asked"] and unreachable["error"] == "offline", unreachable
        status, member = await call(
            harness, a.home, "team", "--team", TEAM_ID, "--key", alice, "delivery", "q1"
        )
        assert (status, member["error"]) == (1, "unauthorized")  # an owner's check


async def test_a_members_read_reaches_its_desk_with_the_reply_even_if_the_owners_outbox_is_lost(
    tmp_path: Path,
) -> None:
    async with two_daemons(tmp_path) as world:
        a, b = world.a, world.b
        call = trio.to_thread.run_sync
        alice, bob_view = await alice_on_a_and_bob_on_b(world)
        bob = bob_view["memberKey"]
        await call(lambda: request(a, "ask", alice, id="q1", to="bob", text=BODY))
        question = f"{TEAM_ID}/q1/{NoticeKind.QUESTION.value}"
        await eventually(lambda: desk_state(b, question) == "queued")

        # The owner answers bob's inbox and then loses what its outbox held for B (as if it stopped).
        assert a.node is not None
        sent = a.node.enqueue
        a.node.enqueue = lambda machine, body, notice=None: None  # type: ignore[method-assign]
        inbox = await call(
            lambda: call_remote(b.home, a.machine_id, "inbox", team_id=TEAM_ID, member_key=bob, timeout=10)
        )
        assert [q["id"] for q in inbox["questions"]] == ["q1"]
        # Before bob even sees the answer, B's desk knows the question was read: its notice is moot.
        assert desk_state(b, question) == "withdrawn"
        a.node.enqueue = sent  # type: ignore[method-assign]
