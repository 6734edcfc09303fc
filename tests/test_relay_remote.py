# Teams across machines through a real relay with real sealed frames, two nodes with separate data
# directories. The owner's ledger and the destination's desk are in-process fakes (the daemon is being
# rewired; see io/remote.py `attach_remote` for what it must call), everything between them is real:
# pairing, sealing, routing, the CLI gateway and its blocking client.
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio
from immutables import Map

from harness.core import delivery as d
from harness.core.codec import desk_command_to_json
from harness.core.records import NoticeKind
from harness.core.remote_grant import Grants
from harness.core.system import NoticeContent
from harness.io import pairing
from harness.io.client import RemoteError
from harness.io.relay import Relay
from harness.io.remote import (
    RESPONSE_BYTES,
    PeerDelivery,
    RemoteNode,
    RemoteRefused,
    TeamAnswer,
)
from harness.io.remote_client import call_remote
from harness.io.rpc import result_frame
from harness.io.team_delivery import DeliveryReport, Reporter
from tests.test_relay_daemons import eventually

TEAM_ID = "team0000000000000000000000000001"
TEAM_NAME = "Secret Project Name"
MEMBER_KEY = "memberkey-0123456789abcdef0123456789abcdef"
BODY = "Which endpoint returns daemon state? (a very private question)"
ANSWER = "GET /v1/daemon/state, see src/daemon.ts:42 (a very private answer)"


class FakeDesk:
    """A destination desk: records requests, reports every submit as queued/offline, reads as read."""

    def __init__(self, report: Reporter) -> None:
        self.report = report
        self.requests: list[object] = []

    async def submit(self, command: d.Submit) -> None:
        self.requests.append(command)
        await self.report(DeliveryReport(command.team_id, command.notice_id, "queued", "offline"))

    async def status(self, team_id: str, notice_ids: Sequence[str]) -> list[DeliveryReport]:
        return [DeliveryReport(team_id, n, "queued", "offline") for n in notice_ids]

    async def hold(self, command: d.Hold) -> None:
        self.requests.append(command)

    async def release(self, command: d.Release) -> None:
        self.requests.append(command)

    async def cancel(self, command: d.Withdraw | d.WithdrawMember | d.WithdrawTeam) -> None:
        self.requests.append(command)

    async def consume(self, command: d.InboxRead | d.AnswerRetrieved) -> None:
        self.requests.append(command)
        for notice_id in command.notice_ids if isinstance(command, d.InboxRead) else (command.notice_id,):
            await self.report(DeliveryReport(TEAM_ID, notice_id, "read", "inbox"))


@attrs.define
class FakeOwner:
    """The owner's `team` handler: a tiny ledger of one question, answering like the daemon would."""

    frames: list[dict[str, object]] = attrs.Factory(list)
    reports: list[DeliveryReport] = attrs.Factory(list)
    answer: str | None = None

    async def handle(self, message: str, origin: str) -> TeamAnswer:
        frame = json.loads(message)
        self.frames.append(frame)
        assert "ownerToken" not in frame
        assert frame["memberKey"] == MEMBER_KEY
        if frame["action"] == "reply":
            self.answer = str(frame["text"])
        exchange = {
            "id": "q1",
            "text": BODY,
            "state": "answered" if self.answer else "open",
            "answer": self.answer,
        }
        return TeamAnswer(result_frame(str(frame["requestId"]), exchange))

    async def record(self, report: DeliveryReport) -> None:
        self.reports.append(report)


def submit(notice_id: str, machine: str) -> d.Submit:
    kind = NoticeKind(notice_id.rsplit("/", 1)[1])
    subject = notice_id.split("/")[1]
    return d.Submit(1, TEAM_ID, notice_id, kind, subject, "m-bob", machine, "agent-bob", 10**13, BODY)


