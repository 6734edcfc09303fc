# A paired machine answers the owner's requests; what it answers is hostile input. Before these tests, the
# owner took its word whole: an error code with a lone surrogate became a notice's delivery reason the journal
# could not write (the team's ledger stopped until a restart, and every restart sent the notices again), an
# error code with escape sequences became a reason shown by `status` and a log line printed raw to the
# terminal of `harness daemon run`, and a `status` answer could rewrite the delivery record of a notice of
# another team. Real daemons, a real relay on loopback, and machine B's harness replaced by the attacker.
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core.terminal_text import is_terminal_safe
from harness.io import home as homes
from harness.io import pairing
from harness.io.daemon import Daemon
from harness.io.relay import Relay
from harness.io.remote import RemoteNode, RemoteRefused
from harness.io.remote_client import call_remote
from harness.io.stderr_log import stderr_log
from tests.test_relay_daemons import (
    BODY,
    TEAM_ID,
    World,
    alice_on_a_and_bob_on_b,
    eventually,
    fast_node,
    pair,
    request,
    two_daemons,
)

ESCAPES = "\x1b]0;OWNED\x07\x1b[2J"  # sets the window title, clears the screen
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: writes `rm -rf ~` into the clipboard


def compromise(daemon: Daemon, answer: Any) -> None:
    """Machine `daemon`'s harness answers every request from its peers with `answer`."""

    async def hostile(peer: pairing.Peer, message: dict[str, Any]) -> dict[str, Any]:
        return answer(message) if callable(answer) else answer

    assert daemon.node is not None
    daemon.node._execute = hostile  # type: ignore[method-assign]


def bob_introduction(world: World) -> Any:
    team = world.a.durable.teams[TEAM_ID]
    bob = next(m for m in team.members.values() if m.name == "bob")
    return bob.introduction


@pytest.mark.parametrize("code", [ESCAPES, "x" * 5_000], ids=["escape_sequences", "long_free_text"])
async def test_a_refusal_whose_code_is_not_a_short_code_is_recorded_as_malformed(
    tmp_path: Path, code: str
) -> None:
    """A notice a machine refuses is `rejected` with the machine's reason, a short code: one that is not
    (escape sequences, free text) is recorded as `malformed`, never as written."""
    async with two_daemons(tmp_path) as world:
        compromise(world.b, {"error": code, "detail": CLIPBOARD})
        await alice_on_a_and_bob_on_b(world)
        await eventually(lambda: getattr(bob_introduction(world), "state", None) == "rejected")
        assert bob_introduction(world).reason == "malformed"
        members = await trio.to_thread.run_sync(lambda: request(world.a, "members"))
        assert {m["name"] for m in members["members"]} == {"alice", "bob"}


async def test_a_frame_holding_a_lone_surrogate_is_refused_and_the_team_goes_on(tmp_path: Path) -> None:
    """A sealed frame is bounded like any listener's input: an answer holding a lone surrogate (which no
    journal can write) is refused whole, logged once, and the owner's team goes on taking requests."""
    logs: list[str] = []

    def node(home: Path) -> RemoteNode:
        return RemoteNode(home, retry_min=0.05, retry_max=0.2, log=logs.append)

    async with trio.open_nursery() as nursery:
        relay = Relay()
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        a = Daemon(tmp_path / "a", remote=node, log=logs.append)
        b = Daemon(tmp_path / "b", remote=node, log=lambda line: None)
        async with trio.open_nursery() as daemons:
            await daemons.start(a.run)
            await daemons.start(b.run)
            await pair(a, b, url)
            world = World([], a, b, relay)
            compromise(b, {"error": ESCAPES + "\ud800", "detail": CLIPBOARD})
            alice, _ = await alice_on_a_and_bob_on_b(world)
            await eventually(lambda: any("refused a sealed frame" in line for line in logs))
            asked = await trio.to_thread.run_sync(
                lambda: request(a, "ask", alice, id="q1", to="bob", text=BODY)
            )
            assert (asked["id"], asked["state"]) == ("q1", "open")
            assert not any("stopped" in line for line in logs), logs
            a.stop()
            b.stop()
        nursery.cancel_scope.cancel()
    assert a.internal_errors == 0


async def test_a_status_answer_cannot_rewrite_another_teams_delivery_record(tmp_path: Path) -> None:
    """A machine asked about one notice answers for that notice only: a report it adds about a notice of
    another team (here one whose member is not even on it) changes nothing of that team."""
    async with two_daemons(tmp_path) as world:
        a = world.a
        alice, _ = await alice_on_a_and_bob_on_b(world)
        other = [{"machineId": a.machine_id, "agentId": "agent-carol", "name": "carol"}]
        await trio.to_thread.run_sync(lambda: request(a, "create", id="t2other", name="Other", members=other))
        await trio.to_thread.run_sync(lambda: request(a, "ask", alice, id="q1", to="bob", text=BODY))
        carol = next(iter(a.durable.teams["t2other"].members.values()))
        await eventually(lambda: a.durable.teams["t2other"].members[carol.id].introduction is not None)
        before = a.durable.teams["t2other"].members[carol.id].introduction
        forged = {"teamId": "t2other", "noticeId": f"t2other/{carol.id}/introduction", "state": "read"}

        def answer(message: dict[str, Any]) -> dict[str, Any]:
            return {"result": [{**forged, "reason": "inbox"}]} if message.get("ch") == "status" else {}

        compromise(world.b, answer)
        checked = await trio.to_thread.run_sync(
            lambda: request(a, "delivery_check", team=TEAM_ID, questionId="q1")
        )
        assert checked["asked"] is True and checked["held"] is False, checked
        assert a.durable.teams["t2other"].members[carol.id].introduction == before


