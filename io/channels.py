# Tab channels in the daemon (spec/channels-v1.md): the setting on disk, the look at which tmux window each
# registered engine agent's pane is in, and the keeper that applies core/channels.py's plan through the
# daemon's own `team` actions, with owner authority, so a channel team is an ordinary team: same ledger,
# introductions, keys, board and trace. Each agent's server is asked on the agent's own socket (`-L`/`-S` as
# registered) and never any other: panes the user did not register are not looked at.
from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from harness.core import channels as ch
from harness.core.limits import Limits
from harness.core.records import Ledger
from harness.io.agents import AgentEntry, AgentRegistry
from harness.io.channel_setting import SettingError, read_setting
from harness.io.rpc import BAD_REQUEST, FrameError, Request
from harness.io.team_access import ActionError, Handler
from harness.io.tmux import LOOK_SECONDS, ProcessRunner, TmuxError

PERIOD_SECONDS = 1.0  # how often the keeper looks at the windows while channels are on
# One line per pane; the session name comes last since it is the one field that may hold a tab.
PANE_FIELDS = (
    "pane_id",
    "pane_dead",
    "session_id",
    "window_id",
    "window_index",
    "pane_index",
    "session_name",
)
PANE_FORMAT = "\t".join(f"#{{{name}}}" for name in PANE_FIELDS)
# What tmux says when the server or its socket is not there: every pane of it is gone, not unseen.
_NO_SERVER = ("no server running", "error connecting to", "No such file or directory")


# --- the look ---------------------------------------------------------------------------------------------


async def observe(entries: tuple[AgentEntry, ...]) -> ch.Observation:
    """Where each engine agent's pane is: one `list-panes -a` per server the agents are registered on.
    Inbox-only agents are plain shells, never engines, and take no part in channels."""
    by_socket: dict[str, list[AgentEntry]] = {}
    for entry in entries:
        if not entry.inbox_only:
            by_socket.setdefault(entry.tmux.socket, []).append(entry)
    panes: dict[str, ch.PaneAt] = {}
    unseen: set[str] = set()

    async def look_at(socket: str, agents: list[AgentEntry]) -> None:
        try:
            runner = ProcessRunner(socket, deadline=LOOK_SECONDS)
            lines = await runner.run("list-panes", "-a", "-F", PANE_FORMAT)
        except TmuxError as error:
            if not any(sign in str(error) for sign in _NO_SERVER):
                unseen.update(entry.agent_id for entry in agents)
            return
        windows = _windows(socket, lines)
        for entry in agents:
            window = windows.get(entry.tmux.target)
            if window is not None:
                panes[entry.agent_id] = ch.PaneAt(entry.name, window)

    async with trio.open_nursery() as nursery:  # each server apart: a stuck one holds up none of the others
        for socket, agents in sorted(by_socket.items()):
            nursery.start_soon(look_at, socket, agents)
    return ch.Observation(panes, frozenset(unseen))


def _windows(socket: str, lines: list[str]) -> dict[str, ch.Window]:
    """Pane target (`%ID` and `session:window.pane`) -> its window, for the live panes of one server. A
    window linked into several sessions counts in the first session that lists it."""
    found: dict[str, ch.Window] = {}
    for line in lines:
        fields = line.split("\t", len(PANE_FIELDS) - 1)
        if len(fields) != len(PANE_FIELDS) or fields[1] == "1":  # unparsable, or dead (its program exited)
            continue
        pane_id, _dead, session_id, window_id, window_index, pane_index, session_name = fields
        window = ch.Window(socket, session_id, window_id, f"{session_name}:{window_index}")
        found.setdefault(pane_id, window)
        found.setdefault(f"{session_name}:{window_index}.{pane_index}", window)
    return found


# --- the keeper -------------------------------------------------------------------------------------------


