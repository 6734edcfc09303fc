# `harness agent`: the agents of this machine in their tmux panes. `start` launches an engine in a tmux server
# the daemon's data directory owns, `attach` adopts a pane that already runs one; both register it with the
# daemon (`agent_register`) so the desk can deliver to it. `list`/`show` add what the engine profile sees on
# the pane right now, and `classify` reads a saved screen, which is how a profile is checked against a new
# engine version. tmux and the profiles are imported inside the commands: `harness team` calls stay fast.
#
# team.v1: "ordinary terminal shells cannot be automatic answering members". A pane whose foreground program
# is a plain shell is registered only `--inbox-only` (the daemon refuses it for pushed notices with
# `plain_shell`), so `start` never defaults to the login shell for pushed notices: `--engine shell` and
# `--engine scripted` need the agent program after `--`, and only `--inbox-only` starts the login shell.
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import output
from harness.cli.commands import COMMON_HELP, Options, call, fail, show, usage
from harness.cli.fast import agent_list, show_observation, with_observation
from harness.io import home as homes

app = typer.Typer(
    help="Agents of this machine: start, attach, list, show, classify a screen.", no_args_is_help=True
)

ENGINE_COMMANDS = {"claude": ["claude"], "codex": ["codex"], "gemini": ["gemini"], "grok": ["grok"]}
MAX_SOCKET_PATH = 100  # AF_UNIX paths hold 108 bytes; a longer data directory gets a named socket instead
STARTING_SECONDS = 3.0  # a one-word command runs as `$SHELL -c WORD` until that shell execs it

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None, typer.Option("--home", help="Data directory (default $HARNESS_HOME, else per user).")
]
SocketOpt = Annotated[
    str | None,
    typer.Option("--daemon-socket", help="Another local daemon's socket (default: from daemon.json)."),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="claude, codex, gemini; shell (an agent program with a plain prompt that runs shell commands) "
        "or scripted (a program that takes each line as a message).",
    ),
]
InboxOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--inbox-only",
        help="Never paste notices into this pane; the member reads them with `harness team inbox`. "
        "The only way a plain shell joins.",
    ),
]
NameOpt = Annotated[str, typer.Option("--name", help="The agent's name on this machine.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Agent id (default: the daemon draws one).")]


def _opts(json_out: bool, home: str | None, socket: str | None) -> Options:
    return Options().merge(json_out, home, socket, None)


