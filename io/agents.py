# The daemon's private registry of the agents running on this machine. Members are addressed by
# (machineId, agentId); this is where an agentId becomes a tmux pane the desk runner can look at and write
# to. It is small (a few dozen agents), so it is one JSON file replaced atomically (temp, fsync, rename,
# fsync directory), mode 0600, written only by the daemon. A damaged file is kept as it is and reported.
#
# Registration is where the trust rule of team.v1 is first applied: "ordinary terminal shells cannot be
# automatic answering members". A pane where a plain shell would read a paste (by tmux's name for its
# foreground program, or by the real executables of its foreground processes and those below them: a bash
# under `script` or renamed by `exec -a` fools the name) would run a pasted notice as commands, so it may
# join only as inbox-only (never written to; it reads with `harness team inbox`). The desk's tmux adapter
# checks again before every paste (a program may exit to its shell).
from __future__ import annotations

import enum
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core.bounded_json import parse_own
from harness.core.codec import from_json, to_json
from harness.core.errors import ErrorCode, Rejected
from harness.core.terminal_text import is_terminal_safe
from harness.io import home as homes
from harness.io.tmux import AgentTerminal, pane_plain_shell

REGISTRY_FILE = "agents.json"
FORMAT_VERSION = 1
MAX_AGENTS = 256  # a machine runs tens of agent terminals; this bounds the file and every scan of it
MAX_FIELD_CHARS = 4_096  # paths and tmux targets
AGENT_ID_BYTES = 8


class Engine(enum.StrEnum):
    CLAUDE = "claude"
    CODEX = "codex"
    GEMINI = "gemini"
    GROK = "grok"
    SHELL = "shell"  # an agent program that runs shell commands and shows a plain prompt (never a shell)
    SCRIPTED = "scripted"  # a program that takes each submitted line as one message (demo agent, test TUIs)


class Refusal(enum.StrEnum):
    """Registry refusals that name a trust rule (the other errors use the protocol's codes)."""

    PLAIN_SHELL = "plain_shell"  # team.v1: ordinary terminal shells cannot be automatic answering members


class StartedBy(enum.StrEnum):
    DAEMON = "daemon"  # `harness agent start`: the daemon made the tmux session
    ATTACHED = "attached"  # `harness agent attach`: an existing pane was adopted; it is never killed


@attrs.frozen
class TmuxPane:
    socket: str  # a server name (`tmux -L NAME`) or, when it contains '/', a socket path (`tmux -S PATH`)
    target: str  # a pane target: `%12`, `session:window.pane`


@attrs.frozen
class AgentEntry:
    agent_id: str
    name: str
    engine: Engine
    tmux: TmuxPane
    cwd: str | None
    started_by: StartedBy
    created_at: int
    # Never written to: the member reads its notices with `harness team inbox` (the only way a plain shell
    # joins). Absent from registries written before inbox-only members existed, which then still load.
    inbox_only: bool = False


