# tmux as the terminal substrate, spoken from trio. One long-lived control-mode client per tmux server
# (`tmux -C attach -f no-output,ignore-size`) carries every command as one line and reads its answer between
# `%begin`/`%end` (or `%error`): ~0.2 ms a command where a tmux process per command costs milliseconds, which
# matters when the desk polls many panes. A process per command (`ProcessRunner`) stays for what needs no
# session yet (creating one) and as the benchmark's baseline.
#
# `TmuxTerminals` implements the desk runner's `Terminals` port on top: capture + engine profile = a Screen;
# an idle screen counts only once it held still (after an attach, or after a person's draft left the
# composer); a write looks once more right before it pastes and hands that look to the desk's licence, pastes
# once (load-buffer + bracketed paste-buffer; one line of text, unbracketed, for an engine whose profile says
# it knows no bracketed paste), presses Enter once as its own key, and confirms the submit from the screen.
# It never sends interrupt or cancel keys and never clears, edits or submits a draft that is not exactly its
# own notice. Every look also checks what would read a paste: tmux's name for the pane's foreground program,
# and the processes of the pane's foreground and below it (io/pane_processes.py: a shell under `script` or
# renamed by `exec -a` fools the name). While a plain shell is there, or /proc cannot tell, the pane reads
# offline, so no paste and no Enter reaches it (an agent program may exit back to its shell after
# registration); an inbox-only agent is never looked at or written to.
from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, Self

import attrs
import trio

from harness.core.terminal_text import is_terminal_safe
from harness.io.pane_processes import ProcessesUnseen, plain_shell_below
from harness.io.profiles import (
    NoticeInput,
    Observation,
    PaneInfo,
    classify,
    draft_is,
    is_plain_shell,
    needle,
    notice_as_typed,
    parse_capture,
    profile_for,
    squash,
    turn_shows,
)
from harness.io.terminal_port import Licence, Screen, ScreenState, WriteOutcome

if TYPE_CHECKING:  # the registry asks this module about panes; this module only reads its entries
    from harness.io.agents import AgentRegistry

TMUX = "tmux"
PANE_FORMAT = (
    "#{pane_id} #{pane_dead} #{pane_pid} #{cursor_y} #{pane_width} #{pane_tty} #{pane_current_command}"
)
HISTORY_LINES = 200  # scrollback looked at when recognising a turn (a long turn scrolls the notice away)


# How long a tmux command may take before its server counts as not answering. A stopped or hung server (an
# agent's process can stop the server its pane is in) once held the channels keeper, `agent list` and the
# desk's looks for as long as it stayed so. Generous: a loaded machine answers well within it.
ANSWER_SECONDS: Final = 20.0
# For a look that is read again soon (the channels keeper's pass, `agent list`): a server that has not
# answered by then shows its agents unseen or offline this time.
LOOK_SECONDS: Final = 5.0


class TmuxError(Exception):
    """tmux answered with an error (the command did not run), or could not be reached at all."""


class TmuxLost(TmuxError):
    """The connection to tmux broke after the command was sent: it may or may not have run."""


class UnsafeText(TmuxError):
    """The buffer holds a byte a terminal would read as a key or a screen command: nothing was sent."""


def server_args(socket: str) -> list[str]:
    """`-S PATH` for a socket path, `-L NAME` for a socket name."""
    return ["-S", socket] if "/" in socket else ["-L", socket]


def quote(arg: str) -> str:
    """One argument for tmux's command parser (single quotes: no expansion of `$`, `~`, `#`, `;`). A line
    break would end the command in control mode, so text with one goes through a buffer file instead."""
    if "\n" in arg or "\r" in arg:
        raise ValueError("a tmux argument cannot hold a line break")
    return "'" + arg.replace("'", "'\\''") + "'"