class ChannelKeeper:
    """Makes the channel teams follow the windows: a pass every PERIOD_SECONDS, reading the setting each
    time (`harness channels enable|disable` only writes it), so a disable made while the daemon was down
    archives at its first pass. What a pass could not do is logged once, and retried by the next."""

    def __init__(
        self,
        home: Path,
        machine_id: str,
        agents: AgentRegistry,
        ledger: Callable[[], Ledger],
        *,
        actions: Mapping[str, Handler],
        limits: Limits,
        log: Callable[[str], None],
        period: float = PERIOD_SECONDS,
    ) -> None:
        self.home = home
        self.machine_id = machine_id
        self._agents = agents
        self._ledger = ledger
        self._actions = actions  # the daemon's `team` actions, called as the owner
        self._limits = limits
        self._log = log
        self._period = period
        self._problems: dict[str, str] = {}  # what the last pass could not do, by team or agent id

    async def run(self) -> None:
        while True:
            await self.sync()
            await trio.sleep(self._period)

    async def sync(self) -> None:
        """One pass: read the setting, look (only while on), apply the plan."""
        try:
            setting = read_setting(self.home)
        except SettingError as error:
            self._report({"setting": str(error)})
            return
        if setting.enabled and self._agents.unavailable is not None:  # not an empty machine: wait for repair
            self._report({"registry": f"{ch.Refusal.CORRUPT_SETTING}: {self._agents.unavailable}"})
            return
        observation = await observe(self._agents.entries()) if setting.enabled else ch.Observation({})
        problems = {
            agent_id: f"{ch.Refusal.UNSEEN}: agent {agent_id}: tmux did not answer; its memberships are kept"
            for agent_id in observation.unseen
        }
        teams = self._ledger().teams
        for team_id in ch.roomless(setting, teams, observation, self._limits):
            problems[team_id] = (
                f"{ch.Refusal.NO_ROOM}: no channel for window {team_id}: channels hold at most "
                f"{self._limits.teams // 2} of the owner's {self._limits.teams} teams, archived ones "
                "included; `harness team --team ID delete` (daemon stopped) frees an archived one's place"
            )
        for operation in ch.plan(setting, teams, observation, self._limits):
            try:
                await self._apply(operation)
            except ActionError as error:
                what = f"{type(operation).__name__} {operation.team_id}: {error.code}: {error.detail}"
                problems[operation.team_id] = f"{ch.Refusal.APPLY_FAILED}: {what}"
            except FrameError as error:  # a field the action refused (a name tmux gave us, say)
                what = f"{type(operation).__name__} {operation.team_id}: {BAD_REQUEST}: {error.detail}"
                problems[operation.team_id] = f"{ch.Refusal.APPLY_FAILED}: {what}"
        self._report(problems)

    def _report(self, problems: dict[str, str]) -> None:
        """Log each problem when it first shows (a pass repeats them every second)."""
        for key, problem in sorted(problems.items()):
            if self._problems.get(key) != problem:
                self._log(f"channels: {problem}")
        self._problems = problems

    async def _apply(self, operation: ch.Operation) -> None:
        if isinstance(operation, ch.CreateChannel):
            members = [self._member(joiner) for joiner in operation.members]
            fields = {"id": operation.team_id, "name": operation.name, "members": members}
            await self._act("create", None, fields)
        elif isinstance(operation, ch.JoinChannel):
            await self._act("add", operation.team_id, self._member(operation.member))
        elif isinstance(operation, ch.LeaveChannel):
            await self._act("remove", operation.team_id, {"memberId": operation.membership_id})
        else:
            await self._act("archive", operation.team_id, {})

    def _member(self, joiner: ch.Joiner) -> dict[str, str]:
        return {
            "id": joiner.membership_id,
            "machineId": self.machine_id,
            "agentId": joiner.agent_id,
            "name": joiner.name,
            "role": ch.ROLE,
        }

    async def _act(self, action: str, team_id: str | None, fields: dict[str, Any]) -> None:
        request = Request(secrets.token_hex(8), action, team_id, None, None, fields)
        await self._actions[action](request)