def _engine(opts: Options, engine: str) -> str:
    from harness.io.profiles import ENGINES

    if engine not in ENGINES:
        usage(opts, f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    return engine


# --- classify -----------------------------------------------------------------------------------------------


@app.command()
def classify(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A saved screen, plain or with colour codes.")],
    *,
    engine: EngineOpt,
    json_out: JsonOpt = False,
) -> None:
    """What the engine profile sees on a saved screen (`tmux capture-pane -p -e` output)."""
    from harness.io.profiles import classify as classify_screen

    opts = _opts(json_out, None, None)
    _engine(opts, engine)
    try:
        raw = file.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        usage(opts, f"cannot read {file}: {error}")
    show(opts, classify_screen(engine, raw).to_json(), show_observation)


# --- start and attach ---------------------------------------------------------------------------------------


def _own_socket(home: Path) -> str:
    """The tmux server of this data directory: a socket file in it, or a name derived from it when the path
    would be too long for a Unix socket."""
    path = home / "tmux" / "agents.sock"
    if len(str(path)) <= MAX_SOCKET_PATH:
        path.parent.mkdir(mode=homes.PRIVATE_DIR_MODE, exist_ok=True)
        return str(path)
    return "harness-" + hashlib.sha256(str(home).encode()).hexdigest()[:12]


def _register(opts: Options, fields: dict[str, Any], inbox_only: bool) -> dict[str, Any]:
    result: dict[str, Any] = call(
        opts, "agent_register", {**fields, **({"inboxOnly": True} if inbox_only else {})}, team=False
    )
    return result


def _command(opts: Options, engine: str, args: list[str], inbox_only: bool) -> list[str]:
    if engine in ENGINE_COMMANDS:
        return [*ENGINE_COMMANDS[engine], *args]
    if args:
        return args
    if inbox_only:
        return [os.environ.get("SHELL") or "bash"]
    usage(
        opts,
        f"--engine {engine} runs the agent program given after `--`; a plain shell is never an automatic "
        "answering member (team.v1), so the login shell starts only with --inbox-only",
    )


async def _program_started(socket: str, pane: str) -> str | None:
    """Wait (briefly) until the pane's foreground is the program rather than the shell that execs it. None
    then; when the program has already exited, how it ended (its pane stays: remain-on-exit)."""
    import trio

    from harness.io.profiles import is_plain_shell
    from harness.io.tmux import ProcessRunner, TmuxError, pane_foreground, pane_info

    with trio.move_on_after(STARTING_SECONDS):
        while is_plain_shell(await pane_foreground(socket, pane) or ""):
            await trio.sleep(0.05)
    runner = ProcessRunner(socket)
    try:
        if not (await pane_info(runner, pane)).dead:
            return None
        status = "".join(await runner.run("display-message", "-p", "-t", pane, "#{pane_dead_status}"))
    except TmuxError:  # its session or server was ended meanwhile (by the program itself, or a stop)
        return "its tmux session ended"
    return f"status {status or '?'}"


def _program_name(command: list[str]) -> str:
    """The program a command runs, past an `env NAME=VALUE ...` that sets its variables."""
    words = command[1:] if command[0] == "env" else command
    return next((word for word in words if "=" not in word), command[0])


@app.command(context_settings={"allow_interspersed_args": False})
def start(
    *,
    engine: EngineOpt,
    name: NameOpt,
    cwd: Annotated[Path | None, typer.Option("--cwd", help="Working directory (default: this one).")] = None,
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- ARGS]", help="Extra engine arguments; for shell and scripted, the program to run."
        ),
    ] = None,
    agent_id: IdOpt = None,
    inbox_only: InboxOnlyOpt = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """Start an engine in a tmux session of the daemon's own server and register it."""
    import trio

    from harness.io.tmux import ProcessRunner, TmuxError, new_session

    opts = _opts(json_out, home, daemon_socket)
    _engine(opts, engine)
    directory = (cwd or Path.cwd()).expanduser().absolute()
    if not directory.is_dir():
        usage(opts, f"--cwd {directory} is not a directory")
    command = _command(opts, engine, list(args or []), inbox_only)
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        usage(opts, f"{command[0]!r} is not installed here (not on PATH)")
    if shutil.which("tmux") is None:
        fail(opts, output.PROTOCOL_ERROR, "offline", "tmux is not installed")
    home_dir = homes.ensure_home(homes.resolve_home(opts.home))
    socket = _own_socket(home_dir)
    session = "agent-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)[:40]
    try:
        pane = trio.run(lambda: new_session(socket, session, command, cwd=str(directory)))
    except TmuxError as error:
        fail(opts, output.PROTOCOL_ERROR, "conflict", f"cannot start the tmux session {session}: {error}")
    exited = None if inbox_only else trio.run(_program_started, socket, pane)
    if exited is not None:  # an agent that could never be reached is not registered
        with contextlib.suppress(TmuxError):
            trio.run(ProcessRunner(socket).run, "kill-session", "-t", pane)
        detail = f"{_program_name(command)} exited at once ({exited}); nothing was registered"
        detail += " (run it in a terminal to see why)"
        fail(opts, output.PROTOCOL_ERROR, "offline", detail)
    fields = {
        "name": name,
        "engine": engine,
        "tmux": {"socket": socket, "target": pane},
        "cwd": str(directory),
        "startedBy": "daemon",
        **({"agentId": agent_id} if agent_id else {}),
    }
    try:
        entry = _register(opts, fields, inbox_only)
    except SystemExit:  # not registered: do not leave an unreachable engine running
        trio.run(ProcessRunner(socket).run, "kill-session", "-t", pane)
        raise
    show(opts, {**entry, "attach": f"tmux {_server_flag(socket)} attach -t {session}"}, output.show_mapping)


def _server_flag(socket: str) -> str:
    return f"-S {socket}" if "/" in socket else f"-L {socket}"