def literal(arg: str) -> str:
    """`arg` as one argument of a tmux command line (argv, not control mode): tmux takes an argument that
    ends in `;` for a command separator, even after `--` (a review ran `run-shell` through an engine
    argument ending in `;`), so that `;` is escaped."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def literal_format(arg: str) -> str:
    """`arg` for an option tmux expands as a format (`-c`): `#` doubled, so `#(command)` in a directory's
    name runs nothing (a review ran `id` from a checkout named `#(id >PWNED)`)."""
    return literal(arg.replace("#", "##"))


class Runner(Protocol):
    async def run(self, *args: str) -> list[str]:
        """Run one tmux command; its output lines. Raises TmuxError, or TmuxLost when it may have run."""
        ...

    async def aclose(self) -> None: ...


class ProcessRunner:
    """A tmux process per command; one that has not answered within `deadline` seconds is killed and the
    command is a TmuxError (these commands read, or act where a retry is harmless)."""

    def __init__(self, socket: str, *, tmux: str = TMUX, deadline: float = ANSWER_SECONDS) -> None:
        self.argv = [tmux, *server_args(socket)]
        self.deadline = deadline

    async def run(self, *args: str) -> list[str]:
        with trio.move_on_after(self.deadline) as waited:
            try:
                done = await trio.run_process(
                    [*self.argv, *map(literal, args)], capture_stdout=True, capture_stderr=True, check=False
                )
            except OSError as error:
                raise TmuxError(f"cannot run tmux: {error}") from None
        if waited.cancelled_caught:
            raise TmuxError(f"tmux did not answer {args[0]} within {self.deadline:g} s")
        if done.returncode != 0:
            raise TmuxError(done.stderr.decode(errors="replace").strip() or f"tmux exit {done.returncode}")
        return done.stdout.decode(errors="replace").splitlines()

    async def aclose(self) -> None:
        return None


class _Eof(Exception):
    pass


class ControlRunner:
    """One control-mode client, opened on first use and reopened when it went away. Commands are serialized;
    answers are matched to them in order (blocks flagged 0 are tmux's own, e.g. the attach's)."""

    def __init__(
        self, socket: str, *, tmux: str = TMUX, session: str | None = None, deadline: float = ANSWER_SECONDS
    ) -> None:
        self.argv = [tmux, *server_args(socket), "-C", "attach-session", "-f", "no-output,ignore-size"]
        if session is not None:
            self.argv += ["-t", session]
        self.deadline = deadline
        self._process: trio.Process | None = None
        self._pending = bytearray()
        self._lock = trio.Lock()

    async def _open(self) -> trio.Process:
        await self._close()
        try:
            process = await trio.lowlevel.open_process(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError as error:
            raise TmuxError(f"cannot run tmux: {error}") from None
        self._process = process
        self._pending.clear()
        return process

    async def _close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            if process.stdin is not None:
                await process.stdin.send_all(b"\n")  # an empty line detaches a control client
                await process.stdin.aclose()
        with trio.move_on_after(2):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()

    async def aclose(self) -> None:
        async with self._lock:
            await self._close()

    async def _line(self, process: trio.Process) -> str:
        assert process.stdout is not None
        while True:
            end = self._pending.find(b"\n")
            if end >= 0:
                line = bytes(self._pending[:end])
                del self._pending[: end + 1]
                return line.decode(errors="replace")
            chunk = await process.stdout.receive_some(65536)
            if not chunk:
                raise _Eof
            self._pending += chunk

    async def run(self, *args: str) -> list[str]:
        """The command's answer. One not answered within `deadline` seconds is TmuxLost (it may have run: a
        paste is then uncertain, never repeated), and the client is closed (killed if it lingers)."""
        command = (" ".join(quote(arg) for arg in args) + "\n").encode()
        async with self._lock:
            with trio.move_on_after(self.deadline):
                return await self._run(command, args[0])
            await self._close()
            raise TmuxLost(f"tmux did not answer {args[0]} within {self.deadline:g} s")

    async def _run(self, command: bytes, name: str) -> list[str]:
        process = self._process
        if process is None or process.returncode is not None:
            process = await self._open()
        assert process.stdin is not None
        try:
            await process.stdin.send_all(command)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            process = await self._open()  # nothing was sent: trying again on a fresh client is safe
            assert process.stdin is not None
            try:
                await process.stdin.send_all(command)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise TmuxError(f"tmux ({' '.join(self.argv)}) is not reachable") from None
        try:
            return await self._answer(process)
        except _Eof:
            await self._close()
            raise TmuxLost(f"tmux went away while running {name}") from None

    async def _answer(self, process: trio.Process) -> list[str]:
        while True:
            line = await self._line(process)
            if not line.startswith("%begin "):
                continue  # a notification
            _, stamp, number, flags = [*line.split(" "), "", "", ""][:4]
            output: list[str] = []
            while True:
                line = await self._line(process)
                if line in (f"%end {stamp} {number} {flags}", f"%error {stamp} {number} {flags}"):
                    break
                output.append(line)
            if flags == "0":
                continue  # tmux's own block, not an answer to us
            if line.startswith("%error"):
                raise TmuxError("\n".join(output) or "tmux error")
            return output


# --- sessions we own ----------------------------------------------------------------------------------------


async def new_session(
    socket: str,
    name: str,
    command: Sequence[str],
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    width: int = 200,
    height: int = 50,
    config: str | None = None,
    tmux: str = TMUX,
) -> str:
    """Create a detached session running `command` (argv) and return its pane id (`%N`). The pane stays
    after the command exits (remain-on-exit), so a quit engine reads as offline rather than vanishing. The
    option is the server's (ours alone) and set in the same tmux command before the session exists: set on
    the window afterwards, a program that exits at once would take its session (and a server with no other)
    with it first."""
    argv = [tmux, *(["-f", config] if config else []), *server_args(socket)]
    args = ["start-server", ";", "set-option", "-gw", "remain-on-exit", "on", ";"]
    session = ["-d", "-s", literal_format(name), "-x", str(width), "-y", str(height)]
    session += ["-P", "-F", "#{pane_id}"]
    if cwd is not None:
        session += ["-c", literal_format(cwd)]
    for key, value in (env or {}).items():
        session += ["-e", literal(f"{key}={value}")]
    args += ["new-session", *session, "--", *map(literal, command)]
    done = await trio.run_process([*argv, *args], capture_stdout=True, capture_stderr=True, check=False)
    if done.returncode != 0:
        raise TmuxError(done.stderr.decode(errors="replace").strip())
    return done.stdout.decode().strip()


async def kill_server(socket: str, *, tmux: str = TMUX) -> None:
    """Stop a tmux server this program created (never one it did not)."""
    with contextlib.suppress(TmuxError):
        await ProcessRunner(socket, tmux=tmux).run("kill-server")


# --- panes --------------------------------------------------------------------------------------------------


async def pane_info(runner: Runner, target: str) -> PaneInfo:
    """tmux's view of the pane. display-message falls back to another pane when the target is gone, so a
    pane-id target is checked against the answer."""
    lines = await runner.run("display-message", "-p", "-t", target, PANE_FORMAT)
    fields = ((lines[0] if lines else "") + " - - - - - - -").split(" ", 6)
    pane, dead, pid, cursor, width, tty, command = fields
    if target.startswith("%") and pane != target:
        raise TmuxError(f"can't find pane: {target}")
    return PaneInfo(
        dead=dead == "1",
        pid=int(pid) if pid.isdigit() else None,
        tty=tty.strip("-"),
        command=command.strip(" -"),
        cursor_y=int(cursor) if cursor.isdigit() else None,
        width=int(width) if width.isdigit() else None,
    )


async def pane_foreground(socket: str, target: str) -> str | None:
    """The program in the pane's foreground (#{pane_current_command}), or None when the pane cannot be seen
    (no such server or pane, or a dead one). A name only, maybe a wrapper's or an `exec -a` one: whether a
    paste may reach the pane is `plain_shell_in`'s to say."""
    try:
        pane = await pane_info(ProcessRunner(socket), target)
    except TmuxError:
        return None
    return None if pane.dead else pane.command