def content_of(command: d.Submit) -> NoticeContent:
    """What the owner's ledger says of the notice (the fake owner's one member and question)."""
    if command.kind is NoticeKind.INTRODUCTION:
        return NoticeContent(
            command.kind, TEAM_ID, TEAM_NAME, command.subject_id, "bob", "reviewer", member_key=MEMBER_KEY
        )
    return NoticeContent(command.kind, TEAM_ID, TEAM_NAME, command.subject_id, "alice", text=BODY)


INTRODUCTION = f"{TEAM_ID}/m-bob/introduction"


async def introduce(world: World) -> None:
    """The owner introduces bob on B: from then on, B's desk takes the team's notices to bob from A."""
    before = len(world.desk_b.requests)
    b_id = world.node_b.machine_id
    await PeerDelivery(world.node_a, b_id).submit(submit(INTRODUCTION, b_id))
    await eventually(lambda: len(world.desk_b.requests) == before + 1)


@attrs.define
class World:
    relay: Relay
    seen: list[str]
    owner: FakeOwner
    node_a: RemoteNode
    node_b: RemoteNode
    desk_b: FakeDesk
    home_a: Path
    home_b: Path
    url: str


@asynccontextmanager
async def two_machines(tmp_path: Path) -> AsyncIterator[World]:
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        relay = Relay(observe=lambda direction, message: seen.append(message))
        port = await nursery.start(relay.serve, 0)
        url = f"ws://127.0.0.1:{port}"
        home_a, home_b = tmp_path / "a", tmp_path / "b"
        owner = FakeOwner()
        node_a = RemoteNode(home_a, relay_url=url, retry_min=0.05, retry_max=0.2, log=lambda line: None)
        node_a.report_local = owner.record
        node_a.content_of = content_of
        await nursery.start(node_a.run, owner.handle)
        await node_a.wait_connected()
        await pairing.accept_code(home_b, pairing.create_code(home_a, url).text())
        node_b = RemoteNode(home_b, retry_min=0.05, retry_max=0.2, log=lambda line: None)
        desk_b = FakeDesk(node_b.route_report)
        node_b.local_delivery = desk_b
        await nursery.start(node_b.run)
        await node_b.wait_connected()
        yield World(relay, seen, owner, node_a, node_b, desk_b, home_a, home_b, url)
        nursery.cancel_scope.cancel()


def cli(world: World, machine: str, action: str, fields: dict[str, object] | None = None) -> object:
    return call_remote(
        world.home_b, machine, action, team_id=TEAM_ID, member_key=MEMBER_KEY, fields=fields, timeout=10
    )


