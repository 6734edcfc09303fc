# Issue 20, "A live run": two real engines share their team's board, in the live acceptance's namespace
# (tests/live/team.py: one `unshare -n` namespace with the daemon, a fake model per engine and one tmux
# server), offline against the scripted fake model (tests/live/scripts.py: the model only names the next shell
# command, from the notice the engine was given). Claude Code leads and Codex is the peer, the pair the other
# live runs rely on most.
#
# The lead adds two tasks, the second after the first, and asks the peer to take the first; the peer claims,
# starts and completes it with evidence; the second becomes `ready`; the lead leaves the peer a note and asks
# it to read its notes. Notes are pulled, never pushed: the peer's model holds that turn on a gate until the
# test has seen, in the daemon's board view, the note sitting in the peer's unread set; then the peer's
# `board notes --unread` takes it out. Everything is checked from the daemon's board view (`board_get`) and
# from the board journal, replayed delta by delta through the pure recovery (so each revision's derived
# states are the journal's own), and written as evidence like the live acceptance's (`board.json`).
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core.board import BOARD_COMMAND_NAMES, SetMembers
from harness.core.board_recovery import DELTA_FIELD, recover
from harness.core.codec import BOARD_JOURNAL_VERSION, board_view
from harness.io.board_runner import board_store_dir
from harness.io.journal_files import scan_store_consistent
from harness.io.terminal_port import ScreenState
from tests.engines.launch import engine_version, install_problem
from tests.live.scripts import (
    BOARD_QUESTION,
    DRAFT_FILE,
    FIRST_TASK,
    NOTE_TEXT,
    NOTES_GATE,
    NOTES_PAGE,
    NOTES_QUESTION,
    SECOND_SEEN,
    SECOND_TASK,
    board_lead_script,
    board_peer_script,
)
from tests.live.team import LiveTeam, SeatSpec, TeamError, launch_team
from tests.test_live_acceptance import (
    DONE,
    TEAM,
    daemon_view,
    engines_view,
    state,
    team_receipts,
    wait_observed,
    write_evidence,
)

pytestmark = pytest.mark.engines

LEAD, PEER = "claude-lead", "codex-peer"
EVIDENCE = [f"{DRAFT_FILE}:1"]


@pytest.fixture
def live() -> Iterator[list[LiveTeam]]:
    problem = install_problem()
    if problem is not None:
        pytest.skip(f"engines not available: {problem}")
    teams: list[LiveTeam] = []
    yield teams
    for team in teams:
        team.stop()  # every process of its namespace, by PID


def board_get(team: LiveTeam) -> dict[str, Any]:
    """The daemon's board view, as the owner reads it."""
    view: dict[str, Any] = team.rpc("board_get", team_id=TEAM)
    return view