async def plain_shell_in(pane: PaneInfo) -> str | None:
    """The plain shell that would read what is pasted into a live pane (described), or None: tmux's name for
    its foreground program, then the processes of its foreground and below it (a name can be a wrapper's, or
    an `exec -a` one). Raises ProcessesUnseen when /proc cannot tell: then nothing may be pasted."""
    if is_plain_shell(pane.command):
        return f"the pane's foreground program is {pane.command}"
    if pane.pid is None:
        raise ProcessesUnseen("tmux named no process for the pane")
    return await trio.to_thread.run_sync(plain_shell_below, pane.pid, pane.tty)


async def pane_plain_shell(socket: str, target: str) -> str | None:
    """The plain shell in the pane (as `plain_shell_in` describes it), or None: also when the pane, or its
    processes, cannot be seen now (the registry's convention: such a pane reads offline until they can)."""
    try:
        pane = await pane_info(ProcessRunner(socket), target)
        return None if pane.dead else await plain_shell_in(pane)
    except (TmuxError, ProcessesUnseen):
        return None


async def capture(runner: Runner, target: str, *, history: int = 0) -> str:
    """The pane's screen (plus `history` lines of scrollback) with colour codes, wrapped lines joined."""
    extra = ["-S", str(-history)] if history else []
    return "\n".join(await runner.run("capture-pane", "-p", "-e", "-J", *extra, "-t", target))