async def test_question_reply_continuation_across_machines(tmp_path: Path) -> None:
    async with two_machines(tmp_path) as world:
        a_id, b_id = world.node_a.machine_id, world.node_b.machine_id
        # The owner's ledger owes bob (on machine B) a question notice: team_delivery through the relay.
        # B renders it itself from the notice's content (the text the owner holds never crosses).
        await introduce(world)
        await PeerDelivery(world.node_a, b_id).submit(submit(f"{TEAM_ID}/q1/question", b_id))
        await eventually(lambda: len(world.desk_b.requests) == 2)
        question = world.desk_b.requests[1]
        assert isinstance(question, d.Submit)
        assert question.text.startswith(f"[team {TEAM_NAME}] Question q1 from alice:\n> {BODY}")
        assert attrs.evolve(question, text=BODY) == submit(f"{TEAM_ID}/q1/question", b_id)
        intro = world.desk_b.requests[0]
        assert isinstance(intro, d.Submit) and MEMBER_KEY not in intro.text and "--key-file" in intro.text
        # Bob's CLI on B reads its inbox on the team owned by A (`--machine A`), which the owner turns into an
        # inbox read at bob's desk, which reports `read` back to the owner.
        inbox = await trio.to_thread.run_sync(cli, world, a_id, "inbox")
        assert inbox == {"id": "q1", "text": BODY, "state": "open", "answer": None}
        await PeerDelivery(world.node_a, b_id).consume(d.InboxRead(2, (f"{TEAM_ID}/q1/question",)))
        await eventually(lambda: any(r.state == "read" for r in world.owner.reports))
        # Bob replies from B; the owner's ledger records it and the asker's wait on A would now resume.
        result = await trio.to_thread.run_sync(
            cli, world, a_id, "reply", {"questionId": "q1", "text": ANSWER}
        )
        assert result == {"id": "q1", "text": BODY, "state": "answered", "answer": ANSWER}
        assert world.owner.answer == ANSWER
        # Hold and release reach the desk that holds the team's notices (core `route` names it).
        await PeerDelivery(world.node_a, b_id).hold(d.Hold(3, TEAM_ID))
        await PeerDelivery(world.node_a, b_id).release(d.Release(4, TEAM_ID))
        await eventually(lambda: len(world.desk_b.requests) == 5)
        kinds = [type(r) for r in world.desk_b.requests]
        assert kinds == [d.Submit, d.Submit, d.InboxRead, d.Hold, d.Release]
        assert await PeerDelivery(world.node_a, b_id).status(TEAM_ID, [f"{TEAM_ID}/q1/question"]) == [
            DeliveryReport(TEAM_ID, f"{TEAM_ID}/q1/question", "queued", "offline")
        ]
    # What the relay saw: routing and ciphertext, never a body, an answer, a key or a team's name or id.
    everything = "\n".join(world.seen)
    assert len(world.seen) > 10
    for secret in (BODY, ANSWER, MEMBER_KEY, TEAM_NAME, TEAM_ID, "memberKey", "questionId", a_id, b_id):
        assert secret not in everything
    assert world.relay.stats["frames"] >= 10


async def test_retry_reuses_the_request_id_and_is_served_once(tmp_path: Path) -> None:
    async with two_machines(tmp_path) as world:
        b_id = world.node_b.machine_id
        body = {"ch": "delivery", "command": {"type": "hold", "at": 1, "teamId": TEAM_ID}}
        await introduce(world)
        first = await world.node_a.request(b_id, body, request_id="op-1")
        again = await world.node_a.request(b_id, body, request_id="op-1")  # a lost reply, retried
        assert first == again
        assert [type(r) for r in world.desk_b.requests] == [d.Submit, d.Hold]
        # A desk refuses requests about teams whose notices did not come from that owner...
        other = {"ch": "delivery", "command": {"type": "release", "at": 1, "teamId": "someone-elses"}}
        with pytest.raises(Exception, match="not_found"):
            await world.node_a.request(b_id, other)
        # ...except the hold of a team it has not seen: a paused team's first notice follows its hold.
        paused = {"ch": "delivery", "command": {"type": "hold", "at": 1, "teamId": "paused-team"}}
        await world.node_a.request(b_id, paused)
        assert [type(r) for r in world.desk_b.requests] == [d.Submit, d.Hold, d.Hold]
        await world.node_a.request(b_id, {**other, "command": {**other["command"], "teamId": "paused-team"}})


async def test_offline_and_unpaired_are_visible(tmp_path: Path) -> None:
    async with two_machines(tmp_path) as world:
        a_id, b_id = world.node_a.machine_id, world.node_b.machine_id
        with pytest.raises(RemoteError) as caught:
            await trio.to_thread.run_sync(cli, world, "no-such-machine", "inbox")
        assert caught.value.code == "unpaired"
        # B goes away: A's notice for it is visibly queued as offline.
        world.node_b.stop()
        await eventually(lambda: world.relay.connected() == [world.node_a.identity.address])
        await PeerDelivery(world.node_a, b_id).submit(submit(f"{TEAM_ID}/q2/question", b_id))
        await eventually(lambda: any(r.reason == "offline" for r in world.owner.reports))
        # And a CLI on A asking B's (offline) machine gets a clear `offline`.
        with pytest.raises(RemoteError) as caught:
            await trio.to_thread.run_sync(
                lambda: call_remote(
                    world.home_a, b_id, "inbox", team_id=TEAM_ID, member_key=MEMBER_KEY, timeout=10
                )
            )
        assert caught.value.code == "offline"
        assert a_id not in caught.value.detail


