# Issue 15 (the trust boundary across machines), findings 3, 5 and 6, through real processes: the relay and
# the daemons are `harness` processes on loopback (tests/test_relay_processes.py's world: team TEAM_ID on A
# with alice on A and bob on B). The hostile paired machine C is this test process: paired with A through
# `harness pair create` / `pair accept`, it runs the node code (a RemoteNode on C's own data directory) and
# sends A whatever sealed requests an attacker holding C's keys could send. A refusing relay is a loopback
# socket of this test that answers every WebSocket handshake with HTTP 503, as a relay whose connection
# slots strangers hold does.
from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core.records import NoticeKind
from harness.core.terminal_text import is_terminal_safe
from harness.io import pairing
from harness.io.client import RemoteError
from harness.io.remote import RemoteNode, RemoteRefused
from harness.io.remote_client import call_remote
from tests.test_relay_processes import (
    HARNESS,
    TEAM_ID,
    WAIT,
    Machine,
    World,
    desk_journal,
    eventually,
    free_port,
    harness,
    ok,
    world,
)

__all__ = ["world"]  # the fixture: relay, daemons A and B, team TEAM_ID on A

HOSTILE_TEAM = "cteam"
RAW = "id > /tmp/harness-pwned\r"  # what the finding pasted: a command and Enter, with no [team …] header


def pair_c_with_a(world: World) -> Path:
    """Machine C pairs with A as any machine would; its data directory is this test's."""
    home_c = world.tmp / "c"
    code = ok(harness("pair", "create", "--relay", world.url, "--home", str(world.a.home)))
    ok(harness("pair", "accept", code["code"], "--home", str(home_c)))
    return home_c


def submit(team: str, kind: NoticeKind, subject: str, to: tuple[str, str], machine: str) -> dict[str, Any]:
    """A desk command `submit` as it travels (core/codec.py's encoding) to membership and agent `to`, its
    text the raw payload."""
    member, agent = to
    return {
        "type": "submit",
        "at": 1,
        "teamId": team,
        "noticeId": f"{team}/{subject}/{kind.value}",
        "kind": kind.value,
        "subjectId": subject,
        "membershipId": member,
        "machineId": machine,
        "agentId": agent,
        "expiresAt": 10**13,
        "text": RAW,
    }


def content(team: str, kind: NoticeKind, subject: str, **fields: Any) -> dict[str, Any]:
    base = {"kind": kind.value, "teamId": team, "teamName": "x\x1b]0;pwned\x07", "subjectId": subject}
    base.update({"speaker": "mallory", "role": "", "teammates": [], "memberKey": "", "text": ""})
    base.update({"context": None, "evidence": []})
    return {**base, **fields}


async def as_machine_c(home_c: Path, a_id: str, bodies: list[dict[str, Any]], url: str) -> list[object]:
    """Send A each request as paired machine C; each one's result, or its refusal code."""
    node = RemoteNode(home_c, relay_url=url, log=lambda line: None)
    results: list[object] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(WAIT):
            await node.wait_connected()
        for body in bodies:
            try:
                results.append((await node.request(a_id, body, timeout=WAIT))["result"])
            except RemoteRefused as error:
                results.append(error.code)
        nursery.cancel_scope.cancel()
    return results


def daemon_status(machine: Machine) -> dict[str, Any]:
    status: dict[str, Any] = ok(harness("daemon", "status", "--home", str(machine.home)))
    return status


def test_finding_5_a_paired_machine_gets_exactly_its_grant(world: World) -> None:
    """Finding 5: a sealed `delivery` submit for a team that does not exist, to an agent that shares no team
    with the sender, was pasted raw into that agent's terminal. Now A's desk takes from C only what C's grant
    covers (the team C owns there, the member C introduced), renders it itself inside the `[team …]` framing,
    and refuses and counts the rest; nothing C sent reaches a desk as text."""
    home_c = pair_c_with_a(world)
    a_id = world.a.machine_id
    alice = ("alice-member", "agent-alice")
    intro = NoticeKind.INTRODUCTION
    question = NoticeKind.QUESTION
    bodies = [
        # the finding's frame: a team that does not exist here, an agent that shares no team with C
        {"ch": "delivery", "command": submit("nosuchteam", question, "q1", alice, a_id)},
        # a question in the team A owns itself, to its own member
        {"ch": "delivery", "command": submit(TEAM_ID, question, "q1", alice, a_id)},
        # C introduces agent-alice in a team of its own: its grant now covers that membership...
        {
            "ch": "delivery",
            "command": {
                **submit(HOSTILE_TEAM, intro, "mem-x", ("mem-x", "agent-alice"), a_id),
                "content": content(HOSTILE_TEAM, intro, "mem-x", memberKey="k0ffee", role="r\x1b[201~"),
            },
        },
        # ...and no other: a question to a membership it never introduced
        {
            "ch": "delivery",
            "command": {
                **submit(HOSTILE_TEAM, question, "q2", ("mem-y", "agent-alice"), a_id),
                "content": content(HOSTILE_TEAM, question, "q2", text="hi"),
            },
        },
        # a question to the member it introduced, its text carrying the breakout: framed and escaped here
        {
            "ch": "delivery",
            "command": {
                **submit(HOSTILE_TEAM, question, "q3", ("mem-x", "agent-alice"), a_id),
                "content": content(HOSTILE_TEAM, question, "q3", text=RAW + "\x1b[201~\x03"),
            },
        },
        # the same without its content: the wire's text is never taken
        {"ch": "delivery", "command": submit(HOSTILE_TEAM, question, "q4", ("mem-x", "agent-alice"), a_id)},
    ]
    results = trio.run(as_machine_c, home_c, a_id, bodies, world.url)
    assert results == ["not_found", "conflict", True, "not_found", True, "bad_request"]

    desk = desk_journal(world.a.home)[0]
    from_c = {n: notice for n, notice in desk.notices.items() if not n.startswith(f"{TEAM_ID}/")}
    assert sorted(from_c) == [f"{HOSTILE_TEAM}/mem-x/introduction", f"{HOSTILE_TEAM}/q3/question"]
    for notice in from_c.values():
        assert is_terminal_safe(notice.text) and RAW not in notice.text
        assert notice.text.startswith("[team x␛]0;pwned^G] ")
    assert "␛[201~^C" in from_c[f"{HOSTILE_TEAM}/q3/question"].text
    taught = from_c[f"{HOSTILE_TEAM}/mem-x/introduction"].text
    assert "--key-file" in taught and "k0ffee" not in taught  # the key went to a private file on A
    counters = daemon_status(world.a)["remote"]["counters"]
    assert counters["grant_refused_not_found"] == 2
    assert counters["grant_refused_conflict"] == 1
    assert counters["grant_refused_bad_request"] == 1
    doctor = doctor_text(world.a)
    assert "daemon relay: connected" in doctor and "grant_refused_not_found 2" in doctor, doctor