async def paste(runner: Runner, target: str, text: str, *, bracketed: bool = True) -> None:
    """Paste `text` into the pane as one bracketed paste (load-buffer from a private file, paste-buffer -p),
    or, not `bracketed`, as its bare bytes (for an engine that knows no bracketed paste: one line of text).
    Raises TmuxError when nothing was pasted, TmuxLost when it may have been.

    Defence in depth: notices are rendered terminal-safe in the core, and a buffer that is not (ESC could
    end the bracketed paste and type the rest as keys) is refused here before tmux sees it."""
    if not is_terminal_safe(text):
        raise UnsafeText("the text holds terminal control characters; refused before any byte was sent")
    name = f"harness-{secrets.token_hex(6)}"
    fd, path = tempfile.mkstemp(prefix="harness-paste-")  # 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(text.encode())
        await runner.run("load-buffer", "-b", name, path)
    except TmuxError as error:  # the pane was not touched, whatever happened to the buffer
        raise TmuxError(f"load-buffer: {error}") from None
    finally:
        os.unlink(path)
    try:
        await runner.run("paste-buffer", *(["-p"] if bracketed else []), "-d", "-b", name, "-t", target)
    except TmuxLost:
        raise
    except TmuxError:
        with contextlib.suppress(TmuxError):
            await runner.run("delete-buffer", "-b", name)  # the notice must not linger in tmux
        raise


async def press_enter(runner: Runner, target: str) -> None:
    await runner.run("send-keys", "-t", target, "Enter")


# --- the Terminals port -------------------------------------------------------------------------------------


@attrs.frozen
class AgentTerminal:
    """A registry entry: where an agent's pane is and which engine runs in it."""

    agent_id: str
    engine: str
    socket: str
    target: str
    inbox_only: bool = False  # registered `inboxOnly`: never looked at for writing, never written to


INBOX_ONLY = "inbox-only: never written to; it reads its notices with `harness team inbox`"


@attrs.frozen
class WriteTiming:
    enter_delay: float = 0.5  # between the paste and Enter (engines treat a fast Enter as part of the paste)
    confirm: float = 3.0  # how long the paste may take to show, and the submit to show
    poll: float = 0.05
    settle: float = 2.0  # a fresh agent's idle must hold this long unchanged (earlier prompts get lost)