async def test_frames_from_an_unpaired_machine_are_refused(tmp_path: Path) -> None:
    async with two_machines(tmp_path) as world:
        a_id = world.node_a.machine_id
        pairing.remove_peer(world.home_a, world.node_b.machine_id)  # A forgets B; B still knows A
        with pytest.raises(RemoteError) as caught:
            await trio.to_thread.run_sync(cli, world, a_id, "inbox")
        assert caught.value.code == "unpaired"
        assert world.node_a.stats["unpaired_frames"] == 1
        assert world.owner.frames == []


async def test_a_destination_keeps_a_team_to_the_machine_that_first_sent_its_notices(tmp_path: Path) -> None:
    async with two_machines(tmp_path) as world:
        b_id = world.node_b.machine_id
        await introduce(world)
        impostor = attrs.evolve(world.node_b.peer(world.node_a.machine_id), machine_id="machine-impostor")
        claim = {"ch": "delivery", "command": desk_command_to_json(submit(f"{TEAM_ID}/q9/question", b_id))}
        refused = await world.node_b._execute(impostor, claim)  # type: ignore[arg-type]
        assert refused["error"] == "conflict"
        release = {"ch": "delivery", "command": desk_command_to_json(d.Release(1, TEAM_ID))}
        assert (await world.node_b._execute(impostor, release))["error"] == "not_found"  # type: ignore[arg-type]
        assert len(world.desk_b.requests) == 1


async def test_an_outbox_item_answered_busy_keeps_its_place_and_is_tried_again(tmp_path: Path) -> None:
    node = RemoteNode(tmp_path / "home", retry_min=0.01, retry_max=0.02, log=lambda line: None)
    answers = ["busy", "busy", "offline", None, None]
    tried: list[str] = []

    async def request(machine: str, body: object, *, request_id: str | None = None, **_: object) -> object:
        assert request_id is not None
        tried.append(request_id)
        code = answers.pop(0)
        if code is not None:
            raise RemoteRefused(code, "not now")
        return {"result": True}

    node.request = request  # type: ignore[method-assign]
    node.enqueue("machine-b", {"ch": "delivery", "command": desk_command_to_json(d.Hold(1, TEAM_ID))})
    node.enqueue("machine-b", {"ch": "delivery", "command": desk_command_to_json(d.Release(2, TEAM_ID))})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node._outbox_worker, "machine-b", node._outboxes["machine-b"])
        await eventually(lambda: not node._outboxes["machine-b"].items)
        nursery.cancel_scope.cancel()
    assert len(tried) == 5 and len(set(tried[:4])) == 1  # the hold, four times under one id; then the release


async def test_an_answer_too_large_for_the_relay_is_refused_by_its_bound_not_retried(tmp_path: Path) -> None:
    node = RemoteNode(tmp_path / "home", log=lambda line: None)
    sent: list[dict[str, object]] = []

    async def seal_and_send(peer: object, body: dict[str, object], ref: str | None = None) -> None:
        sent.append(body)

    node._seal_and_send = seal_and_send  # type: ignore[method-assign]
    peer = pairing.Peer("machine-b", b"\x01" * 32, "ws://127.0.0.1:1", 0)
    await node._respond(peer, {"k": "res", "id": "r1", "frame": "x" * RESPONSE_BYTES})
    await node._respond(peer, {"k": "res", "id": "r2", "frame": "small"})
    assert sent[0]["error"] == "bound_exceeded" and "blob_bytes" in str(sent[0]["detail"])
    assert sent[1] == {"k": "res", "id": "r2", "frame": "small"}