@app.command()
def attach(
    *,
    tmux: Annotated[str, typer.Option("--tmux", help="The pane: %ID or session:window.pane.")],
    engine: EngineOpt,
    name: NameOpt,
    socket: Annotated[
        str | None,
        typer.Option("--socket", help="tmux server: a name (-L) or a socket path (-S); default: this one."),
    ] = None,
    agent_id: IdOpt = None,
    inbox_only: InboxOnlyOpt = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """Register an existing tmux pane that runs an engine (it is never killed by harness)."""
    import trio

    from harness.io.agents import control_character
    from harness.io.tmux import ProcessRunner, TmuxError

    opts = _opts(json_out, home, daemon_socket)
    _engine(opts, engine)
    server = socket or (os.environ.get("TMUX", "").split(",")[0] or "default")
    for option, value in (("--tmux", tmux), ("--socket", server)):
        control = control_character(value)
        if control is not None:
            usage(opts, f"{option} holds the control character {control}; tmux targets and sockets are text")
    try:
        found = trio.run(ProcessRunner(server).run, "display-message", "-p", "-t", tmux, "#{pane_id}")
        trio.run(
            ProcessRunner(server).run, "capture-pane", "-p", "-t", tmux
        )  # fails if there is no such pane
    except TmuxError as error:
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"no tmux pane {tmux!r} on server {server!r}: {error}")
    fields = {
        "name": name,
        "engine": engine,
        "tmux": {"socket": server, "target": found[0] if found else tmux},
        "startedBy": "attached",
        **({"agentId": agent_id} if agent_id else {}),
    }
    show(opts, _register(opts, fields, inbox_only), output.show_mapping)


# --- list and show ------------------------------------------------------------------------------------------


def _show_agent(agent: dict[str, Any], look: output.Look) -> None:
    for key, value in agent.items():
        if key != "observation":
            output.say(f"{key}: {value}", look)
    output.say("screen:", look)
    show_observation(agent["observation"], look)


@app.command("list")
def list_agents(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
    wide: Annotated[bool, typer.Option("--wide", help=COMMON_HELP["--wide"])] = False,
) -> None:
    """Every registered agent with what its pane shows now."""
    opts = _opts(json_out, home, daemon_socket)
    opts.wide = wide
    agent_list(opts)


@app.command("show")
def show_agent(
    agent: Annotated[str, typer.Argument(metavar="AGENT_ID", help="Agent id or name.")],
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """One agent: its registration, its delivery desk, and what its pane shows now."""
    opts = _opts(json_out, home, daemon_socket)
    show(opts, with_observation(call(opts, "agent_show", {"agentId": agent}, team=False)), _show_agent)


# --- stop and remove --------------------------------------------------------------------------------------


def end_session(agent: dict[str, Any]) -> bool:
    """End the tmux session of an agent the daemon started (`agent start`); a pane a person attached with
    `agent attach` is theirs and is never touched. Whether a session was ended."""
    import trio

    from harness.io.tmux import ProcessRunner, TmuxError

    tmux = agent.get("tmux") or {}
    if agent.get("startedBy") != "daemon" or not tmux.get("socket") or not tmux.get("target"):
        return False
    try:
        trio.run(ProcessRunner(str(tmux["socket"])).run, "kill-session", "-t", str(tmux["target"]))
    except TmuxError:
        return False  # already gone
    return True


def end_agent_server(home: Path) -> bool:
    """End the tmux server of this data directory's agents (after their sessions); whether one ran."""
    import trio

    from harness.io.tmux import ProcessRunner, TmuxError

    try:
        trio.run(ProcessRunner(_own_socket(home)).run, "kill-server")
    except TmuxError:
        return False
    return True


@app.command("stop")
def stop_agent(
    agent: Annotated[str, typer.Argument(metavar="AGENT_ID", help="Agent id or name.")],
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """End the engine of an agent started with `agent start` (its tmux session). It stays registered: its
    notices wait `offline` until an agent with its id starts again; `agent remove` forgets it."""
    opts = _opts(json_out, home, daemon_socket)
    entry = call(opts, "agent_show", {"agentId": agent}, team=False)
    if entry.get("startedBy") != "daemon":
        usage(opts, f"agent {agent!r} runs in a pane you attached (`agent attach`); stop it there")
    show(opts, {"agentId": entry["agentId"], "stopped": end_session(entry)}, output.show_mapping)


@app.command("remove")
def remove_agent(
    agent: Annotated[str, typer.Argument(metavar="AGENT_ID", help="Agent id or name.")],
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """Forget an agent: no notice goes to its pane any more (they wait `offline` until an agent with its id
    registers). An agent started with `agent start` is stopped too; an attached pane is left running."""
    opts = _opts(json_out, home, daemon_socket)
    entry = call(opts, "agent_remove", {"agentId": agent}, team=False)
    view = {"agentId": entry["agentId"], "removed": True, "stopped": end_session(entry)}
    show(opts, view, output.show_mapping)
