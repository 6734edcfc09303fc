# The terminal watch view driven by Textual's pilot against a real daemon on loopback. Textual runs asyncio
# and the daemon runs trio, so the daemon gets its own thread with its own trio loop; the tests are plain
# functions that run the pilot with asyncio.run.
from __future__ import annotations

import asyncio
import html
import os
import re
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from rich.text import Text
from textual.widgets import DataTable, Static

from harness.cli.watch import BoardSnapshot, Link, Observed, Snapshot, WatchApp
from harness.core.terminal_text import SHOWN_AS_CODE_POINTS
from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon

TEAM = "t1"
MEMBERS = [
    {"id": "m-ann", "machineId": "machine-1", "agentId": "agent-ann", "name": "ann", "role": "daemon"},
    {"id": "m-bob", "machineId": "machine-1", "agentId": "agent-bob", "name": "bob", "role": "phone"},
]


class DaemonThread:
    """A real daemon in this process, on its own thread and trio loop; stoppable and restartable."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.socket_path = home / homes.SOCKET_FILE
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._daemon: Daemon | None = None

    def start(self) -> DaemonThread:
        ready = threading.Event()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._daemon = Daemon(self.home, log=lambda line: None)
            async with trio.open_nursery() as nursery:
                await nursery.start(self._daemon.run)
                ready.set()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        assert ready.wait(60), "the daemon did not start"  # generous: a loaded two-core machine
        return self

    def stop(self) -> None:
        assert self._token is not None and self._daemon is not None and self._thread is not None
        trio.from_thread.run_sync(self._daemon.stop, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive()
        assert self._daemon.internal_errors == 0

    def call(self, action: str, *, key: str | None = None, **fields: Any) -> Any:
        """One `team` request as the owner, or as the member whose key is `key`."""
        with Client(self.socket_path) as client:
            token = None if key else homes.read_owner_token(self.home)
            return client.request(action, team_id=TEAM, owner_token=token, member_key=key, fields=fields)

    def board(self, kind: str, op: str, *, key: str | None = None, **command: Any) -> Any:
        return self.call("board", key=key, id=op, command={"type": kind, **command})


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonThread]:
    running = DaemonThread(tmp_path / "home").start()
    with Client(running.socket_path) as client:
        token = homes.read_owner_token(running.home)
        client.request("create", owner_token=token, fields={"id": TEAM, "name": "Build", "members": MEMBERS})
    yield running
    running.stop()


def ask(daemon: DaemonThread, qid: str, text: str) -> None:
    daemon.call("ask", id=qid, to="bob", text=text, **{"from": "m-ann"})


async def until(condition: Callable[[], bool], pilot: Any, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


def plain(app: WatchApp, selector: str) -> str:
    content = app.query_one(selector, Static).render()
    return content.plain if isinstance(content, Text) else str(content)


def screen_text(app: WatchApp) -> str:
    """The screen as the terminal shows it, row by row, read back from Textual's own screenshot (rich's SVG:
    one <text> per run of cells, tagged with its row)."""
    rows: dict[int, list[tuple[float, str]]] = {}
    for x, row, text in re.findall(
        r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" '
        r'clip-path="url\(#[^)]*-line-(\d+)\)">([^<]*)</text>',
        app.export_screenshot(),
    ):
        rows.setdefault(int(row), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    return "\n".join("".join(text for _, text in sorted(rows[row])) for row in sorted(rows))


def run(app: WatchApp, scenario: Callable[[Any], Awaitable[None]], size: tuple[int, int]) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await scenario(pilot)

    asyncio.run(main())


def test_keys_select_refresh_and_quit(daemon: DaemonThread) -> None:
    for n in range(3):
        ask(daemon, f"q{n}", f"question number {n}")
    app = WatchApp(daemon.home, TEAM)

    async def scenario(pilot: Any) -> None:
        await until(lambda: app.revision >= 0 and app.link == "live", pilot)
        table = app.query_one("#exchanges", DataTable)
        assert table.row_count == 3
        assert app.selected == "q2"  # newest first
        assert "question number 2" in plain(app, "#detail-text")
        await pilot.press("j")
        assert app.selected == "q1"
        await pilot.press("down")
        assert app.selected == "q0"
        await pilot.press("k")
        assert app.selected == "q1"
        await pilot.press("up")
        assert app.selected == "q2"
        await pilot.press("j")
        # A reply arrives: the live subscription shows it and the selection stays on q1.
        before = app.revision
        daemon.call("reply", questionId="q1", text="the answer is 42", evidence=["io/x.py:1"], memberId="bob")
        await until(lambda: app.revision > before, pilot)
        assert app.selected == "q1"
        detail = plain(app, "#detail-text")
        assert "the answer is 42" in detail and "evidence: io/x.py:1" in detail
        assert "question: answered" in detail
        # Question state and delivery state are separate columns.
        row = table.get_row("q1")
        assert str(row[0]) == "answered"
        assert str(row[1]).split()[0] in {"queued", "held", "delivered", "withdrawn", "expired"}
        # `r` refreshes from a fresh `get`; the same revision changes nothing.
        shown = app.revision
        fetch = app._refresh
        refreshed: list[object] = []
        app._refresh = lambda: refreshed.append(fetch())  # type: ignore[method-assign]
        await pilot.press("r")
        await pilot.pause(0.3)
        assert len(refreshed) == 1  # `r` fetched the team again...
        assert app.revision == shown and app.link == "live"  # ...and the same revision changed nothing
        await pilot.press("q")
        assert not app.is_running

    run(app, scenario, (140, 40))


def test_escape_closes(daemon: DaemonThread) -> None:
    app = WatchApp(daemon.home, TEAM)

    async def scenario(pilot: Any) -> None:
        await until(lambda: app.link == "live", pilot)
        await pilot.press("escape")
        assert not app.is_running

    run(app, scenario, (100, 30))


def test_an_older_revision_is_ignored(tmp_path: Path) -> None:
    app = WatchApp(tmp_path, TEAM, subscribe=False)
    team = {"id": TEAM, "name": "Build", "state": "active", "members": [], "exchanges": []}

    async def scenario(pilot: Any) -> None:
        app.post_message(Snapshot({**team, "revision": 5, "name": "five"}))
        await pilot.pause()
        app.post_message(Snapshot({**team, "revision": 3, "name": "three"}))
        app.post_message(Snapshot({**team, "revision": 5, "name": "five again"}))
        app.post_message(Snapshot({**team, "id": "other", "revision": 9, "name": "other team"}))
        await pilot.pause()
        assert app.revision == 5 and "five  t1" in plain(app, "#title")
        app.post_message(Snapshot({**team, "revision": 6, "name": "six"}))
        await pilot.pause()
        assert "six  t1" in plain(app, "#title")

    run(app, scenario, (80, 24))


def test_reconnects_after_a_daemon_restart(daemon: DaemonThread) -> None:
    ask(daemon, "q0", "before the restart")
    app = WatchApp(daemon.home, TEAM)

    async def scenario(pilot: Any) -> None:
        await until(lambda: app.link == "live" and app.revision >= 0, pilot)
        revision = app.revision
        await asyncio.to_thread(daemon.stop)
        await until(lambda: app.link == "gone", pilot)
        link = plain(app, "#link")
        assert "daemon not reachable" in link and f"revision {revision}" in link
        assert "[last known]" in plain(app, "#title")
        # The old view stays while the daemon is away.
        assert app.query_one("#exchanges", DataTable).row_count == 1
        await asyncio.to_thread(daemon.start)  # a new daemon: found again through daemon.json
        await asyncio.to_thread(ask, daemon, "q1", "after the restart")
        await until(lambda: app.link == "live" and app.revision > revision, pilot)
        assert app.query_one("#exchanges", DataTable).row_count == 2
        assert "[last known]" not in plain(app, "#title")

    run(app, scenario, (120, 30))


def test_an_old_daemon_is_explained(tmp_path: Path) -> None:
    app = WatchApp(tmp_path, TEAM, subscribe=False)

    async def scenario(pilot: Any) -> None:
        app.post_message(Link("incompatible", "the daemon is older (protocol revision 1) than this client"))
        await pilot.pause()
        assert "too old for this client" in plain(app, "#link")
        assert app.query_one("#link", Static).has_class("-incompatible")

    run(app, scenario, (80, 24))


@pytest.mark.parametrize("width", [60, 160])
def test_narrow_and_wide_layouts(daemon: DaemonThread, width: int) -> None:
    ask(daemon, "q0", "a question with quite a long text " * 6)
    daemon.call("reply", questionId="q0", text="an answer", memberId="bob")
    app = WatchApp(daemon.home, TEAM)

    async def scenario(pilot: Any) -> None:
        await until(lambda: app.revision >= 0 and app.link == "live", pilot)
        await pilot.pause(0.1)
        lists = app.query_one("#lists").region
        detail = app.query_one("#detail").region
        table = app.query_one("#exchanges", DataTable).region
        assert table.height >= 2 and detail.height >= 3
        for region in (lists, detail):
            assert region.x >= 0 and region.right <= width
        if width < 100:  # stacked: the detail sits under the lists
            assert app.screen.has_class("-narrow") and detail.y >= lists.bottom
        else:  # side by side
            assert app.screen.has_class("-wide") and detail.x >= lists.right and detail.y == lists.y
        assert "an answer" in plain(app, "#detail-text")
        # The two state columns come first, so they are visible even at 60 columns.
        assert str(app.query_one("#exchanges", DataTable).get_row("q0")[0]) == "answered"

    run(app, scenario, (width, 30))


def test_the_roster_shows_what_the_daemon_sees_of_local_terminals(daemon: DaemonThread) -> None:
    here = homes.machine_id(daemon.home)
    daemon.call("add", id="m-cat", machineId=here, agentId="agent-cat", name="cat")
    app = WatchApp(daemon.home, TEAM)

    async def scenario(pilot: Any) -> None:
        roster = app.query_one("#roster", DataTable)
        await until(lambda: app.observations.get("m-cat") == "not registered", pilot)
        await pilot.pause()
        assert str(roster.get_row("m-cat")[2]) == "not registered"
        assert str(roster.get_row("m-ann")[2]) == "-"  # on another machine: nothing to observe from here

    run(app, scenario, (120, 30))


def test_redirected_output_refuses_and_points_to_get_json(tmp_path: Path) -> None:
    env = {**os.environ, "HARNESS_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "team", "--team", TEAM, "watch"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"harness team --team {TEAM} get --json" in done.stderr


def test_finding_6_every_field_of_a_snapshot_is_shown_escaped_never_as_markup(tmp_path: Path) -> None:
    """Issue 14, finding 6 ("Viewers print what peers wrote"): names, roles and texts are the members', and a
    team of a paired machine (`--machine`) comes whole from that machine, states and reasons included. Every
    field is shown with each control character visible, and text that looks like markup as itself (a plain
    string cell of a DataTable is read as markup)."""

    def hostile(word: str) -> str:
        return f"{word}\x1b]2;pwned\x1b\\\x9b\u202e\x00[b]{word}[/b]"

    member = {
        "id": "m-ann",
        "machineId": hostile("machine"),
        "agentId": hostile("agent"),
        "name": hostile("ann"),
        "role": hostile("role"),
        "state": hostile("mstate"),
        "introduction": {"state": "delivered", "reason": hostile("intro")},
    }
    exchange = {
        "id": "q1",
        "from": "m-ann",
        "to": "m-ann",
        "state": hostile("qstate"),
        "text": hostile("question"),
        "context": hostile("context"),
        "createdAt": 1,
        "deadlineAt": 2,
        "delivery": {"state": "unconfirmed", "reason": hostile("why")},
        "answer": {"author": "m-ann", "text": hostile("answer"), "evidence": [hostile("ref")], "at": 3},
    }
    team = {
        "id": TEAM,
        "name": hostile("team"),
        "state": hostile("tstate"),
        "revision": 1,
        "members": [member],
        "exchanges": [exchange],
    }
    app = WatchApp(tmp_path, TEAM, subscribe=False)

    async def scenario(pilot: Any) -> None:
        app.post_message(Snapshot(team))
        app.post_message(Observed({"m-ann": hostile("seen")}))
        app.post_message(Link("gone", hostile("link")))
        await until(lambda: "answer" in plain(app, "#detail-text") and app.link == "gone", pilot)
        await pilot.pause()
        screen = screen_text(app)
        unprintable = {c for c in screen if c != "\n" and (not c.isprintable() or c in SHOWN_AS_CODE_POINTS)}
        assert unprintable == set(), screen
        words = ("team", "tstate", "link", "ann", "mstate", "seen", "role", "intro", "agent", "machine")
        words += ("qstate", "why", "question", "context", "answer", "ref")
        for word in words:
            assert f"{word}␛]2;pwned␛\\\\u009b\\u202e^@[b]{word}[/b]" in screen, (word, screen)

    run(app, scenario, (600, 60))


def test_the_board_shows_tasks_by_state_and_each_members_unread_notes(daemon: DaemonThread) -> None:
    """Issue 20: the watch shows the board read-only: "tasks by state with their dependencies" and owner or
    claimant, and each member's unread notes where it shows members. A claim changes the board and not the
    ledger, so the view reads the board by itself, without a new team revision."""
    ann = daemon.call("key", memberId="m-ann")["memberKey"]
    daemon.board("define_role", "r1", name="qa", description="tests what is built")
    daemon.board("add_task", "old", title="Dropped idea")
    daemon.board("add_task", "design", title="Design the API")
    daemon.board(
        "add_task",
        "build",
        title="Build it",
        dependencies=["design"],
        owner={"kind": "member", "name": "ann"},
    )
    daemon.board("add_task", "test", title="Test it", owner={"kind": "role", "name": "qa"})
    daemon.board("cancel", "c1", taskId="old")
    daemon.board("claim", "c2", key=ann, taskId="design")
    daemon.board("start", "c3", key=ann, taskId="design")
    daemon.board("send_note", "n1", to={"kind": "member", "name": "bob"}, text="the API is in docs/api.md")
    daemon.board("send_note", "n2", to={"kind": "member", "name": "bob"}, text="and the tests in tests/")
    app = WatchApp(daemon.home, TEAM)

    def cells(table: DataTable[Any], key: str) -> list[str]:
        return [str(cell) for cell in table.get_row(key)]

    async def scenario(pilot: Any) -> None:
        await until(lambda: app.board is not None and app.revision >= 0, pilot)
        await pilot.pause()
        tasks = app.query_one("#tasks", DataTable)
        order = [str(row.key.value) for row in tasks.ordered_rows]
        assert order == ["design", "test", "build", "old"]  # in progress, ready, pending, cancelled
        assert cells(tasks, "design")[:5] == ["in_progress", "Design the API", "anyone", "ann", "-"]
        assert cells(tasks, "build")[:5] == ["pending", "Build it", "ann", "-", "Design the API"]
        assert cells(tasks, "test")[2] == "role:qa"
        assert cells(tasks, "old")[0] == "cancelled"
        assert "4 tasks, 2 notes" in plain(app, "#board-heading")
        roster = app.query_one("#roster", DataTable)
        assert (cells(roster, "m-bob")[5], cells(roster, "m-ann")[5]) == ("2", "0")
        # ann finishes the design: the board moves on while the ledger's revision stays where it was.
        revision = app.revision
        await asyncio.to_thread(daemon.board, "done", "c4", key=ann, taskId="design")
        await until(lambda: cells(tasks, "design")[0] == "done", pilot)
        await pilot.pause()
        assert cells(tasks, "build")[0] == "ready"
        assert [str(row.key.value) for row in tasks.ordered_rows][:2] == ["build", "test"]  # board order
        assert app.revision == revision

    run(app, scenario, (160, 50))


def test_an_older_board_is_ignored_and_a_failed_read_keeps_the_last(tmp_path: Path) -> None:
    app = WatchApp(tmp_path, TEAM, subscribe=False)
    board = {"teamId": TEAM, "generation": 7, "members": [], "roles": [], "notes": 0}

    def task(title: str) -> dict[str, Any]:
        return {
            "id": "t",
            "title": title,
            "state": "ready",
            "owner": None,
            "claimant": None,
            "dependencies": [],
        }

    async def scenario(pilot: Any) -> None:
        app.post_message(BoardSnapshot(None, "unknown_team: no team 't1'"))
        await pilot.pause()
        assert "unknown_team" in plain(app, "#board-heading")
        app.post_message(BoardSnapshot({**board, "revision": 4, "tasks": [task("four")]}))
        app.post_message(BoardSnapshot({**board, "revision": 3, "tasks": [task("three")]}))
        app.post_message(BoardSnapshot({**board, "revision": 4, "tasks": [task("four again")]}))
        app.post_message(BoardSnapshot({**board, "teamId": "other", "revision": 9, "tasks": [task("other")]}))
        app.post_message(BoardSnapshot(None, "the daemon went away"))
        await pilot.pause()
        tasks = app.query_one("#tasks", DataTable)
        assert str(tasks.get_row("t")[1]) == "four"
        assert "revision 4" in plain(app, "#board-heading")
        # The team recreated: a new generation starts its revisions again and replaces the old board.
        app.post_message(BoardSnapshot({**board, "generation": 8, "revision": 1, "tasks": [task("reborn")]}))
        await pilot.pause()
        assert str(tasks.get_row("t")[1]) == "reborn"

    run(app, scenario, (120, 30))


def test_every_field_of_the_board_is_shown_escaped_never_as_markup(tmp_path: Path) -> None:
    """Finding 6 for the board: task titles, role names and ids are members' words (and a dependency's id is
    shown when its task is unknown); each is shown with its control characters visible, markup as itself."""

    def hostile(word: str) -> str:
        return f"{word}\x1b]2;pwned\x1b\\\x9b\u202e\x00[b]{word}[/b]"

    team = {"id": TEAM, "name": "Build", "state": "active", "revision": 1, "exchanges": []}
    team["members"] = [{**MEMBERS[0], "state": "active", "introduction": None}]
    task = {
        "id": hostile("taskid"),
        "title": hostile("title"),
        "state": hostile("tstate"),
        "owner": {"kind": "role", "name": hostile("role")},
        "claimant": hostile("claimant"),
        "dependencies": [hostile("dep")],
    }
    board = {"teamId": TEAM, "generation": 1, "revision": 2, "tasks": [task], "roles": [], "notes": 1}
    board["members"] = [{"id": "m-ann", "state": "active", "roles": [], "unread": 1}]
    app = WatchApp(tmp_path, TEAM, subscribe=False)

    async def scenario(pilot: Any) -> None:
        app.post_message(Snapshot(team))
        app.post_message(BoardSnapshot(board))
        await until(lambda: app.board is not None, pilot)
        await pilot.pause()
        screen = screen_text(app)
        unprintable = {c for c in screen if c != "\n" and (not c.isprintable() or c in SHOWN_AS_CODE_POINTS)}
        assert unprintable == set(), screen
        for word in ("taskid", "title", "tstate", "role", "claimant", "dep"):
            assert f"{word}␛]2;pwned␛\\\\u009b\\u202e^@[b]{word}[/b]" in screen, (word, screen)

    run(app, scenario, (900, 40))