def test_finding_6_a_paired_machine_observes_only_teams_it_has_a_member_in(world: World) -> None:
    """Finding 6: `--machine A list` and `--team T get` from a paired machine listed every team on A and read
    every question and answer. Now B (bob's machine) sees team TEAM_ID, and C, with no member in it, sees no
    team: `list` leaves it out and `get`/`members` answer `not_found`. No view carries a key."""
    home_c = pair_c_with_a(world)
    a_id = world.a.machine_id
    ok(world.alice("ask", "bob", "a private question: cerulean-axolotl", "--id", "q1"))

    seen_by_b = call_remote(world.b.home, a_id, "list", timeout=WAIT)
    assert [team["id"] for team in seen_by_b["teams"]] == [TEAM_ID]
    snapshot = call_remote(world.b.home, a_id, "get", team_id=TEAM_ID, timeout=WAIT)
    assert "cerulean-axolotl" in json.dumps(snapshot)
    board = call_remote(world.b.home, a_id, "board_get", team_id=TEAM_ID, timeout=WAIT)
    assert board["teamId"] == TEAM_ID and len(board["members"]) == 2, board
    for key in world.keys.values():
        assert key not in json.dumps([seen_by_b, snapshot, board])

    async def observe_as_c() -> list[object]:
        node = RemoteNode(home_c, relay_url=world.url, log=lambda line: None)
        found: list[object] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            with trio.fail_after(WAIT):
                await node.wait_connected()
            found.append(await trio.to_thread.run_sync(partial(call_remote, home_c, a_id, "list")))
            for action in ("get", "members", "board_get"):
                try:
                    await trio.to_thread.run_sync(partial(call_remote, home_c, a_id, action, team_id=TEAM_ID))
                except RemoteError as error:
                    found.append(error.code)
            nursery.cancel_scope.cancel()
        return found

    listed, get, members, board = trio.run(observe_as_c)
    assert listed == {"teams": [], "unavailable": []}
    assert (get, members, board) == ("not_found", "not_found", "not_found")


@pytest.fixture
def refusing_relay() -> Iterator[int]:
    """A loopback port that answers every connection with HTTP 503, as a full relay did."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_finding_3_a_refusing_relay_is_retried_and_the_daemon_keeps_serving(
    tmp_path: Path, refusing_relay: int
) -> None:
    """Finding 3: a relay answering the WebSocket handshake with an HTTP error ended the daemon, and again on
    every restart while the relay stayed full. Now each refusal is a retry after a backoff, `daemon status`
    shows the link retrying with its last error, and the local team works throughout."""
    here = World(tmp_path)
    try:
        pairing.set_relay_url(here.a.home, f"ws://127.0.0.1:{refusing_relay}")
        here.start_daemon(here.a, wait=False)
        eventually(lambda: daemon_ready(here.a), "daemon A to answer")

        def retried() -> bool:
            link = daemon_status(here.a)["remote"]["link"]
            return link["state"] == "retrying" and link["failuresInARow"] >= 3

        eventually(retried, "three refused attempts", seconds=60)
        link = daemon_status(here.a)["remote"]["link"]
        assert "503" in link["lastError"], link
        doctor = doctor_text(here.a)
        assert "daemon relay: retrying" in doctor and "503" in doctor, doctor
        assert here.a.daemon.running
        members = [{"machineId": here.a.machine_id, "agentId": "agent-alice", "name": "alice"}]
        team_file = tmp_path / "team.json"
        team_file.write_text(json.dumps({"id": TEAM_ID, "name": "Local", "members": members}))
        ok(harness("team", "--home", str(here.a.home), "create", "--file", str(team_file)))
        asked = ok(harness("team", "--home", str(here.a.home), "--team", TEAM_ID, "get"))
        assert asked["id"] == TEAM_ID
        log = here.a.daemon.text()
        # Counted by the refusal's own words: the relay's port may itself contain "503" (43503 did).
        refusals = log.count("status_code=503")
        assert 1 <= refusals < link["failuresInARow"], ("each repeated refusal was logged again", log)
        assert "Traceback" not in log and "internal error" not in log, log
    finally:
        here.close()


def daemon_ready(machine: Machine) -> bool:
    assert machine.daemon.running, machine.daemon.text()
    return harness("daemon", "status", "--home", str(machine.home))[0] == 0


def doctor_text(machine: Machine) -> str:
    """`harness doctor` as a person reads it (no --json)."""
    argv = [*HARNESS, "doctor", "--home", str(machine.home)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr
