# The daemon in this trio loop on a real loopback WebSocket, driven by the real (blocking) client from worker
# threads: the path an agent's CLI call takes, minus process start-up.
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from harness.core.commands import Ask, TeamCommand
from harness.core.limits import Limits
from harness.core.outcome import Accepted, Outcome
from harness.core.records import Ledger, QuestionState
from harness.core.team import step as team_step
from harness.io import home as homes
from harness.io import ledger_runner
from harness.io.client import Client, RemoteError
from harness.io.daemon import Daemon
from harness.io.journal import CheckpointPolicy
from harness.io.journal_files import ledger_store_dir
from harness.io.rpc import MAX_FRAME_BYTES, PROTOCOL

SMALL = Limits(
    teams=3,
    memberships=4,
    exchanges=8,
    pending_per_sender=3,
    asks_per_minute=6,
    parent_chain=2,
    question_chars=100,
    context_chars=50,
    answer_chars=100,
    evidence_refs=2,
    evidence_ref_chars=20,
    name_chars=20,
    id_chars=64,
    ttl_min_ms=50,
    ttl_max_ms=60_000,
    ttl_default_ms=30_000,
)

PEOPLE = ("alice", "bob", "carol")
# How long a reply, a snapshot or a condition may take before the test fails instead of hanging: generous,
# because the suite runs on a loaded two-core machine; a request that waits (`seconds`) gets that on top.
DEADLINE = 60.0


def member(name: str, machine: str = "machine-1", **extra: str) -> dict[str, str]:
    return {
        "machineId": machine,
        "agentId": f"agent-{name}",
        "name": name,
        "role": f"{name}'s role",
        **extra,
    }


# Every client a test opens; `running` closes them when its daemon stops.
_OPEN: list[Client] = []


