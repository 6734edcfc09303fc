# The commands a person or an agent runs most, without Typer: importing Typer and building its parser takes
# longer than the 0.25 s a command may take to start (see scripts/bench_cli_start.py). `run_fast` handles
# `harness --help`, `harness team` (help, and every plain invocation that `commands.parse_fast` reads),
# `harness daemon status` and `harness agent list`; anything else (another command, a typo, a missing
# argument) goes to the Typer application, which explains it. Help is rendered here from the same tables the
# Typer commands are built from (`commands.COMMANDS`, `TOP`, `TEAM_OTHERS`), so the two cannot drift.
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import output
from harness.cli.commands import (
    COMMANDS,
    COMMON_HELP,
    COMMON_OPTIONS,
    PREFIX_HELP,
    NotFast,
    Options,
    Spec,
    Values,
    call,
    fail,
    match_command,
    parse_fast,
    show,
    take_option,
)
from harness.io import home as homes
from harness.io.client import Client, RemoteError, Uncertain, Unreachable, locate_socket

if TYPE_CHECKING:
    from harness.io.profiles import Observation

ABOUT = "team.v1: coding agents in terminals joined into a team through a durable exchange ledger."
# `harness COMMAND`: what each does, in `harness --help`.
TOP: dict[str, str] = {
    "team": "Teams: roster, questions and answers (init, create, ask, reply, inbox, wait, watch).",
    "agent": "Agents of this machine: start, attach, list, show, classify a screen.",
    "daemon": "The machine daemon that owns the team ledgers.",
    "pair": "Pair machines through a relay (end-to-end sealed).",
    "relay": "The relay between paired machines.",
    "web": "Serve a live page of the team on loopback, next to the running daemon; prints a one-time URL.",
    "doctor": "Check every ledger store (read-only, safe beside a running daemon); exit 1 if any is damaged.",
    "demo": "Watch two scripted agents in a private tmux server: a team, an ask, a reply, the continuation.",
    "check": "Model-check the protocol over the real reducers (scenarios, mutants).",
    "trace": "Read a trace offline: export, query, summary (no daemon needed).",
    "session": "Coordination sessions of engines in tmux: run, status, stop; tools: announce, rollcall, rfc.",
    "selfedit": "Write stdin to a file that .claude/settings.json allows (Edit rules), off branch main.",
    "eval": "Run task families N times per engine (setup, engine, judge) and report pass@k.",
    "channels": "Tab channels, off by default: the agents of a tmux window form a team; enable, disable.",
}
# The `harness team` commands that only the Typer application runs (a terminal view, a file copy).
TEAM_OTHERS: dict[str, str] = {
    "watch": "Read-only live view: roster, exchanges, the selected one in full.",
    "export": "Write a consistent backup of the team's ledger (safe beside a running daemon).",
    "delete": "Delete an archived team, once exported, while the daemon is stopped (frees its slot).",
}
FIRST_STEPS = """\
First team, on one machine:
  harness daemon start
  harness agent start --engine claude --name alice    (and bob, ...)
  harness team init --name demo                       (writes team.json)
  harness team create --file team.json
  harness team --team TEAM_ID watch"""

DAEMON_STATUS_OPTIONS = {"--home": ("home", "str"), "--json": ("json", "flag")}
AGENT_LIST_OPTIONS = {
    "--home": ("home", "str"),
    "--json": ("json", "flag"),
    "--wide": ("wide", "flag"),
    "--daemon-socket": ("socket", "str"),
}


def _width() -> int:
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def _entries(rows: list[tuple[str, str]]) -> list[str]:
    """`name  help` rows, the help wrapped beside the names (below them when a name is long)."""
    width = _width()
    column = min(max((len(name) for name, _ in rows), default=0) + 4, 28)
    lines = []
    for name, about in rows:
        wrapped = textwrap.wrap(about, max(width - column, 20)) or [""]
        if len(name) + 4 > column:
            lines.append(f"  {name}")
        else:
            lines.append(f"  {name:<{column - 2}}{wrapped.pop(0)}")
        lines.extend(" " * column + line for line in wrapped)
    return lines