@attrs.frozen
class Look:
    observation: Observation
    raw: str


_AFTER_DRAFT = {
    False: "a person's draft left the prompt: they may be retyping",
    True: "a person submitted their draft: waiting for its turn",
}


@attrs.define
class _Stillness:
    """Why an agent's idle screen is no licence yet, and since when it has not changed."""

    need: float  # seconds the idle screen must hold unchanged
    why: str
    draft: str | None = None  # the person's draft that left the composer, if that is the reason
    screen: str | None = None
    since: float = 0.0


def _offline(why: str, raw: str = "") -> Look:
    return Look(Observation(ScreenState.OFFLINE, False, False, False, (why,)), raw)


PlainShell = Callable[[PaneInfo], Awaitable[str | None]]


async def look(
    runner: Runner, terminal: AgentTerminal, *, history: int = 0, plain_shell: PlainShell = plain_shell_in
) -> Look:
    """What the agent's pane shows, as its engine profile reads it; offline when it is inbox-only, gone, or
    a plain shell would read a paste, or /proc cannot tell whether one would (whatever the screen looks like,
    a shell is never written to)."""
    if terminal.inbox_only:
        return _offline(INBOX_ONLY)
    try:
        raw = await capture(runner, terminal.target, history=history)  # fails when the pane is gone
        pane = await pane_info(runner, terminal.target)
    except TmuxError as error:
        return _offline(f"no pane: {error}")
    if not pane.dead:
        try:
            shell = await plain_shell(pane)
        except ProcessesUnseen as error:
            return _offline(f"unseen processes: {error}; nothing is pasted where a shell may read it", raw)
        if shell is not None:
            return _offline(f"plain shell: {shell}; nothing is pasted into a shell", raw)
    return Look(classify(terminal.engine, raw, pane), raw)