@asynccontextmanager
async def running(
    home: Path, limits: Limits = SMALL, faults: int = 0, **options: Any
) -> AsyncIterator[Daemon]:
    """A daemon on `home` for the block; it must end with exactly `faults` internal errors."""
    options.setdefault("log", lambda line: None)
    daemon = Daemon(home, limits=limits, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            yield daemon
        finally:
            while _OPEN:
                _OPEN.pop().close()
            daemon.stop()
    assert daemon.internal_errors == faults


def connect(path: Path) -> Client:
    client = Client(path)
    client.connect()
    _OPEN.append(client)
    return client


class Api:
    """One client connection, as the owner (token) or as a member (key)."""

    def __init__(self, client: Client, token: str | None, key: str | None) -> None:
        self.client = client
        self.token = token
        self.key = key

    @classmethod
    async def open(cls, daemon: Daemon, key: str | None = None) -> Api:
        client = await trio.to_thread.run_sync(connect, daemon.socket_path)
        return cls(client, None if key else homes.read_owner_token(daemon.home), key)

    async def __call__(self, action: str, team: str | None = None, **fields: Any) -> Any:
        call = partial(
            self.client.request,
            action,
            team_id=team,
            member_key=self.key,
            owner_token=self.token,
            fields=fields,
            timeout=DEADLINE + float(fields.get("seconds", 0)),
        )
        return await trio.to_thread.run_sync(call)

    async def error(self, action: str, team: str | None = None, **fields: Any) -> RemoteError:
        with pytest.raises(RemoteError) as caught:
            await self(action, team, **fields)
        return caught.value


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; a daemon that never gets there fails the test, naming `what`."""
    with trio.move_on_after(DEADLINE):
        while not condition():
            await trio.sleep(0.01)
        return
    pytest.fail(f"not within {DEADLINE:g} s: {what}")


def first(snapshots: Iterable[Any], holds: Callable[[Any], bool], what: str) -> Any:
    """The first snapshot for which `holds` is true, within DEADLINE (call it in a worker thread)."""
    deadline = time.monotonic() + DEADLINE
    for team in snapshots:
        if holds(team):
            return team
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no snapshot within {DEADLINE:g} s where {what}")


def subscribe(client: Client, team_id: str, token: str | None) -> Iterator[Any]:
    """Snapshots of `team_id`; the stream ends (and `first` fails) after DEADLINE without a change."""
    return client.subscribe(team_id, token, timeout=DEADLINE)


async def team_with_keys(
    owner: Api, team_id: str = "t1", people: tuple[str, ...] = PEOPLE, machine: str = "machine-1"
) -> dict[str, str]:
    await owner("create", id=team_id, name="Team", members=[member(name, machine) for name in people])
    return {name: (await owner("key", team_id, memberId=name))["memberKey"] for name in people}


async def test_question_reply_and_continuation(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        caps = await owner("capabilities")
        assert caps["protocol"] == PROTOCOL and "wait" in caps["actions"]
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        asked = await alice(
            "ask", "t1", id="q1", to="bob", text="Which endpoint?", context="phone list", ttlMs=5000
        )
        assert (asked["id"], asked["state"], asked["answer"]) == ("q1", "open", None)
        box = await bob("inbox", "t1")
        assert [q["id"] for q in box["questions"]] == ["q1"] and box["answers"] == []
        assert (await alice("inbox", "t1"))["questions"] == []
        answered = await bob("reply", "t1", questionId="q1", text="GET /state", evidence=["a.py:1"])
        assert answered["state"] == "answered"
        assert answered["answer"]["text"] == "GET /state" and answered["answer"]["late"] is False
        woke = await alice("wait", "t1", questionId="q1", seconds=5)
        assert woke["reason"] == "answered" and woke["exchange"]["answer"]["evidence"] == ["a.py:1"]
        assert [a["id"] for a in (await alice("inbox", "t1"))["answers"]] == ["q1"]
        assert (await alice("status", "t1", questionId="q1"))["state"] == "answered"
        # Snapshots never carry member keys, whoever reads them.
        for text in (json.dumps(await owner("get", "t1")), json.dumps(await bob("members", "t1"))):
            assert not any(key in text for key in keys.values())


async def test_delivery_views_follow_the_desk_through_subscribe(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, machine=daemon.machine_id)  # this machine's desk, no terminals
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="hello?")
        watcher = await trio.to_thread.run_sync(connect, daemon.socket_path)
        snapshots = subscribe(watcher, "t1", owner.token)

        def offline(team: dict[str, Any]) -> bool:
            exchange = team["exchanges"][0] if team["exchanges"] else None
            intros = [(m["introduction"] or {}).get("reason") for m in team["members"]]
            reported = exchange and exchange["delivery"]["reason"] != "unobserved"  # the desk's word
            return bool(reported) and intros == ["offline"] * 3

        reported = "the desk reported q1, members offline"
        team = await trio.to_thread.run_sync(first, snapshots, offline, reported)
        # Queued behind bob's introduction, which waits for a terminal this machine does not have.
        assert team["exchanges"][0]["delivery"]["state"] == "queued"
        assert team["exchanges"][0]["delivery"]["reason"] == "pressure"
        await owner("pause", "t1")
        held = await trio.to_thread.run_sync(
            first, snapshots, lambda t: t["exchanges"][0]["delivery"]["state"] == "held", "q1 is held"
        )
        assert held["state"] == "paused"
        # Pause holds new sends, it does not refuse them: the ask is recorded and its notice held.
        assert (await alice("ask", "t1", id="q2", to="bob", text="more?"))["state"] == "open"

        def q2_held(team: dict[str, Any]) -> bool:
            last = team["exchanges"][-1]
            return last["id"] == "q2" and last["delivery"] is not None and last["delivery"]["state"] == "held"

        await trio.to_thread.run_sync(first, snapshots, q2_held, "q2 is held")
        await owner("archive", "t1")
        archived = await trio.to_thread.run_sync(
            first, snapshots, lambda t: t["exchanges"][0]["delivery"]["state"] == "withdrawn", "q1 withdrawn"
        )
        assert archived["state"] == "archived" and archived["exchanges"][0]["state"] == "cancelled"
        assert archived["exchanges"][0]["delivery"]["reason"] == "archived"
        assert (await alice.error("ask", "t1", to="bob", text="more?")).code == "team_archived"
        # A member on a machine this daemon has no route to waits visibly, as `unpaired`.
        await owner("create", id="t2", name="Remote", members=[member("zed"), member("amy")])
        zed = await owner("key", "t2", memberId="zed")
        await Api(owner.client, None, zed["memberKey"])("ask", "t2", id="r1", to="amy", text="there?")

        def unpaired() -> bool:
            delivery = daemon.durable.teams["t2"].exchanges["r1"].delivery
            return delivery is not None and (delivery.state, delivery.reason) == ("queued", "unpaired")

        await until(unpaired, "r1's delivery is queued as unpaired")


async def test_authority(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        stranger = Api(owner.client, None, None)
        assert (await stranger.error("list")).code == "unauthorized"
        forger = Api(owner.client, "0" * 64, None)
        assert (await forger.error("get", "t1")).code == "unauthorized"
        alice = await Api.open(daemon, keys["alice"])
        for action in ("get", "list", "pause", "key", "subscribe"):
            fields = {"memberId": "bob"} if action == "key" else {}
            assert (
                await alice.error(action, None if action == "list" else "t1", **fields)
            ).code == "unauthorized"
        assert (
            await alice.error("ask", "t1", to="bob", text="x", **{"from": "carol"})
        ).code == "unauthorized"
        await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="private?")
        carol = await Api.open(daemon, keys["carol"])
        assert (await carol.error("status", "t1", questionId="q1")).code == "not_found"
        assert (await carol("status", "t1"))["exchanges"] == []
        # The owner acts for members, attributed to the user.
        by_owner = await owner("ask", "t1", id="q2", to="carol", text="for bob", **{"from": "bob"})
        assert by_owner["byUser"] is True
        assert (await owner("reply", "t1", questionId="q2", text="ok", memberId=by_owner["to"]))["answer"][
            "author"
        ] == "user"
        removed = await owner("remove", "t1", memberId=by_owner["from"])
        assert removed["state"] == "removed"
        bob = Api(owner.client, None, keys["bob"])
        assert (await bob.error("inbox", "t1")).code == "unauthorized"


async def test_operation_ids_conflicts_wrong_member_and_late_answers(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob, carol = [await Api.open(daemon, keys[name]) for name in PEOPLE]
        first = await alice("ask", "t1", id="q1", to="bob", text="same?")
        again = await alice("ask", "t1", id="q1", to="bob", text="same?")
        # The same record; only the delivery view may have moved on. From the moment the ask is accepted it
        # is `queued` (issue 16, item 9), never blank.
        assert first["delivery"]["state"] == "queued" and first["delivery"]["reason"] == "unobserved"
        assert first == {**again, "delivery": first["delivery"]}
        conflict = await alice.error("ask", "t1", id="q1", to="bob", text="different")
        assert (conflict.code, conflict.operation_id) == ("conflict", "q1")
        assert (await alice.error("reply", "t1", questionId="q1", text="me")).code == "wrong_member"
        assert (await carol.error("reply", "t1", questionId="q1", text="me")).code == "not_found"  # not hers
        await bob("reply", "t1", questionId="q1", text="yes")
        assert (await bob("reply", "t1", questionId="q1", text="yes"))["answer"]["text"] == "yes"
        assert (await bob.error("reply", "t1", questionId="q1", text="no")).code == "conflict"
        # A question that expires (the timer fires a Tick), then a late answer is kept but marked.
        await alice("ask", "t1", id="q2", to="bob", text="quick?", ttlMs=60)
        ended = await alice("wait", "t1", questionId="q2", seconds=10)
        assert ended["reason"] == "expired"
        late = await bob("reply", "t1", questionId="q2", text="sorry")
        assert (late["state"], late["answer"]["late"]) == ("expired", True)
        await alice("ask", "t1", id="q3", to="bob", text="cancel me")
        assert (await alice("cancel", "t1", questionId="q3"))["state"] == "cancelled"
        assert (await bob("reply", "t1", questionId="q3", text="late"))["answer"]["late"] is True
        # Create and add are idempotent by id too.
        assert (await owner("create", id="t1", name="Team", members=[member(n) for n in PEOPLE]))[
            "id"
        ] == "t1"
        assert (await owner.error("create", id="t1", name="Other")).code == "conflict"


async def test_every_bound_is_named(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])

        async def bound(api: Api, action: str, team: str | None = "t1", **fields: Any) -> str | None:
            error = await api.error(action, team, **fields)
            assert error.code == "bound_exceeded", error
            assert error.bound is not None and error.bound in error.detail
            return error.bound

        assert await bound(alice, "ask", to="bob", text="x" * 101) == "question_chars"
        assert await bound(alice, "ask", to="bob", text="x", context="c" * 51) == "context_chars"
        assert await bound(alice, "ask", to="bob", text="x", ttlMs=10) == "ttl"
        assert await bound(alice, "ask", id="i" * 65, to="bob", text="x") == "id_chars"
        assert await bound(owner, "create", None, id="t2", name="n" * 21) == "name_chars"
        assert await bound(alice, "wait", questionId="q", seconds=1e6) == "wait_seconds"
        await alice("ask", "t1", id="p1", to="bob", text="root")
        await bob("ask", "t1", id="p2", to="alice", text="child", parentId="p1")
        assert await bound(alice, "ask", to="bob", text="grandchild", parentId="p2") == "parent_chain"
        assert await bound(bob, "reply", questionId="p1", text="a" * 101) == "answer_chars"
        assert await bound(bob, "reply", questionId="p1", text="a", evidence=["e"] * 3) == "evidence_refs"
        assert (
            await bound(bob, "reply", questionId="p1", text="a", evidence=["e" * 21]) == "evidence_ref_chars"
        )
        await alice("ask", "t1", id="p3", to="bob", text="two")
        await alice("ask", "t1", id="p4", to="bob", text="three")
        assert await bound(alice, "ask", to="bob", text="four") == "pending_per_sender"
        await owner("add", "t1", **member("dave"))
        assert await bound(owner, "add", "t1", **member("erin")) == "memberships"
        await owner("create", id="t2", name="Two")
        await owner("create", id="t3", name="Three")
        assert await bound(owner, "create", None, id="t4", name="Four") == "teams"
        carol = await Api.open(daemon, keys["carol"])
        await carol("ask", "t1", id="p5", to="bob", text="five")
        await carol("ask", "t1", id="p6", to="bob", text="six")
        assert (await carol.error("ask", "t1", to="alice", text="seven")).code == "rate_limited"


async def test_two_members_waiting_on_each_other_both_wake(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="qa", to="bob", text="a to b")
        results: dict[str, Any] = {}

        async def alice_waits() -> None:
            results["alice"] = await alice("wait", "t1", questionId="qa", seconds=20)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(alice_waits)
            await bob("ask", "t1", id="qb", to="alice", text="b to a")
            results["bob"] = await bob("wait", "t1", questionId="qb", seconds=20)
        assert results["alice"]["reason"] == "incoming" and results["alice"]["incoming"][0]["id"] == "qb"
        assert results["bob"]["reason"] == "incoming" and results["bob"]["incoming"][0]["id"] == "qa"
        timeout = await owner("wait", "t1", questionId="qa", seconds=0.05)
        assert timeout["reason"] == "timeout"  # the asker already saw qb (its own wait showed it): no news
        await alice("reply", "t1", questionId="qb", text="done")
        timed = await alice("wait", "t1", questionId="qa", seconds=0.05)
        assert (
            timed["reason"] == "timeout" and timed["exchange"]["state"] == "open"
        )  # a timeout cancels nothing


async def test_bad_frames_get_bad_request_and_the_connection_lives(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        raw = await trio.to_thread.run_sync(connect, daemon.socket_path)

        def exchange(text: str) -> dict[str, Any]:
            raw.send_raw(text)
            return raw.receive_raw(DEADLINE)

        cases = [
            "not json",
            "[1, 2]",
            json.dumps({"type": "team", "action": "list"}),
            json.dumps({"type": "nope", "requestId": "r1", "action": "list"}),
            json.dumps({"type": "team", "requestId": "r2", "action": "explode"}),
            json.dumps({"type": "team", "requestId": "r3", "action": "get"}),
            json.dumps({"type": "team", "requestId": "r4", "action": "list", "surprise": 1}),
            json.dumps(
                {
                    "type": "team",
                    "requestId": "r5",
                    "action": "ask",
                    "teamId": "t",
                    "text": 5,
                    "to": "x",
                    "memberKey": "k",
                }
            ),
            '{"type": "team", "requestId": "r6", "action": "list", "x": NaN}',
            '{"type": "team", "requestId": "r7", "action": "ask", "teamId": "t", "memberKey": "k", '
            '"to": "b", '
            '"text": "\\ud800"}',
            "[" * 100_000,
            json.dumps({"type": "team", "requestId": "r8", "action": "list", "pad": "x" * MAX_FRAME_BYTES}),
        ]
        for case in cases:
            reply = await trio.to_thread.run_sync(exchange, case)
            assert reply["type"] == "team_result" and reply["error"] == "bad_request", (case[:80], reply)
        caps = await trio.to_thread.run_sync(
            exchange, json.dumps({"type": "team", "requestId": "ok", "action": "capabilities"})
        )
        assert caps["result"]["protocol"] == PROTOCOL
        # Binary frames are refused the same way.
        raw._sock.sendall(raw._ws.send(__import__("wsproto").events.BytesMessage(data=b"\x00\x01")))  # type: ignore[union-attr]
        assert (await trio.to_thread.run_sync(raw.receive_raw, DEADLINE))["error"] == "bad_request"


async def test_a_client_that_vanishes_mid_request_never_cancels_the_work(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        watcher = await trio.to_thread.run_sync(connect, daemon.socket_path)
        snapshots = subscribe(watcher, "t1", owner.token)
        current = await trio.to_thread.run_sync(first, snapshots, lambda t: True, "the current team")
        vanishing = await trio.to_thread.run_sync(connect, daemon.socket_path)
        frame = {
            "type": "team",
            "requestId": "r",
            "action": "ask",
            "teamId": "t1",
            "memberKey": keys["alice"],
            "id": "gone",
            "to": "bob",
            "text": "are you there?",
        }
        vanishing.send_raw(json.dumps(frame))
        assert vanishing._sock is not None
        vanishing._sock.close()  # no close handshake: the peer just disappears
        recorded = "the ask is recorded"
        team = await trio.to_thread.run_sync(first, snapshots, lambda t: t["exchanges"], recorded)
        assert team["revision"] > current["revision"] and team["exchanges"][0]["id"] == "gone"
        alice = await Api.open(daemon, keys["alice"])
        assert (await alice("ask", "t1", id="gone", to="bob", text="are you there?"))["id"] == "gone"
        assert len((await owner("get", "t1"))["exchanges"]) == 1


async def test_restart_replays_journal_and_checkpoints_and_rearms_timers(tmp_path: Path) -> None:
    # Both daemons' clocks stand still until the test moves them: q2's deadline cannot pass before the
    # restarted daemon's state has been compared, however slow the machine.
    now = [1_000_000]
    clock = lambda: now[0]  # noqa: E731
    async with running(tmp_path, checkpoint_policy=CheckpointPolicy(every=3), clock=clock) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="one")
        await bob("reply", "t1", questionId="q1", text="answer")
        await alice("ask", "t1", id="q2", to="bob", text="two", ttlMs=400)
        await owner("create", id="t2", name="Two", members=[member("zed")])
    before = daemon.durable
    q2 = before.teams["t1"].exchanges["q2"]
    assert q2.state == "open"
    assert any(path.name.startswith("checkpoint-") for path in ledger_store_dir(tmp_path, "t1").iterdir())
    async with running(tmp_path, clock=clock) as daemon:
        assert daemon.durable == before
        alice = await Api.open(daemon, keys["alice"])  # keys survive the restart
        now[0] = q2.deadline_at + 1
        ended = await alice("wait", "t1", questionId="q2", seconds=30)
        assert ended["reason"] == "expired"  # the deadline timer was armed again from the recovered state
        recovered = daemon.durable.teams["t1"]
        assert recovered.exchanges["q1"] == before.teams["t1"].exchanges["q1"]
        assert recovered.members == before.teams["t1"].members


async def test_concurrent_asks_share_fsyncs_and_replay_in_order(tmp_path: Path) -> None:
    limits = Limits(pending_per_sender=100, asks_per_minute=1000, exchanges=500)
    async with running(tmp_path, limits=limits) as daemon:
        owner = await Api.open(daemon)
        people = tuple(f"p{i}" for i in range(8))
        keys = await team_with_keys(owner, people=people)
        apis = [await Api.open(daemon, keys[name]) for name in people]

        async def burst(index: int, api: Api) -> None:
            for n in range(10):
                await api("ask", "t1", id=f"q{index}-{n}", to=people[(index + 1) % 8], text=f"question {n}")

        async with trio.open_nursery() as nursery:
            for index, api in enumerate(apis):
                nursery.start_soon(burst, index, api)
    before = daemon.durable.teams["t1"]  # after a clean stop: every report recorded
    assert len(before.exchanges) == 80
    async with running(tmp_path, limits=limits) as daemon:
        assert daemon.durable.teams["t1"] == before


async def test_a_second_daemon_on_the_same_home_is_refused(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        info = homes.read_daemon_info(tmp_path)
        assert info is not None and info["socket"] == str(daemon.socket_path) and info["protocol"] == PROTOCOL
        assert daemon.socket_path == tmp_path / homes.SOCKET_FILE
        assert oct(tmp_path.stat().st_mode & 0o777) == oct(0o700)
        assert (tmp_path / homes.TOKEN_FILE).stat().st_mode & 0o777 == 0o600
        assert daemon.socket_path.stat().st_mode & 0o777 == 0o600
        with pytest.raises(homes.DaemonRunning, match="already running"):
            await Daemon(tmp_path, log=lambda line: None).run()
        assert daemon.socket_path.exists()  # the refused second daemon left the running one's socket alone
    assert homes.read_daemon_info(tmp_path) is None  # a clean stop removes daemon.json
    assert not daemon.socket_path.exists()  # and its socket


async def test_a_corrupt_team_is_reported_and_the_others_keep_working(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="good", name="Good")
        await owner("create", id="bad", name="Bad")
    segment = next(ledger_store_dir(tmp_path, "bad").glob("journal-*.jsonl"))
    damaged = segment.read_bytes().replace(b'"Bad"', b'"Bax"')
    segment.write_bytes(damaged + b"\n")
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        listed = await owner("list")
        assert [t["id"] for t in listed["teams"]] == ["good"]
        assert [(u["id"], u["error"]) for u in listed["unavailable"]] == [("bad", "corrupt_state")]
        assert (await owner.error("get", "bad")).code == "corrupt_state"
        assert (await owner.error("create", id="bad", name="Bad")).code == "corrupt_state"
        assert (await owner("pause", "good"))["state"] == "paused"
    assert segment.read_bytes() == damaged + b"\n"  # every byte kept for repair


async def test_a_broken_invariant_stops_that_team_and_the_others_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: "the daemon, with invariants on, stops that team with `corrupt_state`". tests/conftest.py
    turns the checks on (io/daemon.py CHECK_ENV); a reducer that answers one ask with a broken state (an
    exchange answered without an answer, T3) stands in for a core bug. That step is never applied."""

    def faulty(ledger: Ledger, command: TeamCommand, limits: Limits) -> Outcome[Ledger]:
        outcome = team_step(ledger, command, limits)
        if isinstance(command, Ask) and command.team_id == "bad" and isinstance(outcome, Accepted):
            team = outcome.state.teams["bad"]
            broken = attrs.evolve(team.exchanges[command.id], state=QuestionState.ANSWERED)
            team = attrs.evolve(team, exchanges=team.exchanges.set(command.id, broken))
            outcome = attrs.evolve(outcome, state=Ledger(outcome.state.teams.set("bad", team)))
        return outcome

    monkeypatch.setattr(ledger_runner, "TEAM_REDUCER", attrs.evolve(ledger_runner.TEAM_REDUCER, step=faulty))
    async with running(tmp_path, faults=1) as daemon:
        owner = await Api.open(daemon)
        good, bad = await team_with_keys(owner, "good"), await team_with_keys(owner, "bad")
        asker = await Api.open(daemon, bad["alice"])
        refused = await asker.error("ask", "bad", id="q1", to="bob", text="?")
        assert refused.code == "corrupt_state"
        assert "invariant T3 broken by Ask on team 'bad'" in refused.detail
        assert (await owner.error("get", "bad")).code == "corrupt_state"
        assert (await owner.error("pause", "bad")).code == "corrupt_state"
        listed = await owner("list")
        assert [(u["id"], u["error"]) for u in listed["unavailable"]] == [("bad", "corrupt_state")]
        alice, bob = await Api.open(daemon, good["alice"]), await Api.open(daemon, good["bob"])
        await alice("ask", "good", id="q1", to="bob", text="still there?")
        await bob("reply", "good", questionId="q1", text="yes")
        assert (await alice("wait", "good", questionId="q1", seconds=30))["reason"] == "answered"
    monkeypatch.undo()
    async with running(tmp_path) as daemon:  # the broken step never reached the journal
        owner = await Api.open(daemon)
        assert (await owner("get", "bad"))["exchanges"] == []
        assert [e["state"] for e in (await owner("get", "good"))["exchanges"]] == ["answered"]


async def test_shutdown_finishes_queued_work(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="t1", name="T")
        clients = [await trio.to_thread.run_sync(connect, daemon.socket_path) for _ in range(4)]
        for index, client in enumerate(clients):
            client.send_raw(
                json.dumps(
                    {
                        "type": "team",
                        "requestId": "r",
                        "action": "add",
                        "teamId": "t1",
                        "ownerToken": owner.token,
                        **member(f"m{index}"),
                    }
                )
            )

        def stepped() -> set[str]:
            team = daemon.ledger.working.teams.get("t1")
            return set() if team is None else {m.name for m in team.members.values()}

        # At least one add has reached the ledger (stepped, maybe not yet durable) when the stop comes.
        await until(lambda: bool(stepped()), "an add reached the ledger")
        daemon.stop()
        queued = stepped()

        def answer(client: Client) -> str | None:
            try:
                reply = client.receive_raw(DEADLINE)
            except TimeoutError:
                pytest.fail(f"the stopping daemon neither answered nor closed within {DEADLINE:g} s")
            except Exception:  # the connection closed first: the outcome is the ledger's to tell
                return None
            assert "result" in reply, reply  # an answer is never an error
            return str(reply["result"]["name"])

        answered = {name for client in clients if (name := await trio.to_thread.run_sync(answer, client))}
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        names = {m["name"] for m in (await owner("get", "t1"))["members"]}
        # Everything the ledger had taken when the stop came, and every answer, is durable.
        assert queued and queued | answered <= names <= {f"m{index}" for index in range(4)}


async def test_wait_breaks_only_on_news(tmp_path: Path) -> None:
    """Seed: "Incoming questions break the wait so the agent can answer them, avoiding mutual-wait deadlocks."
    A question the waiter already read in its inbox does not break the wait; one that arrives during it does,
    and the reply names it."""
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="Which endpoint?")
        await bob("ask", "t1", id="qb", to="carol", text="Which port?")
        first = await bob("wait", "t1", questionId="qb", seconds=5)
        assert (first["reason"], first["news"]) == ("incoming", ["q1"]), "unread: it breaks the wait at once"
        again = await bob("wait", "t1", questionId="qb", seconds=0.5)
        assert (again["reason"], again["news"]) == ("timeout", []), "already shown: it no longer breaks it"
        assert [q["id"] for q in (await bob("inbox", "t1"))["questions"]] == ["q1"]
        result: dict[str, Any] = {}

        async def waiting() -> None:
            result.update(await bob("wait", "t1", questionId="qb", seconds=60))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting)
            await trio.sleep(0.3)
            assert not result, "a wait with only read questions open keeps waiting"
            await alice("ask", "t1", id="q2", to="bob", text="And the path?")
        assert (result["reason"], result["news"]) == ("incoming", ["q2"])
        assert [q["id"] for q in result["incoming"]] == ["q1", "q2"]