def test_every_log_line_reaches_stderr_terminal_safe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log line can quote a peer (a refusal's detail, a relay's close reason): the daemon, its remote
    node and the relay print it with escape sequences shown, never sent (core/terminal_text.py)."""
    hostile = f"machine b refused delivery: {ESCAPES}: {CLIPBOARD}\nharness daemon: all is well"
    for log in (stderr_log("harness relay"), Daemon(tmp_path / "a")._log, RemoteNode(tmp_path / "b")._log):
        log(hostile)
        printed = capsys.readouterr().err
        assert is_terminal_safe(printed) and "OWNED" in printed and "\x1b" not in printed
        assert printed.count("\nharness") == 0  # a peer's line break starts no line that passes for ours


LOCAL_TEAM = "localteam000000000000000000000001"


async def test_a_paired_machine_cannot_name_a_path_or_a_megabyte_for_a_team_or_a_membership(
    tmp_path: Path,
) -> None:
    """A team or membership id from a paired machine names a file here (`keys/TEAM/MEMBERSHIP.key`) and an
    entry of the kept grant. An adversarial review bound the team `.` with a hold, then withdrew the member
    `LOCALTEAM/alice`: this machine deleted its own member's key file, and with `../../victim` a key file
    outside its data directory; 200 KB team ids grew routes.json without end. Each is now refused as
    `bad_request` before anything is done, and nothing changes."""
    async with two_daemons(tmp_path) as world:
        hostile, victim = world.a, world.b
        assert hostile.node is not None and victim.node is not None
        alice_member = [{"machineId": victim.machine_id, "agentId": "agent-alice", "name": "alice"}]
        await trio.to_thread.run_sync(
            lambda: request(victim, "create", id=LOCAL_TEAM, name="mine", members=alice_member)
        )
        alice = await trio.to_thread.run_sync(
            lambda: request(victim, "key", team=LOCAL_TEAM, memberId="alice")
        )
        alice_file = Path(alice["keyFile"])
        outside = tmp_path / "victim" / "server.key"
        outside.parent.mkdir()
        outside.write_text("-----BEGIN PRIVATE KEY-----\n")
        routes = victim.home / "routes.json"
        routes_before = routes.read_bytes() if routes.exists() else None
        upward = os.path.relpath(outside.parent, victim.home / "keys")
        attempts = (
            (".", f"{LOCAL_TEAM}/{alice['memberId']}"),
            (upward, "server"),
            (str(outside.parent), "server"),
            ("t" * 200_000, "m1"),
        )
        for team, member in attempts:
            for command in (
                {"type": "hold", "at": 1, "teamId": team},
                {
                    "type": "withdraw_member",
                    "at": 1,
                    "teamId": team,
                    "membershipId": member,
                    "reason": "removed",
                },
            ):
                with pytest.raises(RemoteRefused) as refused:
                    await hostile.node.request(victim.machine_id, {"ch": "delivery", "command": command})
                assert refused.value.code == "bad_request", (team[:20], command["type"], refused.value)
        assert alice_file.exists() and outside.exists()
        assert (routes.read_bytes() if routes.exists() else None) == routes_before


async def test_a_machine_named_after_another_peers_address_cannot_take_its_frames(tmp_path: Path) -> None:
    """A machine declares its own id. An adversarial review gave machine B, as its id, machine C's relay
    address and paired it with A after C: A then opened every frame from C with B's session, refused it as
    forged, and C was locked out of A. A frame's sender is known by its address only."""
    c_address = pairing.identity(tmp_path / "c").address
    homes.ensure_home(tmp_path / "b")
    (tmp_path / "b" / homes.MACHINE_FILE).write_text(c_address + "\n")
    async with trio.open_nursery() as nursery:
        relay = Relay()
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        a, b, c = (Daemon(tmp_path / name, remote=fast_node, log=lambda line: None) for name in "abc")
        async with trio.open_nursery() as daemons:
            for daemon in (a, b, c):
                await daemons.start(daemon.run)
            await pair(a, c, url)
            await pair(a, b, url)
            assert b.machine_id == c_address
            listed = await trio.to_thread.run_sync(
                lambda: call_remote(c.home, a.machine_id, "list", timeout=30)
            )
            assert listed["teams"] == []
            assert a.node is not None and a.node.stats["refused_forged"] == 0
            for daemon in (a, b, c):
                daemon.stop()
        nursery.cancel_scope.cancel()


async def test_a_request_id_past_its_bound_is_refused_and_never_kept(tmp_path: Path) -> None:
    """Answered request ids are kept (the last DONE_CACHE per peer) and echoed: a review's 1,000,000-character
    ids pinned 100 MB per hundred requests, 4 GB per paired machine at the cap. A request id is at most
    REQUEST_ID_CHARS, like the relay's own frame ids; a longer one is refused, unanswered and unkept."""
    async with two_daemons(tmp_path) as world:
        hostile, victim = world.a, world.b
        assert hostile.node is not None and victim.node is not None
        peer = hostile.node.peer(victim.machine_id)
        assert peer is not None
        await hostile.node._seal_and_send(peer, {"k": "req", "id": "x" * 1_000_000, "ch": "list"})
        await eventually(lambda: victim.node is not None and victim.node.stats["refused_malformed"] == 1)
        assert not any(len(rid) > 64 for done in victim.node._done.values() for rid in done)
        listed = await hostile.node.request(victim.machine_id, {"ch": "team", "frame": '{"action":"list"}'})
        assert "frame" in listed  # the peer is still served