class TmuxTerminals:
    """The agents of this machine in tmux panes, as `source` lists them right now (the daemon's registry).
    Writes are serialized per agent."""

    def __init__(
        self,
        source: Callable[[], Iterable[AgentTerminal]],
        *,
        timing: WriteTiming | None = None,
        now_ms: Callable[[], int] | None = None,
        runner: Callable[[str], Runner] | None = None,
        plain_shell: PlainShell = plain_shell_in,  # a scripted tmux (a test's) has no processes to look at
    ) -> None:
        self.timing = timing or WriteTiming()
        self._plain_shell = plain_shell
        self._source = source
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._make_runner: Callable[[str], Runner] = runner or ControlRunner
        self._runners: dict[str, Runner] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._attached: set[str] = set()  # agents looked at since their pane was last seen (not offline)
        self._still: dict[str, _Stillness] = {}  # agents whose idle must hold still first
        self._drafts: dict[str, str] = {}  # the person's draft last seen in an agent's composer

    @classmethod
    def from_registry(cls, registry: AgentRegistry) -> Self:
        """Terminals over the daemon's agent registry, read live (what `Daemon(terminals=...)` takes)."""

        return cls(registry.terminals)

    def _entry(self, agent_id: str) -> AgentTerminal | None:
        return next((entry for entry in self._source() if entry.agent_id == agent_id), None)

    def agents(self) -> Sequence[str]:
        return [entry.agent_id for entry in self._source()]

    def _runner(self, socket: str) -> Runner:
        if socket not in self._runners:
            self._runners[socket] = self._make_runner(socket)
        return self._runners[socket]

    async def aclose(self) -> None:
        runners, self._runners = self._runners, {}
        for runner in runners.values():
            await runner.aclose()

    async def _look(self, entry: AgentTerminal, history: int = 0) -> Look:
        return await look(self._runner(entry.socket), entry, history=history, plain_shell=self._plain_shell)

    def _steady(self, entry: AgentTerminal, look: Look) -> Observation:
        """An idle screen reads `settling` until it held still: `settle` seconds after an attach (earlier
        prompts get lost), the profile's pause after a person's draft left the composer (see Profile)."""
        agent_id, observation = entry.agent_id, look.observation
        state = observation.state
        if state is ScreenState.OFFLINE:
            self._attached.discard(agent_id)
            self._still.pop(agent_id, None)
            self._drafts.pop(agent_id, None)
            return observation
        if agent_id not in self._attached:
            self._attached.add(agent_id)
            self._still[agent_id] = _Stillness(self.timing.settle, "a fresh attach: waiting for a still pane")
        still = self._still.get(agent_id)
        if state is ScreenState.DRAFT:
            self._drafts[agent_id] = observation.prompt or ""
        elif state in (ScreenState.BUSY, ScreenState.DIALOG):
            self._drafts.pop(agent_id, None)  # a turn shows: a submitted draft was taken
            if still is not None and still.draft is not None:
                del self._still[agent_id]
                still = None
        if state is not ScreenState.IDLE:
            if still is not None:
                still.screen = None  # a screen that is not idle starts the wait again
            return observation
        left = self._drafts.pop(agent_id, None)
        if left is not None:  # a person's draft left the composer: cleared, or submitted
            still = self._still[agent_id] = _Stillness(still.need if still is not None else 0.0, "", left)
        if still is None:
            return observation
        now = trio.current_time()
        if still.draft is not None:  # submitted once it shows above the composer (an engine may draw it late)
            profile = profile_for(entry.engine)
            submitted = _shows_a_line_of(look.raw, still.draft)
            still.need = max(still.need, profile.turn_quiet if submitted else profile.human_pause)
            still.why = _AFTER_DRAFT[submitted]
        if still.screen != look.raw:
            still.screen, still.since = look.raw, now
        if now - still.since >= still.need:
            del self._still[agent_id]
            return observation
        waited = f"{still.why} (idle and unchanged for {now - still.since:.1f} s of {still.need:g} s)"
        return attrs.evolve(observation, state=ScreenState.SETTLING, evidence=(*observation.evidence, waited))

    async def _screen(self, entry: AgentTerminal) -> Screen:
        at = self._now_ms()
        look = await self._look(entry)
        observation = self._steady(entry, look)
        return Screen(observation.state, at, observation.evidence, _plain(look.raw), observation.prompt)

    async def observe(self, agent_id: str) -> Screen:
        entry = self._entry(agent_id)
        if entry is None:
            return Screen(ScreenState.OFFLINE, self._now_ms(), ("not registered on this machine",))
        return await self._screen(entry)

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        entry = self._entry(agent_id)
        if entry is None:
            return WriteOutcome.FAILED
        text = text.rstrip("\n")
        if is_terminal_safe(text):  # as the engine takes it; an unsafe text is refused as it is, by `paste`
            text = notice_as_typed(entry.engine, text)
        lock = self._locks.setdefault(agent_id, trio.Lock())
        async with lock:
            return await self._write(entry, text, licence)

    async def _write(self, entry: AgentTerminal, text: str, licence: Licence | None) -> WriteOutcome:
        timing = self.timing
        # The write boundary: this look is the last before the paste, and the one the licence is asked on.
        before = await self._screen(entry)
        allowed = licence is None or await licence(before)
        if not allowed or before.state is not ScreenState.IDLE:
            return WriteOutcome.FAILED  # nothing is sent
        runner = self._runner(entry.socket)
        bracketed = profile_for(entry.engine).notice_input is NoticeInput.BRACKETED_PASTE
        try:
            await paste(runner, entry.target, text, bracketed=bracketed)
        except TmuxLost:
            return WriteOutcome.UNCERTAIN
        except TmuxError:
            return WriteOutcome.FAILED
        pasted_at = trio.current_time()
        # The paste must show as exactly our text (or its fold marker) in the prompt, with no dialog.
        spoiled = lambda look: _spoiled(look, text)  # noqa: E731
        if not await self._until(entry, lambda look: _holds(look, text), timing.confirm, stop=spoiled):
            return WriteOutcome.UNCERTAIN
        await trio.sleep_until(pasted_at + timing.enter_delay)
        if not _holds(await self._look(entry), text):
            return WriteOutcome.UNCERTAIN
        for attempt in range(2):
            try:
                await press_enter(runner, entry.target)
            except TmuxError:
                return WriteOutcome.UNCERTAIN
            if await self._until(entry, lambda look: _submitted(look, text), timing.confirm):
                return WriteOutcome.OK
            # Enter again only when the screen shows exactly our own notice as the draft and no dialog.
            if attempt or not _holds(await self._look(entry), text):
                break
        return WriteOutcome.UNCERTAIN

    async def _until(
        self,
        entry: AgentTerminal,
        done: Callable[[Look], bool],
        seconds: float,
        stop: Callable[[Look], bool] | None = None,
    ) -> bool:
        deadline = trio.current_time() + seconds
        while True:
            look = await self._look(entry)
            if done(look):
                return True
            if (stop is not None and stop(look)) or trio.current_time() >= deadline:
                return False
            await trio.sleep(self.timing.poll)

    async def transcript(self, agent_id: str) -> str | None:
        """The pane's whole history (capture-pane -S -), plain: the owner's inspection searches it."""
        entry = self._entry(agent_id)
        if entry is None or entry.inbox_only:
            return None
        try:
            runner = self._runner(entry.socket)
            lines = await runner.run("capture-pane", "-p", "-J", "-S", "-", "-t", entry.target)
        except TmuxError:
            return None
        return "\n".join(lines)

    async def turn_matches(self, agent_id: str, text: str) -> bool:
        entry = self._entry(agent_id)
        if entry is None:
            return False
        look = await self._look(entry, history=HISTORY_LINES)
        return bool(look.raw) and turn_shows(entry.engine, look.raw, notice_as_typed(entry.engine, text))