class AgentError(Exception):
    """A registry request the daemon answers with an error frame."""

    def __init__(self, code: ErrorCode | Refusal, detail: str, bound: str | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.bound = bound


def entry_view(entry: AgentEntry) -> dict[str, Any]:
    data: dict[str, Any] = to_json(entry)
    return data


def _same(a: AgentEntry, b: AgentEntry) -> bool:
    return attrs.evolve(a, created_at=0) == attrs.evolve(b, created_at=0)


class AgentRegistry:
    """The registry as the daemon holds it. Reads are plain attribute reads; changes are serialized and
    durable before they return. `entries()` is what a Terminals implementation consults, live."""

    def __init__(
        self,
        path: Path,
        entries: Mapping[str, AgentEntry] | None = None,
        unavailable: str | None = None,
        plain_shell: Callable[[str, str], Awaitable[str | None]] = pane_plain_shell,
    ) -> None:
        self.path = path
        self.unavailable = unavailable
        self._entries = dict(entries or {})
        self._lock = trio.Lock()
        self._plain_shell = plain_shell  # (socket, target) -> the plain shell there, None if none or unseen

    @classmethod
    def load(cls, home: Path) -> AgentRegistry:
        path = home / REGISTRY_FILE
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, {})
        try:
            data = parse_own(raw)
            if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
                raise ValueError(f"expected an object with version {FORMAT_VERSION}")
            agents = data.get("agents")
            if not isinstance(agents, list):
                raise ValueError("'agents' is not a list")
            entries: dict[str, AgentEntry] = {}
            for item in agents:
                entry = from_json(item, AgentEntry)
                if isinstance(entry, Rejected):
                    raise ValueError(entry.detail)
                entries[entry.agent_id] = entry
        except ValueError as error:
            return cls(path, {}, f"{path} is damaged ({error}); it was left as it is for repair")
        return cls(path, entries)

    def entries(self) -> tuple[AgentEntry, ...]:
        """Every registered agent, oldest first (empty while the file is damaged)."""
        return tuple(sorted(self._entries.values(), key=lambda entry: (entry.created_at, entry.agent_id)))

    def terminals(self) -> tuple[AgentTerminal, ...]:
        """The entries as the desk's tmux Terminals read them, live."""
        return tuple(
            AgentTerminal(
                entry.agent_id,
                entry.engine.value,
                entry.tmux.socket,
                entry.tmux.target,
                inbox_only=entry.inbox_only,
            )
            for entry in self.entries()
        )

    def show(self, ref: str) -> AgentEntry:
        """The agent with this id, or else the one agent with this name."""
        self._check()
        entry = self._entries.get(ref)
        named = [e for e in self._entries.values() if e.name == ref]
        if entry is None and len(named) == 1:
            entry = named[0]
        if entry is None:
            more = f" ({len(named)} agents have that name; use an agentId)" if named else ""
            raise AgentError(ErrorCode.NOT_FOUND, f"no agent {ref!r} on this machine{more}")
        return entry

    async def register(
        self, fields: Mapping[str, Any], now: int, id_chars: int, name_chars: int
    ) -> AgentEntry:
        """Add an agent. Idempotent by agentId: the same fields again return the entry; others conflict."""
        self._check()
        data = {
            "startedBy": StartedBy.ATTACHED.value,
            "cwd": None,
            **fields,
            "agentId": fields.get("agentId") or secrets.token_hex(AGENT_ID_BYTES),
            "createdAt": now,
        }
        entry = from_json(data, AgentEntry)
        if isinstance(entry, Rejected):
            raise AgentError(ErrorCode.BAD_REQUEST, f"agent_register: {entry.detail}")
        _check_sizes(entry, id_chars, name_chars)
        _check_characters(entry)
        async with self._lock:
            existing = self._entries.get(entry.agent_id)
            if existing is not None:
                if _same(existing, entry):
                    return existing
                raise AgentError(ErrorCode.CONFLICT, f"agent {entry.agent_id!r} is registered differently")
            if len(self._entries) >= MAX_AGENTS:
                raise AgentError(ErrorCode.BOUND_EXCEEDED, f"this machine has {MAX_AGENTS} agents", "agents")
            if not entry.inbox_only:
                await self._refuse_plain_shell(entry.tmux)
            await self._save({**self._entries, entry.agent_id: entry})
        return entry

    async def _refuse_plain_shell(self, pane: TmuxPane) -> None:
        """A pane that cannot be seen now, or whose processes cannot, is registered (it reads offline until
        they can be, and every paste checks first); one where a plain shell would read a paste is refused for
        pushed notices."""
        shell = await self._plain_shell(pane.socket, pane.target)
        if shell is not None:
            raise AgentError(Refusal.PLAIN_SHELL, _plain_shell_refusal(pane.target, shell))

    async def remove(self, ref: str) -> AgentEntry:
        entry = self.show(ref)
        async with self._lock:
            await self._save({k: v for k, v in self._entries.items() if k != entry.agent_id})
        return entry

    def _check(self) -> None:
        if self.unavailable is not None:
            raise AgentError(ErrorCode.CORRUPT_STATE, self.unavailable)

    async def _save(self, entries: dict[str, AgentEntry]) -> None:
        data = {"version": FORMAT_VERSION, "agents": [entry_view(entry) for entry in entries.values()]}
        await trio.to_thread.run_sync(homes.write_private_json, self.path, data)
        self._entries = entries  # only once it is on disk


def _plain_shell_refusal(target: str, shell: str) -> str:
    return (
        f"the pane {target} has an ordinary terminal shell ({shell}), where a pasted notice would run as "
        "commands (team.v1: ordinary terminal shells cannot be automatic answering members); run the agent "
        "program in it, or register it inbox-only (--inbox-only) to read notices with `harness team inbox`"
    )


def control_character(value: str) -> str | None:
    """The first character of `value` a terminal would not print as itself (C0 and C1 controls, DEL, bidi
    and other format characters: core.terminal_text's definition), as U+XXXX; None for plain text. A newline
    would end a tmux control-mode command and start another; any of them in a name, a path or a pane target
    would reach a terminal or tmux's command parser as something other than text."""
    if is_terminal_safe(value, line_breaks=False):
        return None
    found = next(char for char in value if not is_terminal_safe(char, line_breaks=False))
    return f"U+{ord(found):04X}"


def _check_characters(entry: AgentEntry) -> None:
    for what, value in (
        ("agentId", entry.agent_id),
        ("name", entry.name),
        ("tmux.socket", entry.tmux.socket),
        ("tmux.target", entry.tmux.target),
        ("cwd", entry.cwd or ""),
    ):
        found = control_character(value)
        if found is not None:
            detail = f"agent_register: {what} holds the control character {found}; names, paths and tmux "
            raise AgentError(ErrorCode.BAD_REQUEST, detail + "targets must be plain text")


def _check_sizes(entry: AgentEntry, id_chars: int, name_chars: int) -> None:
    for what, value, most, bound in (
        ("agentId", entry.agent_id, id_chars, "id_chars"),
        ("name", entry.name, name_chars, "name_chars"),
        ("tmux.socket", entry.tmux.socket, MAX_FIELD_CHARS, "agent_field_chars"),
        ("tmux.target", entry.tmux.target, MAX_FIELD_CHARS, "agent_field_chars"),
        ("cwd", entry.cwd or "", MAX_FIELD_CHARS, "agent_field_chars"),
    ):
        if len(value) > most:
            detail = f"{what} has {len(value)} characters; at most {most}"
            raise AgentError(ErrorCode.BOUND_EXCEEDED, detail, bound)
    if not entry.agent_id or "/" in entry.agent_id or not entry.name.strip():
        raise AgentError(ErrorCode.BAD_REQUEST, "an agent needs a name and an agentId without '/'")
    if not entry.tmux.socket or not entry.tmux.target:
        raise AgentError(ErrorCode.BAD_REQUEST, "an agent needs tmux.socket and tmux.target")