def wait_board(
    team: LiveTeam, done: Callable[[dict[str, Any]], bool], *, timeout: float, what: str
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    board = board_get(team)
    while not done(board):
        if time.monotonic() > deadline:
            raise TeamError(f"no {what} within {timeout:.0f} s; board:\n{json.dumps(board, indent=1)}")
        time.sleep(0.2)
        board = board_get(team)
    return board


def tasks(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {task["id"]: task for task in board["tasks"]}


def unread(board: dict[str, Any], member_id: str) -> int:
    count: int = next(m["unread"] for m in board["members"] if m["id"] == member_id)
    return count


def journal_steps(team: LiveTeam) -> list[dict[str, Any]]:
    """Every record of the board journal with the board it leaves: each record is replayed, with those before
    it, through the pure recovery, which refuses a delta that does not connect to the revision before it."""
    scan = scan_store_consistent(board_store_dir(team.daemon_home, TEAM))
    assert scan.recovery.checkpoint_seq == 0, "the board journal was compacted: its first records are gone"
    records = [(entry.seq, dict(entry.body)) for entry in scan.recovery.entries]
    steps = []
    for index, (seq, body) in enumerate(records):
        assert body["journalVersion"] == BOARD_JOURNAL_VERSION and DELTA_FIELD in body, body
        recovered = recover(TEAM, records[: index + 1])
        assert recovered.refused == () and recovered.board is not None, recovered.refused
        steps.append(
            {
                "seq": seq,
                "revision": body["revision"],
                "command": body[DELTA_FIELD],
                "board": board_view(recovered.board),
            }
        )
    return steps


def test_two_engines_share_the_board(
    live: list[LiveTeam], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20: "two real engines in the live acceptance share a board: the lead adds two tasks with a
    dependency, the peer claims and completes the first, the second becomes `ready`, and a note reaches the
    peer's unread set." Seed 002: a task is ready only when every dependency is done; notes are pulled."""
    started = time.monotonic()
    specs = [
        SeatSpec(LEAD, "claude", "lead", board_lead_script(PEER)),
        SeatSpec(PEER, "codex", "peer", board_peer_script()),
    ]
    team = launch_team(specs, skip_permissions=True)
    live.append(team)
    lead, peer = team.seats[LEAD], team.seats[PEER]
    team.register_agents()
    created = time.monotonic()
    team.create_team(TEAM, TEAM)

    # The first task done, the second ready, the note unread: the peer is held on its notes turn meanwhile.
    def noted(board: dict[str, Any]) -> bool:
        second = tasks(board).get(SECOND_TASK)
        return second is not None and second["state"] == "ready" and unread(board, peer.member_id) == 1

    noted_board = wait_board(team, noted, timeout=300, what="second task ready and a note unread")
    noted_s = time.monotonic() - created
    by_id = tasks(noted_board)
    first, second = by_id[FIRST_TASK], by_id[SECOND_TASK]
    assert (first["state"], first["claimant"], first["creator"]) == ("done", peer.member_id, lead.member_id)
    assert first["evidence"] == EVIDENCE and first["dependencies"] == []
    assert (second["claimant"], second["creator"], second["dependencies"]) == (
        None,
        lead.member_id,
        [FIRST_TASK],
    )
    assert unread(noted_board, lead.member_id) == 0 and noted_board["notes"] == 1
    assert not (peer.run.workdir / NOTES_PAGE).exists(), "the peer read its notes before the gate opened"

    peer.fake.release(NOTES_GATE)

    def settled(view: dict[str, Any]) -> bool:
        intros = [state(m["introduction"])[0] for m in view["members"]]
        notices = [state(e["delivery"])[0] for e in view["exchanges"]]
        notices += [state(e["answerDelivery"])[0] for e in view["exchanges"]]
        return (
            all(s in DONE for s in intros + notices)
            and {e["id"] for e in view["exchanges"]} == {BOARD_QUESTION, NOTES_QUESTION}
            and all(e["state"] == "answered" for e in view["exchanges"])
        )

    view = team.wait_team(
        TEAM, settled, timeout=240, what="both questions answered and every notice accepted"
    )
    settled_s = time.monotonic() - created
    for seat in team.seats.values():  # every engine done with its last turn before its log is read
        wait_observed(seat, lambda o: o.state is ScreenState.IDLE, timeout=60, what="idle screen")

    # The peer's `board notes --unread` returned the lead's note, and took it out of the unread set.
    page = json.loads((peer.run.workdir / NOTES_PAGE).read_text(encoding="utf-8"))["result"]
    assert [(n["sender"], n["to"], n["text"]) for n in page["notes"]] == [
        (lead.member_id, {"kind": "member", "name": peer.member_id}, NOTE_TEXT)
    ]
    assert (page["nextOffset"], page["unread"]) == (None, 0)
    exchanges = {e["id"]: e for e in view["exchanges"]}
    assert exchanges[BOARD_QUESTION]["answer"]["text"] == f"done: {FIRST_TASK}"
    assert exchanges[NOTES_QUESTION]["answer"]["text"].strip() == NOTE_TEXT
    assert {e["answer"]["author"] for e in exchanges.values()} == {peer.member_id}
    # What the lead's engine saw of the second task once the first was done.
    seen = json.loads((lead.run.workdir / SECOND_SEEN).read_text(encoding="utf-8"))
    assert (seen["id"], seen["state"], seen["dependencies"]) == (SECOND_TASK, "ready", [FIRST_TASK])

    final = board_get(team)
    assert unread(final, peer.member_id) == 0 and final["notes"] == 1
    assert tasks(final) == by_id  # reading notes changed no task

    # The journal: one delta per accepted command, revisions connected, replaying to the daemon's own view.
    steps = journal_steps(team)
    assert [s["revision"] for s in steps] == list(range(1, len(steps) + 1))
    assert [s["board"]["revision"] for s in steps] == [s["revision"] for s in steps]
    assert {**steps[-1]["board"], "you": None} == final
    names = {lead.member_id: LEAD, peer.member_id: PEER, None: "owner"}
    work = [(s["command"]["type"], names[s["command"]["actor"]], s) for s in steps]
    work = [w for w in work if w[0] != BOARD_COMMAND_NAMES[SetMembers]]  # the daemon's, as members follow
    assert [(kind, actor) for kind, actor, _ in work] == [
        ("add_task", LEAD),
        ("add_task", LEAD),
        ("claim", PEER),
        ("start", PEER),
        ("done", PEER),
        ("send_note", LEAD),
        ("read_messages", PEER),
    ]
    commands = [s["command"] for _, _, s in work]
    assert [c.get("taskId") for c in commands[2:5]] == [FIRST_TASK] * 3
    assert commands[1]["dependencies"] == [FIRST_TASK] and commands[4]["evidence"] == EVIDENCE
    assert commands[5]["to"] == {"kind": "member", "name": peer.member_id}
    assert commands[6]["unreadOnly"] is True
    second_states = [tasks(s["board"])[SECOND_TASK]["state"] for _, _, s in work[1:]]
    assert second_states == [
        "pending",
        "pending",
        "pending",
        "ready",
        "ready",
        "ready",
    ]  # ready only once done
    assert [unread(s["board"], peer.member_id) for _, _, s in work[4:]] == [0, 1, 0]

    found = team_receipts(team)
    assert sorted(r.kind for r in found.values()) == sorted(["introduction"] * 2 + ["question", "answer"] * 2)
    problems = {notice_id: r.problems() for notice_id, r in found.items() if r.problems()}
    assert problems == {}, json.dumps(problems, indent=1)

    evidence = {
        "test": "live board: two engines share their team's board through the daemon",
        "engineVersions": {seat.engine: engine_version(seat.engine) for seat in team.seats.values()},
        "engines": engines_view(team),
        "daemon": daemon_view(team),
        "team": {"id": TEAM, "members": [{"name": m["name"], "id": m["id"]} for m in view["members"]]},
        "boardWhenNoted": noted_board,
        "boardAtEnd": final,
        "peerNotesPage": page,
        "secondTaskAsTheLeadSawIt": seen,
        "journal": [
            {
                "seq": s["seq"],
                "revision": s["revision"],
                "actor": names[s["command"]["actor"]],
                "command": s["command"],
                "secondTask": (tasks(s["board"]).get(SECOND_TASK) or {}).get("state"),
                "peerUnread": unread(s["board"], peer.member_id),
            }
            for s in steps
        ],
        "exchanges": [
            {
                "id": e["id"],
                "from": e["from"],
                "to": e["to"],
                "state": e["state"],
                "answer": e["answer"]["text"],
            }
            for e in view["exchanges"]
        ],
        "receipts": [r.view() for r in sorted(found.values(), key=lambda r: r.submitted_at)],
        "timings": {
            **{k: round(v, 2) for k, v in team.timings.items()},
            "teamCreatedToNoteUnread": round(noted_s, 2),
            "teamCreatedToAllReceiptsSettled": round(settled_s, 2),
            "total": round(time.monotonic() - started, 2),
        },
    }
    write_evidence("board", evidence, tmp_path, capsys)