def _plain(raw: str) -> str:
    return "\n".join(parse_capture(raw).texts)


_LEAD = re.compile(r"^[\W_]+")  # prompt signs, box edges and bullets before a transcript line's text


def _shows_a_line_of(raw: str, draft: str) -> bool:
    """Whether a line on screen starts with the draft (after its prompt sign or box edge): how a submitted
    message shows in each engine's transcript. A short remnant of a draft erased key by key rarely does."""
    texts = parse_capture(raw).texts
    key = _LEAD.sub("", needle(draft))
    if not key:  # a draft of signs only: anywhere on screen
        return needle(draft) in " ".join(" ".join(texts).split())
    return any(_LEAD.sub("", " ".join(line.split())).startswith(key) for line in texts)


def _spoiled(look: Look, text: str) -> bool:
    """No point waiting for the paste to show: a dialog opened, the pane died, or the prompt holds our text
    mixed with someone else's."""
    observation = look.observation
    if observation.state in (ScreenState.DIALOG, ScreenState.OFFLINE):
        return True
    prompt = squash(observation.prompt or "")
    return squash(text) in prompt and prompt != squash(text)


def _holds(look: Look, text: str) -> bool:
    """The prompt holds exactly our text, nothing runs and no dialog shows."""
    return look.observation.state is ScreenState.DRAFT and draft_is(look.observation, text)


def _submitted(look: Look, text: str) -> bool:
    """Our draft left the prompt: the composer is empty again, or a turn runs (or asks for permission) with
    our text above in the transcript. A prompt holding something else is no proof (a mention popup may have
    taken the Enter and changed the draft)."""
    observation = look.observation
    if observation.prompt == "":
        return observation.state is not ScreenState.STARTING
    if observation.state in (ScreenState.BUSY, ScreenState.DIALOG) and not draft_is(observation, text):
        return needle(text) in " ".join(_plain(look.raw).split())
    return False
