# `harness team --team ID watch`: a read-only terminal view of one team. It is a projection of the daemon's
# ledger and nothing more: everything on screen is rebuilt from the snapshots the daemon pushes, only a newer
# revision replaces what is shown (a late or replayed frame can never roll the view back), and question state
# and delivery state stay in separate columns because they are separate facts. The subscription runs in a
# thread over the ordinary blocking client; when the daemon goes away the view keeps the last state, says so,
# and reconnects by itself, re-reading daemon.json so a restarted daemon is found too. Every word on
# screen is built by cli/output.py's `shown` (terminal-safe Text, never markup): a peer's name or question may
# hold escape sequences or `[link=…]`, and DataTable would read a plain string cell as markup.
#
# The team's board (board-v1) is shown read-only beside it: tasks by state with what they wait on, and each
# member's unread notes. The daemon pushes no board snapshot (the board has its own revision, apart from the
# ledger's), so the view reads `board_get` on every team snapshot and every BOARD_SECONDS, and the same rule
# holds: only a newer board (generation, revision) replaces what is shown.
from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from harness.cli.output import clock, delivery_text, one_line, shown
from harness.core.effects import notice_id
from harness.core.records import NoticeKind
from harness.core.terminal_text import quoted
from harness.io import home as homes
from harness.io.client import Client, ClientError, RemoteError, Uncertain, Unreachable, locate_socket
from harness.io.rpc import INCOMPATIBLE

# How long the subscriber waits before trying a vanished daemon again; a person restarting it should not
# wait long, and a loopback connect attempt costs nothing.
RETRY_SECONDS = 1.0
# An incompatible or refusing daemon will not change by itself soon; retry it less often.
REFUSED_RETRY_SECONDS = 5.0
# Terminal observations are not part of the snapshot; they are re-read this often while the view is open.
OBSERVE_SECONDS = 5.0
EXCERPT_CHARS = 80
# A claim or a note changes the board but not the ledger's revision: it shows within this long.
BOARD_SECONDS = 2.0
# Tasks by state: what is moving first, what is over last (spec/board-v1.md's task states).
TASK_STATE_ORDER = ("in_progress", "ready", "pending", "blocked", "done", "cancelled")


class Snapshot(Message):
    """A team view from the daemon (a pushed snapshot, the subscription's first result, or a refresh)."""

    def __init__(self, team: dict[str, Any]) -> None:
        super().__init__()
        self.team = team


class Link(Message):
    """What the subscriber knows about the daemon: connecting, live, gone, incompatible or refused."""

    def __init__(self, state: str, detail: str) -> None:
        super().__init__()
        self.state = state
        self.detail = detail


class Observed(Message):
    """Live terminal observations of members on the daemon's machine, by membership id."""

    def __init__(self, observations: dict[str, str]) -> None:
        super().__init__()
        self.observations = observations


class BoardSnapshot(Message):
    """The team's board from `board_get`, or None with why it could not be read."""

    def __init__(self, board: dict[str, Any] | None, detail: str = "") -> None:
        super().__init__()
        self.board = board
        self.detail = detail