async def test_a_peer_cannot_steer_a_team_this_machine_owns_nor_end_the_node(tmp_path: Path) -> None:
    node = RemoteNode(tmp_path / "home", log=lambda line: None)
    node.local_delivery = FakeDesk(node.route_report)
    owned: list[DeliveryReport] = []

    async def record(report: DeliveryReport) -> None:
        owned.append(report)

    node.report_local = record
    node.owns_team = lambda team_id: team_id == "mine"
    peer = pairing.Peer("machine-x", b"\x01" * 32, "ws://127.0.0.1:1", 0)
    hold = {"ch": "delivery", "command": desk_command_to_json(d.Hold(1, "mine"))}
    assert (await node._execute(peer, hold))["error"] == "conflict"
    node._grants = Grants(Map({"mine": "machine-x"}))  # even had a peer been let in, its reports stay here
    await node.route_report(DeliveryReport("mine", "mine/q1/question", "delivered", None))
    assert [r.team_id for r in owned] == ["mine"] and not node._outboxes
    deep = await node._execute(peer, {"ch": "team", "frame": "[" * 200_000})
    assert deep["error"] == "bad_request"


async def test_a_not_now_refusal_is_not_remembered_so_its_retry_gets_through(tmp_path: Path) -> None:
    node = RemoteNode(tmp_path / "home", log=lambda line: None)
    answered: list[dict[str, object]] = []

    async def respond(peer: object, body: dict[str, object]) -> None:
        answered.append(body)

    node._respond = respond  # type: ignore[method-assign]
    peer = pairing.Peer("machine-owner", b"\x01" * 32, "ws://127.0.0.1:1", 0)
    hold = {"k": "req", "id": "r1", "ch": "delivery", "command": desk_command_to_json(d.Hold(1, TEAM_ID))}
    node._inbound[peer.address] += 1
    await node._serve_request(peer, hold)  # no desk attached yet: `offline`, a passing refusal
    assert answered[-1]["error"] == "offline"
    desk = FakeDesk(node.route_report)
    node.local_delivery = desk
    node._inbound[peer.address] += 1
    await node._serve_request(peer, hold)  # the owner's retry, same request id
    assert answered[-1] == {"k": "res", "id": "r1", "result": True} and desk.requests == [d.Hold(1, TEAM_ID)]


class SilentDesk(FakeDesk):
    """A desk that takes a submit and never finishes it: its machine then leaves without an answer."""

    async def submit(self, command: d.Submit) -> None:
        self.requests.append(command)
        await trio.sleep_forever()


async def test_a_peer_that_left_after_taking_a_frame_shows_offline_within_seconds(tmp_path: Path) -> None:
    """Issue 16, item 10: a question to a machine that just stopped showed no delivery state for 20-30 s: the
    item ahead of it in the outbox had reached the machine, which left without answering, and waited out the
    whole request timeout. Now an attempt is short and its retry hears the relay's `offline`: the notice
    behind it shows `queued/offline` within seconds."""
    async with two_machines(tmp_path) as world:
        b_id = world.node_b.machine_id
        await introduce(world)
        world.node_b.local_delivery = SilentDesk(world.node_b.route_report)
        to_b = PeerDelivery(world.node_a, b_id)
        await to_b.submit(submit(f"{TEAM_ID}/q1/question", b_id))
        await eventually(lambda: len(world.node_b.local_delivery.requests) == 1)  # type: ignore[union-attr]
        world.node_b.stop()  # it took q1 and leaves without an answer
        await eventually(lambda: world.relay.connected() == [world.node_a.identity.address])
        await to_b.submit(submit(f"{TEAM_ID}/q2/question", b_id))
        q2 = f"{TEAM_ID}/q2/question"
        # Within 20 s on a loaded machine; a whole request timeout (30 s) would be too late.
        await eventually(lambda: DeliveryReport(TEAM_ID, q2, "queued", "offline") in world.owner.reports, 20)
        # q1 may have reached B: it is never said to be merely waiting, and stays first in line.
        assert not [r for r in world.owner.reports if r.notice_id.endswith("/q1/question")]