def _paragraphs(text: str) -> list[str]:
    width = _width()
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        lines.extend(["", *textwrap.wrap(paragraph, width - 2, initial_indent="  ", subsequent_indent="  ")])
    return lines


def _option_rows(options: dict[str, tuple[str, str]], about: dict[str, str]) -> list[tuple[str, str]]:
    rows = []
    for flag, (dest, kind) in options.items():
        value = {"flag": "", "float": " SECONDS" if "second" in dest or dest == "ttl" else " NUMBER"}.get(
            kind, " " + dest.upper()
        )
        rows.append((flag + value, about.get(flag, "")))
    return rows


def top_help() -> str:
    lines = [
        "Usage: harness [--version] COMMAND ...",
        *_paragraphs(ABOUT),
        "",
        "Commands:",
        *_entries(list(TOP.items())),
        "",
        FIRST_STEPS,
        "",
        "`harness COMMAND --help` tells more.",
    ]
    return "\n".join(lines)


def team_help() -> str:
    commands = [(name, spec.help.split("\n")[0]) for name, spec in COMMANDS.items()]
    lines = [
        "Usage: harness team [COMMON OPTIONS] COMMAND [ARGS] [OPTIONS]",
        *_paragraphs(TOP["team"] + " " + PREFIX_HELP),
        "",
        "Commands:",
        *_entries([*commands, *TEAM_OTHERS.items()]),
        "",
        "Common options (before or after COMMAND):",
        *_entries(_option_rows(COMMON_OPTIONS, COMMON_HELP)),
    ]
    return "\n".join(lines)


def command_help(name: str, spec: Spec) -> str:
    arguments = [a.upper() for a in spec.required] + [f"[{a.upper()}]" for a in spec.optional]
    usage_line = " ".join(["Usage: harness team", name, "[OPTIONS]", *arguments])
    lines = [usage_line, *_paragraphs(spec.help)]
    described = [(a.upper(), spec.about[a]) for a in (*spec.required, *spec.optional) if a in spec.about]
    if described:
        lines += ["", "Arguments:", *_entries(described)]
    if spec.options:
        lines += ["", "Options:", *_entries(_option_rows(spec.options, spec.about))]
    lines += ["", "Common options:", *_entries(_option_rows(COMMON_OPTIONS, COMMON_HELP))]
    return "\n".join(lines)


def _help(argv: list[str]) -> str | None:
    """The help `argv` asks for, when it is `harness`, `harness --help`, or `harness team ... --help`."""
    if argv in ([], ["--help"]):
        return top_help()
    if not argv or argv[0] != "team" or (len(argv) > 1 and "--help" not in argv):
        return None
    words = argv[1:]
    for index, word in enumerate(words):
        name = word if word in TEAM_OTHERS else match_command(words[index:])
        if name is None:
            continue
        after = words[index + len(name.split()) : index + len(name.split()) + 1]
        if name in TEAM_OTHERS or any(other.startswith(f"{name} {' '.join(after)} ") for other in COMMANDS):
            return None  # a command only Typer runs, or a group of commands (`board task`): Typer lists them
        return command_help(name, COMMANDS[name])
    return team_help()


def _parse(argv: list[str], table: dict[str, tuple[str, str]]) -> Values | None:
    """The options of a command that takes options only, or None to let Typer read (and explain) `argv`."""
    values: Values = {}
    index = 0
    try:
        while index < len(argv):
            index = take_option(argv, index, table, values)
    except NotFast:
        return None
    return values


