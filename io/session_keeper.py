# Coordination sessions hosted by the daemon (issue 21, spec/session-v1.md section 9), so a session outlives
# the shell that ran it and the daemon's own crashes: `harness session run` leaves the session's plan in its
# private directory and then only follows its status; the keeper, a task of the daemon like the ChannelKeeper,
# finds each plan not yet hosted and runs it (io/session_runner.py) with the daemon's own `team` actions as
# the owner. A session the daemon was running when it died is taken up again at its next start from the
# session's journal: the reducer's inputs were durable before any of their effects, so nothing is done twice.
from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core import session as s
from harness.core.bounded_json import parse_own
from harness.io import home as homes
from harness.io import session_files
from harness.io import session_runner as runner
from harness.io.client import RemoteError
from harness.io.profiles import is_plain_shell
from harness.io.redaction_env import from_environment
from harness.io.rpc import BAD_REQUEST, FrameError, Request
from harness.io.team_access import ActionError, Handler
from harness.io.terminal_port import Screen
from harness.io.tmux import pane_foreground
from harness.io.trace import TraceWriter
from harness.io.trace_files import session_trace_dir

PERIOD_SECONDS = 1.0  # how often the keeper looks for a plan to host
PLAN_BYTES = 64_000  # a plan holds a brief of at most 6,000 characters and a few names
OWNER_WIDE = frozenset({"create", "agent_show"})  # the actions that name no team
DONE_FILE = "done"  # left once the session ended and its calls are closed: no daemon hosts it again
FAILED_FILE = "failed.json"  # why the session could not run ({error, detail}); `session run` reports it


class PlanError(Exception):
    """A plan file that is not one `harness session run` writes; the session is not hosted."""


def write_plan(home: Path, plan: runner.SessionPlan) -> None:
    """Hand the daemon a session to host (0600, atomically, in the session's private directory)."""
    directory = session_files.session_dir(home, plan.session_id)
    directory.mkdir(parents=True, exist_ok=True, mode=homes.PRIVATE_DIR_MODE)
    homes.write_private_json(directory / runner.PLAN_FILE, plan_view(plan))


def plan_view(plan: runner.SessionPlan) -> dict[str, Any]:
    return {
        "sessionId": plan.session_id,
        "mode": str(plan.mode),
        "seats": [{"name": seat.name, "agentId": seat.agent_id} for seat in plan.seats()],
        "brief": plan.brief,
        "machineId": plan.machine_id,
        "limits": attrs.asdict(plan.limits),
    }