class Subscriber:
    """Keeps one subscription open in a worker thread and reports through `post`; `stop` ends it promptly."""

    def __init__(
        self,
        home: Path,
        team_id: str,
        socket: str | None,
        post: Callable[[Message], object],
        machine: str | None = None,
    ) -> None:
        self.home = home
        self.team_id = team_id
        self.socket = socket
        self.machine = machine  # the paired machine that owns the team: polled through the relay
        self._post = post
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._client: Client | None = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._interrupt()

    def retry_now(self) -> None:
        """Skip the wait before the next connection attempt (the person pressed r)."""
        self._wake.set()

    def _interrupt(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.interrupt()

    def run(self) -> None:
        while not self._stopped.is_set():
            delay = self._once()
            self._wake.wait(delay)
            self._wake.clear()

    def _once(self) -> float:
        """One connection's life; returns how long to wait before the next."""
        try:
            if self.machine is not None:
                return self._poll_remote(self.machine)
            where, _ = locate_socket(self.home, self.socket)
            client = Client(where)
            with self._lock:
                if self._stopped.is_set():
                    return 0
                self._client = client
            try:
                self._post(Link("connecting", f"connecting to the daemon at {where}"))
                client.connect()
                capabilities = client.check_compatible()
                token = homes.read_owner_token(self.home)
                machine = capabilities.get("machineId", "?")
                for team in client.subscribe(self.team_id, token):
                    if not isinstance(team, dict):
                        continue
                    self._post(Link("live", f"live from the daemon at {where} (machine {machine})"))
                    self._post(Snapshot(team))
            finally:
                with self._lock:
                    self._client = None
                client.close()
            if self._stopped.is_set():
                return 0
            self._post(Link("gone", "the daemon closed the connection"))
        except Unreachable as error:
            self._post(Link("gone", error.detail))
        except Uncertain as error:
            self._post(Link("gone", error.detail))
        except RemoteError as error:
            state = "incompatible" if error.code == INCOMPATIBLE else "refused"
            self._post(
                Link(state, error.detail if state == "incompatible" else f"{error.code}: {error.detail}")
            )
            return REFUSED_RETRY_SECONDS
        except OSError as error:  # the connection broke mid-frame: the same as the daemon going away
            self._post(Link("gone", str(error)))
        return RETRY_SECONDS

    def _poll_remote(self, machine: str) -> float:
        from harness.io.remote_client import WATCH_POLL, remote_snapshots

        self._post(Link("connecting", f"asking machine {machine} through this daemon's relay"))
        live = f"live from machine {machine} through the relay (a look every {WATCH_POLL:g} s)"
        for team in remote_snapshots(self.home, machine, self.team_id, stop=self._stopped):
            if isinstance(team, dict):
                self._post(Link("live", live))
                self._post(Snapshot(team))
        return RETRY_SECONDS


def _fetch(home: Path, socket: str | None, team_id: str) -> tuple[Any, dict[str, str]]:
    """One short connection: the team (`get`) and what the daemon's desk sees of the terminals of members on
    its machine. Raises ClientError like any call."""
    found, _ = locate_socket(home, socket)
    token = homes.read_owner_token(home)
    with Client(found) as client:
        capabilities = client.check_compatible()
        team = client.request("get", team_id=team_id, owner_token=token)
        observations: dict[str, str] = {}
        if not isinstance(team, dict):
            return team, observations
        for member in team.get("members", []):
            if member.get("state") != "active" or member.get("machineId") != capabilities.get("machineId"):
                continue
            try:
                shown = client.request(
                    "agent_show", owner_token=token, fields={"agentId": member.get("agentId")}
                )
            except RemoteError as error:  # not registered here (yet), or a daemon without the agent registry
                observations[member["id"]] = "not registered" if error.code == "not_found" else "-"
                continue
            delivery = shown.get("delivery") if isinstance(shown, dict) else None
            observed = delivery.get("observed") if isinstance(delivery, dict) else None
            observations[member["id"]] = str(observed) if observed else "not observed yet"
        return team, observations


def _fetch_board(home: Path, socket: str | None, team_id: str) -> Any:
    """One short connection: the team's board (`board_get`). Raises ClientError like any call."""
    found, _ = locate_socket(home, socket)
    with Client(found) as client:
        client.check_compatible()
        return client.request("board_get", team_id=team_id, owner_token=homes.read_owner_token(home))


def _names(team: dict[str, Any]) -> dict[str, str]:
    return {m["id"]: m["name"] for m in team.get("members", [])}


def _row(*cells: object) -> list[Text]:
    """One table row: each cell on one line, terminal-safe, as Text."""
    return [shown(one_line(cell)) for cell in cells]


def board_position(board: dict[str, Any]) -> tuple[int, int] | None:
    """Where a board stands: a newer generation (the team recreated) or revision replaces an older one."""
    generation, revision = board.get("generation"), board.get("revision")
    if not isinstance(generation, int) or not isinstance(revision, int):
        return None
    return generation, revision


def by_state(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks grouped by state in TASK_STATE_ORDER (an unknown state last), each group in board order."""
    rank = {state: n for n, state in enumerate(TASK_STATE_ORDER)}
    return sorted(tasks, key=lambda task: rank.get(str(task.get("state")), len(rank)))


def task_cells(task: dict[str, Any], tasks: dict[str, str], names: dict[str, str]) -> list[Text]:
    """One task row: state, title, who may claim it, its claimant, and what it comes after (by title)."""
    owner = task.get("owner")
    if not isinstance(owner, dict):
        may = "anyone"
    elif owner.get("kind") == "role":
        may = f"role:{owner.get('name')}"
    else:
        member = str(owner.get("name"))
        may = names.get(member, member)
    claimant = task.get("claimant")
    after = ", ".join(tasks.get(dep, dep) for dep in task.get("dependencies") or [])
    return _row(
        task.get("state", "?"),
        one_line(task.get("title") or "", EXCERPT_CHARS),
        may,
        "-" if claimant is None else names.get(claimant, claimant),
        one_line(after, EXCERPT_CHARS) or "-",
        task.get("id", "?"),
    )


def unconfirmed_notices(team: dict[str, Any], member_id: str) -> list[str]:
    """The team's notices to `member_id` whose delivery is unconfirmed (its introduction, questions to it,
    answers to its questions): the ones a crash may have left in its composer."""
    team_id = str(team.get("id"))
    found = [
        notice_id(team_id, member_id, NoticeKind.INTRODUCTION)
        for member in team.get("members", [])
        if member.get("id") == member_id and _unconfirmed(member.get("introduction"))
    ]
    for exchange in team.get("exchanges", []):
        if exchange.get("to") == member_id and _unconfirmed(exchange.get("delivery")):
            found.append(notice_id(team_id, exchange["id"], NoticeKind.QUESTION))
        if exchange.get("from") == member_id and _unconfirmed(exchange.get("answerDelivery")):
            found.append(notice_id(team_id, exchange["id"], NoticeKind.ANSWER))
    return found


def _unconfirmed(view: object) -> bool:
    return isinstance(view, dict) and view.get("state") == "unconfirmed"


def delivery_advice(exchange: dict[str, Any], leftovers: list[str]) -> list[str]:
    """What a person can do about the exchange's notice when its delivery needs one: an unconfirmed notice is
    inspected, then resolved by the owner; a crash leftover in the composer is submitted or cleared by a
    person. The daemon does neither by itself."""
    delivery = exchange.get("delivery")
    if not isinstance(delivery, dict):
        return []
    if delivery.get("state") == "unconfirmed":
        notice = exchange["id"]  # a question id names its question notice
        return [
            "The notice might have reached the terminal. Do not resend: check with "
            f"`status {exchange['id']}` or look at the teammate's terminal; "
            "the operation id stays the question id.",
            f"Owner: `inspect {notice}` looks for it in the agent's pane; then `resolve {notice} --landed`, "
            "or `--lost` to have it written once more (once, under a new write id).",
        ]
    if delivery.get("state") == "queued" and delivery.get("reason") == "leftover":
        which = ", ".join(leftovers) or "a notice of another team"
        return [
            f"Waiting on a leftover: the agent's composer holds {which}, pasted by a write that a crash "
            "cut off before its Enter. A person can submit it (Enter in the agent's pane) or clear it; the "
            "daemon touches neither."
        ]
    return []


def exchange_detail(
    exchange: dict[str, Any], names: dict[str, str], leftovers: list[str] | None = None
) -> Text:
    """The selected exchange in full, one `shown` piece per line: the words are the agents'."""
    who = f"{names.get(exchange['from'], exchange['from'])} -> {names.get(exchange['to'], exchange['to'])}"
    lines: list[Text] = [
        shown(f"Question {exchange['id']}", style="bold"),
        shown(
            f"{who}   asked {clock(exchange.get('createdAt'))}, deadline {clock(exchange.get('deadlineAt'))}"
        ),
        Text.assemble(
            shown("question: ", style="bold"),
            shown(f"{exchange['state']}      "),
            shown("delivery: ", style="bold"),
            shown(delivery_text(exchange.get("delivery"))),
        ),
    ]
    lines += [shown(advice, style="yellow") for advice in delivery_advice(exchange, leftovers or [])]
    lines += [Text(), shown(quoted(exchange.get("text", "")), block=True)]
    if exchange.get("context"):
        lines += [
            Text(),
            shown("context:", style="bold"),
            shown(quoted(exchange["context"]), block=True),
        ]
    answer = exchange.get("answer")
    if isinstance(answer, dict):
        author = names.get(answer.get("author", ""), answer.get("author", "?"))
        late = " (late)" if answer.get("late") else ""
        lines += [
            Text(),
            shown(f"answer by {author} at {clock(answer.get('at'))}{late}", style="bold green"),
            shown(quoted(answer.get("text", "")), block=True),
        ]
        lines += [
            Text.assemble(shown("evidence: ", style="bold"), shown(ref))
            for ref in answer.get("evidence") or []
        ]
    else:
        lines += [Text(), shown("no answer yet", style="dim")]
    return Text("\n").join(lines)


class WatchApp(App[None]):
    """The view. `subscribe=False` leaves the feed to the caller (tests post Snapshot messages)."""

    TITLE = "harness watch"
    # Textual reads this list from the class; mypy takes its base annotation, hence no ClassVar here.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # noqa: RUF012
    CSS = """
    #title { height: 1; text-style: bold; padding: 0 1; }
    #link { height: auto; max-height: 3; padding: 0 1; }
    #link.-live { color: $success; }
    #link.-gone, #link.-refused { color: $error; }
    #link.-incompatible { color: $warning; }
    #body { height: 1fr; }
    #lists { width: 3fr; }
    #detail { width: 2fr; border-left: solid $panel; padding: 0 1; }
    .heading { height: 1; padding: 0 1; text-style: bold; color: $text-muted; }
    #roster { height: auto; max-height: 12; }
    #exchanges { height: 1fr; }
    #tasks { height: auto; max-height: 10; }
    .-narrow #body { layout: vertical; }
    .-narrow #lists { width: 1fr; height: 1fr; }
    .-narrow #detail { width: 1fr; height: 1fr; border-left: none; border-top: solid $panel; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "down", "Select", key_display="j/k ↑/↓"),
        Binding("k", "up", "Up", show=False),
        Binding("down", "down", "Down", show=False),
        Binding("up", "up", "Up", show=False),
        Binding("r", "refresh", "Refresh"),
        Binding("pagedown", "detail_down", "Scroll text", show=False),
        Binding("pageup", "detail_up", "Scroll text", show=False),
        Binding("q", "quit", "Quit", priority=True),
        Binding("escape", "quit", "Close", priority=True),
    ]

    def __init__(
        self,
        home: Path,
        team_id: str,
        daemon_socket: str | None = None,
        *,
        machine: str | None = None,
        subscribe: bool = True,
    ) -> None:
        super().__init__()
        self.home = home
        self.team_id = team_id
        self.daemon_socket = daemon_socket
        self.machine = machine  # a team owned by this paired machine; its terminals are not observed here
        self.team: dict[str, Any] | None = None
        self.revision = -1
        self.selected: str | None = None
        self.link = "connecting"
        self.observations: dict[str, str] = {}
        self.board: dict[str, Any] | None = None
        self.board_detail = "not read yet"  # why no board is shown, while none is
        self._subscriber = (
            Subscriber(home, team_id, daemon_socket, self.post_message, machine) if subscribe else None
        )

    def compose(self) -> ComposeResult:
        yield Static(shown(f"team {self.team_id}"), id="title")
        yield Static("connecting to the daemon…", id="link")
        with Horizontal(id="body"):
            with Vertical(id="lists"):
                yield Static("Roster", classes="heading")
                yield DataTable(id="roster", cursor_type="none", zebra_stripes=True)
                yield Static("Exchanges (newest first)", classes="heading")
                yield DataTable(id="exchanges", cursor_type="row", zebra_stripes=True)
                yield Static("Board", id="board-heading", classes="heading")
                yield DataTable(id="tasks", cursor_type="none", zebra_stripes=True)
            with VerticalScroll(id="detail"):
                yield Static("no exchange selected", id="detail-text")
        yield Footer()

    def on_mount(self) -> None:
        roster = self.query_one("#roster", DataTable)
        roster.can_focus = False
        roster.add_columns("name", "member", "terminal", "role", "introduction", "notes", "agent")
        tasks = self.query_one("#tasks", DataTable)
        tasks.can_focus = False
        tasks.add_columns("task", "title", "owner", "claimant", "after", "id")
        exchanges = self.query_one("#exchanges", DataTable)
        exchanges.add_columns("question", "delivery", "from -> to", "text", "id")
        self.query_one("#detail", VerticalScroll).can_focus = False
        exchanges.focus()
        if self._subscriber is not None:
            self.run_worker(self._subscriber.run, thread=True, exit_on_error=False, name="subscribe")
            self.set_interval(OBSERVE_SECONDS, self._observe_later)
            self.set_interval(BOARD_SECONDS, self._look_at_board_later)

    def on_unmount(self) -> None:
        if self._subscriber is not None:
            self._subscriber.stop()

    # --- the feed -------------------------------------------------------------------------------------------
    # Messages queued just before the view closes can arrive after its widgets are gone (NoMatches); by then
    # they no longer matter, so the handlers drop them.

    def on_snapshot(self, message: Snapshot) -> None:
        team = message.team
        revision = team.get("revision")
        if team.get("id") != self.team_id or not isinstance(revision, int) or revision <= self.revision:
            return  # an older (or the same) revision never replaces what is shown
        self.team, self.revision = team, revision
        with suppress(NoMatches):
            self._render_team()
        self._observe_later()
        self._look_at_board_later()

    def on_board_snapshot(self, message: BoardSnapshot) -> None:
        board = message.board
        if board is None:
            self.board_detail = message.detail
        else:
            position = board_position(board)
            shown_at = None if self.board is None else board_position(self.board)
            if board.get("teamId") != self.team_id or position is None:
                return
            if shown_at is not None and position <= shown_at:
                return  # an older (or the same) board never replaces what is shown
            self.board = board
        with suppress(NoMatches):
            self._render_board()
            if self.team is not None:
                self._render_roster(self.team)

    def on_link(self, message: Link) -> None:
        self.link = message.state
        with suppress(NoMatches):
            self._render_link(message)

    def _render_link(self, message: Link) -> None:
        widget = self.query_one("#link", Static)
        for state in ("connecting", "live", "gone", "incompatible", "refused"):
            widget.set_class(state == message.state, f"-{state}")
        last = self.revision if self.team is not None else None
        text = {
            "connecting": message.detail,
            "live": message.detail,
            "gone": f"daemon not reachable: {message.detail}; showing revision {last}, reconnecting…",
            "incompatible": f"the daemon is too old for this client: {message.detail}",
            "refused": f"the daemon refused the subscription: {message.detail}",
        }[message.state]
        widget.update(shown(text))
        self._render_title()

    def on_observed(self, message: Observed) -> None:
        self.observations = message.observations
        if self.team is not None:
            with suppress(NoMatches):
                self._render_roster(self.team)

    def _observe_later(self) -> None:
        if self._subscriber is not None and self.link == "live" and self.machine is None:
            self._observe()

    @work(thread=True, exclusive=True, group="observe", exit_on_error=False)
    def _observe(self) -> None:
        try:
            _, observations = _fetch(self.home, self.daemon_socket, self.team_id)
        except ClientError:
            return  # the subscriber reports the daemon's state; observations simply stay as they were
        self.post_message(Observed(observations))

    def _look_at_board_later(self) -> None:
        if self._subscriber is None or self.link != "live":
            return
        if self.machine is not None:  # `board_get` is not an observation a paired machine may make
            self.post_message(
                BoardSnapshot(None, f"the board of machine {self.machine}'s team is not shown here")
            )
            return
        self._look_at_board()

    @work(thread=True, exclusive=True, group="board", exit_on_error=False)
    def _look_at_board(self) -> None:
        try:
            board = _fetch_board(self.home, self.daemon_socket, self.team_id)
        except RemoteError as error:
            self.post_message(BoardSnapshot(None, f"{error.code}: {error.detail}"))
            return
        except ClientError:
            return  # the subscriber reports the daemon's state; the board stays as it was
        if isinstance(board, dict):
            self.post_message(BoardSnapshot(board))

    @work(thread=True, exclusive=True, group="refresh", exit_on_error=False)
    def _refresh(self) -> None:
        try:
            observations: dict[str, str] = {}
            if self.machine is not None:
                from harness.io.remote_client import call_remote

                team = call_remote(self.home, self.machine, "get", team_id=self.team_id)
            else:
                team, observations = _fetch(self.home, self.daemon_socket, self.team_id)
        except RemoteError as error:
            state = "incompatible" if error.code == INCOMPATIBLE else "refused"
            self.post_message(Link(state, error.detail))
            return
        except ClientError as error:
            self.post_message(Link("gone", error.detail))
            return
        if isinstance(team, dict):
            self.post_message(Snapshot(team))
        self.post_message(Observed(observations))

    # --- rendering ------------------------------------------------------------------------------------------

    def _render_title(self) -> None:
        title = self.query_one("#title", Static)
        if self.team is None:
            title.update(shown(f"team {self.team_id} (nothing received yet)"))
            return
        stale = "" if self.link == "live" else "  [last known]"
        team = self.team
        title.update(
            shown(f"{team['name']}  {team['id']}  {team['state']}  revision {team['revision']}{stale}")
        )

    def _render_team(self) -> None:
        assert self.team is not None
        self._render_title()
        self._render_roster(self.team)
        self._render_exchanges(self.team)
        self._render_board()

    def _unread(self) -> dict[str, int]:
        """Each member's unread notes, by membership id, from the board shown."""
        members = self.board.get("members", []) if self.board is not None else []
        return {m["id"]: m["unread"] for m in members if isinstance(m.get("unread"), int)}

    def _render_board(self) -> None:
        heading = self.query_one("#board-heading", Static)
        table = self.query_one("#tasks", DataTable)
        table.clear()
        board = self.board
        if board is None:
            heading.update(shown(f"Board: {self.board_detail}"))
            return
        tasks = board.get("tasks", [])
        notes = board.get("notes", 0)
        heading.update(shown(f"Board (revision {board.get('revision')}): {len(tasks)} tasks, {notes} notes"))
        titles = {t["id"]: one_line(t.get("title") or t["id"], EXCERPT_CHARS // 4) for t in tasks}
        names = _names(self.team) if self.team is not None else {}
        for task in by_state(tasks):
            table.add_row(*task_cells(task, titles, names), key=task["id"])

    def _render_roster(self, team: dict[str, Any]) -> None:
        roster = self.query_one("#roster", DataTable)
        roster.clear()
        unread = self._unread()
        for member in team.get("members", []):
            roster.add_row(
                *_row(
                    member["name"],
                    member["state"],
                    self.observations.get(member["id"], "-"),
                    one_line(member.get("role") or "", EXCERPT_CHARS) or "-",
                    delivery_text(member.get("introduction")),
                    unread.get(member["id"], "-"),
                    f"{member['machineId']}/{member['agentId']}",
                ),
                key=member["id"],
            )

    def _render_exchanges(self, team: dict[str, Any]) -> None:
        table = self.query_one("#exchanges", DataTable)
        names = _names(team)
        exchanges = list(reversed(team.get("exchanges", [])))
        keep = self.selected
        table.clear()
        for e in exchanges:
            table.add_row(
                *_row(
                    e["state"],
                    delivery_text(e.get("delivery")),
                    f"{names.get(e['from'], e['from'])} -> {names.get(e['to'], e['to'])}",
                    one_line(e.get("text") or "", EXCERPT_CHARS),
                    e["id"],
                ),
                key=e["id"],
            )
        ids = [e["id"] for e in exchanges]
        if keep in ids:
            table.move_cursor(row=ids.index(keep), animate=False)
        elif ids:
            self.selected = ids[0]
        self._render_detail()

    def _render_detail(self) -> None:
        widget = self.query_one("#detail-text", Static)
        team = self.team
        chosen = None
        if team is not None:
            chosen = next((e for e in team.get("exchanges", []) if e["id"] == self.selected), None)
        if team is None or chosen is None:
            widget.update("no exchange selected")
            return
        widget.update(exchange_detail(chosen, _names(team), unconfirmed_notices(team, chosen["to"])))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "exchanges" or event.row_key.value is None:
            return
        with suppress(NoMatches):
            if event.row_key.value != self.selected:
                self.selected = event.row_key.value
                self.query_one("#detail", VerticalScroll).scroll_home(animate=False)
            self._render_detail()

    # --- keys -----------------------------------------------------------------------------------------------

    def action_down(self) -> None:
        self.query_one("#exchanges", DataTable).action_cursor_down()

    def action_up(self) -> None:
        self.query_one("#exchanges", DataTable).action_cursor_up()

    def action_detail_down(self) -> None:
        self.query_one("#detail", VerticalScroll).scroll_page_down()

    def action_detail_up(self) -> None:
        self.query_one("#detail", VerticalScroll).scroll_page_up()

    def action_refresh(self) -> None:
        if self._subscriber is not None:
            self._subscriber.retry_now()
        self._refresh()

    async def action_quit(self) -> None:
        self.exit()


def run_watch(home: Path, team_id: str, daemon_socket: str | None, machine: str | None = None) -> None:
    WatchApp(home, team_id, daemon_socket, machine=machine).run()