def run_fast(argv: list[str]) -> bool:
    """Run `argv` without Typer when this module (or `commands.parse_fast`) reads it; False otherwise."""
    text = _help(argv)
    if text is not None:
        print(text)
        return True
    parsed = parse_fast(argv)
    if parsed is not None:
        spec, opts, values = parsed
        spec.run(opts, values)
        return True
    if argv[:2] == ["daemon", "status"] and (given := _parse(argv[2:], DAEMON_STATUS_OPTIONS)) is not None:
        opts = Options().merge(bool(given.get("json")), given.get("home"), None, None)
        daemon_status(opts)
        return True
    if argv[:2] == ["agent", "list"] and (given := _parse(argv[2:], AGENT_LIST_OPTIONS)) is not None:
        opts = Options().merge(bool(given.get("json")), given.get("home"), given.get("socket"), None)
        opts.wide = bool(given.get("wide"))
        agent_list(opts)
        return True
    return False


# --- harness daemon status ----------------------------------------------------------------------------------


def running(opts: Options, home: Path) -> dict[str, Any]:
    """What a daemon that answers on its socket says of itself (daemon_status), or exit 3."""
    where: Path | None = None
    try:
        where, info = locate_socket(home, None)
        assert info is not None
        with Client(where) as client:
            capabilities = client.check_compatible()
            status = client.request("daemon_status", owner_token=homes.read_owner_token(home))
    except Unreachable as error:
        fail(opts, output.UNREACHABLE, "unreachable", error.detail)
    except (Uncertain, RemoteError) as error:
        detail = f"the daemon at {where} does not answer: {error.detail}"
        fail(opts, output.UNREACHABLE, "unreachable", detail)
    if capabilities.get("machineId") != info.get("machineId"):
        detail = f"{where} is another daemon's socket; {home} has no daemon"
        fail(opts, output.UNREACHABLE, "unreachable", detail)
    return {**status, "home": str(home), "running": True}


def daemon_status(opts: Options) -> None:
    show(opts, running(opts, homes.resolve_home(opts.home)), output.show_mapping)


# --- harness agent list -------------------------------------------------------------------------------------


def show_observation(observation: dict[str, Any], look: output.Look) -> None:
    safe = "safe to write" if observation["safeToWrite"] else "not safe to write"
    flags = [name for name in ("busy", "draft", "dialog") if observation[name]]
    output.say(f"{observation['state']} ({safe}{'; ' + ', '.join(flags) if flags else ''})", look)
    for line in observation["evidence"]:
        output.say(f"  | {line}", look)


def _observe(entry: dict[str, Any]) -> Observation:
    """What the desk would see on the agent's pane now (inbox-only and plain-shell panes read offline)."""
    import trio  # only when there is a pane to look at

    from harness.io.tmux import AgentTerminal, ProcessRunner, look

    pane = entry.get("tmux") or {}
    socket = str(pane.get("socket"))
    terminal = AgentTerminal(
        str(entry.get("agentId")),
        str(entry.get("engine")),
        socket,
        str(pane.get("target")),
        inbox_only=entry.get("inboxOnly") is True,
    )
    return trio.run(lambda: look(ProcessRunner(socket), terminal)).observation


def with_observation(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "observation": _observe(entry).to_json()}


def show_agents(result: dict[str, Any], look: output.Look) -> None:
    agents = result["agents"]
    if not agents:
        output.say("no agents registered on this machine", look)
        return
    ids = output.short_ids((str(a.get("agentId")) for a in agents), look.wide)
    rows = []
    for agent in agents:
        pane = agent.get("tmux") or {}
        state = agent["observation"]["state"] + ("  inbox-only" if agent.get("inboxOnly") is True else "")
        where = f"{pane.get('target')}@{pane.get('socket')}"
        rows.append([ids[str(agent.get("agentId"))], agent.get("name"), agent.get("engine"), state, where])
    columns = ["agent", "name", "engine", "screen", "tmux pane@server"]
    output.print_table("Agents", columns, rows, look, ids=4)


def agent_list(opts: Options) -> None:
    result = call(opts, "agent_list", team=False)
    agents = [with_observation(agent) for agent in result.get("agents", [])]
    show(opts, {**result, "agents": agents}, show_agents)