def read_plan(home: Path, session_id: str) -> runner.SessionPlan:
    path = session_files.session_dir(home, session_id) / runner.PLAN_FILE
    try:
        raw = _read_regular(path, PLAN_BYTES + 1)
        if len(raw) > PLAN_BYTES:
            raise ValueError(f"larger than {PLAN_BYTES} bytes")
        data = parse_own(raw)
        seats = tuple(runner.Seat(str(seat["name"]), str(seat["agentId"])) for seat in data["seats"])
        limits = s.SessionLimits(**{key: int(value) for key, value in data["limits"].items()})
        if data["sessionId"] != session_id or not seats:
            raise ValueError("not this session's plan")
        mode = s.Mode(data["mode"])
        return runner.SessionPlan(
            session_id, mode, seats[0], seats[1:], str(data["brief"]), str(data["machineId"]), limits
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PlanError(f"{path}: {error}") from None


def _read_regular(path: Path, most: int) -> bytes:
    """At most `most` bytes of a regular file; anything else (a FIFO put in its place) is refused without
    waiting on it, since the keeper runs in the daemon's loop."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return os.read(fd, most)
    finally:
        os.close(fd)


def hosted(home: Path, session_id: str) -> bool:
    """Whether the session still needs its host: a plan, and not finished (ended, its calls closed)."""
    directory = session_files.session_dir(home, session_id)
    finished = (directory / DONE_FILE).exists() or (directory / FAILED_FILE).exists()
    return (directory / runner.PLAN_FILE).is_file() and not finished


class SessionKeeper:
    """Hosts every session of the data directory that has a plan and has not finished, one task each. A
    session whose task failed is logged and left alone until the daemon's next start."""

    def __init__(
        self,
        home: Path,
        actions: Mapping[str, Handler],
        *,
        log: Callable[[str], None],
        screen: Callable[[str], Awaitable[Screen]] | None = None,
        period: float = PERIOD_SECONDS,
    ) -> None:
        self.home = home
        self._actions = actions  # the daemon's `team` actions, called as the owner
        self._screen = screen  # agent id -> its terminal now, from the daemon's desk: the lead's turns
        self._log = log
        self._period = period
        self._taken: set[str] = set()  # sessions this daemon run has hosted (or failed to)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                for session_id in session_files.sessions(self.home):
                    if session_id not in self._taken and hosted(self.home, session_id):
                        self._taken.add(session_id)
                        nursery.start_soon(self._host, session_id)
                await trio.sleep(self._period)

    async def _host(self, session_id: str) -> None:
        try:
            plan = read_plan(self.home, session_id)
            redactor = from_environment(self.home)
            writer = await TraceWriter.open(session_trace_dir(self.home, session_id), redactor)
            try:
                made = runner.SessionRunner(
                    plan,
                    self.home,
                    self._owner_call(session_id),
                    writer,
                    alive=self._alive(plan),
                    redactor=redactor,
                    look=self._looks(plan),
                )
                journaled = (made.directory / runner.JOURNAL_FILE).exists()
                await (made.resume() if journaled else made.start())
                ended = await made.run()
                await trio.to_thread.run_sync(homes.write_private_text, made.directory / DONE_FILE, "done\n")
            finally:
                with trio.CancelScope(shield=True):  # a daemon stopping still flushes what was traced
                    await writer.aclose()
        except Exception as error:  # one session's failure is its own: the daemon and other sessions go on
            code = error.code if isinstance(error, RemoteError) else BAD_REQUEST
            detail = error.detail if isinstance(error, RemoteError) else str(error)
            self._log(f"session {session_id}: {type(error).__name__}: {code}: {detail}")
            failure = {"error": code, "detail": f"session {session_id} could not run: {detail}"}
            directory = session_files.session_dir(self.home, session_id)
            await trio.to_thread.run_sync(homes.write_private_json, directory / FAILED_FILE, failure)
            return
        self._log(f"session {session_id}: {ended.termination} ({ended.reason})")

    def _owner_call(self, session_id: str) -> runner.OwnerCall:
        async def call(action: str, fields: dict[str, Any]) -> Any:
            team = None if action in OWNER_WIDE else session_id
            request = Request(secrets.token_hex(8), action, team, None, None, fields)
            try:
                return await self._actions[action](request)
            except ActionError as error:
                raise RemoteError(error.code, error.detail, error.operation_id, error.bound) from None
            except FrameError as error:
                raise RemoteError(BAD_REQUEST, error.detail) from None

        return call

    def _looks(self, plan: runner.SessionPlan) -> Callable[[str], Awaitable[str]] | None:
        screen = self._screen
        if screen is None:
            return None
        agents = {seat.name: seat.agent_id for seat in plan.seats()}

        async def look(name: str) -> str:
            return str((await screen(agents[name])).state)

        return look

    def _alive(self, plan: runner.SessionPlan) -> Callable[[str], Awaitable[bool]]:
        """Whether a member's engine still runs: an engine that exited leaves a dead pane, no pane, or (in an
        attached pane) its shell."""
        agents = {seat.name: seat.agent_id for seat in plan.seats()}
        call = self._owner_call(plan.session_id)

        async def alive(name: str) -> bool:
            try:
                shown = await call("agent_show", {"agentId": agents[name]})
            except RemoteError:
                return False
            tmux = shown.get("tmux") or {}
            command = await pane_foreground(str(tmux.get("socket")), str(tmux.get("target")))
            return command is not None and not is_plain_shell(command)

        return alive
