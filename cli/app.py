# The Typer application: every command of the contract with its help text. The `team` commands are built
# from `commands.SPECS`, which the fast path (cli/fast.py, commands.parse_fast) parses and renders help from;
# both run the same functions of `commands`.
# A command line builds only the part of the application it names (`application`): importing the modules
# behind `session`, `check`, `pair` or `relay` takes longer than a whole `team` call, so each top-level
# command is added, and its module imported, on demand (from where fast.DECLARED says it is declared). `app`
# is still the whole application, for tests.
import contextlib
import errno
import functools
import importlib
import inspect
import os
import re
import signal
import subprocess
import sys
import time
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.core import Command
from typer._click.exceptions import ClickException, NoArgsIsHelpError

from harness.cli import output
from harness.cli.commands import (
    BOARD_SPECS,
    COMMANDS,
    COMMON_HELP,
    COMMON_OPTIONS,
    REQUIRED,
    SPECS,
    Options,
    Spec,
    call,
    fail,
    require_text,
    show,
    usage,
)
from harness.cli.fast import ABOUT, DECLARED, SINGLE, TEAM_OTHERS, TOP, running, subgroup_help
from harness.cli.fast import daemon_status as daemon_status_fast
from harness.io import home as homes
from harness.io.client import Client, RemoteError, Uncertain, Unreachable, locate_socket

team_app = typer.Typer(help=TOP["team"], no_args_is_help=True)
daemon_app = typer.Typer(help=TOP["daemon"], no_args_is_help=True)

START_TIMEOUT = 15.0
STOP_TIMEOUT = 30.0

JsonOpt = Annotated[bool, typer.Option("--json", help=COMMON_HELP["--json"])]
HomeOpt = Annotated[str | None, typer.Option("--home", help=COMMON_HELP["--home"])]
SocketOpt = Annotated[str | None, typer.Option("--socket", help=COMMON_HELP["--socket"])]
MachineOpt = Annotated[str | None, typer.Option("--machine", help=COMMON_HELP["--machine"])]
TeamOpt = Annotated[str | None, typer.Option("--team", help=COMMON_HELP["--team"])]
WideOpt = Annotated[bool, typer.Option("--wide", help=COMMON_HELP["--wide"])]

# The Python type a value of each option kind of commands.COMMON_OPTIONS and commands.SPECS has.
_KINDS: dict[str, Any] = {
    "flag": bool,
    "str": str | None,
    "float": float | None,
    "int": int | None,
    "path": Path | None,
    "list": list[str] | None,
}


def _option(dest: str, flag: str, kind: str, about: str, default: Any) -> inspect.Parameter:
    required = default is inspect.Parameter.empty
    annotation = Path if required and kind == "path" else _KINDS[kind]
    typed = Annotated[annotation, typer.Option(flag, help=about)]  # type: ignore[valid-type]
    return inspect.Parameter(dest, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=typed)


_CONTEXT = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
_COMMON = tuple(
    _option(dest, flag, kind, COMMON_HELP[flag], False if kind == "flag" else None)
    for flag, (dest, kind) in COMMON_OPTIONS.items()
)


def _own_parameters(name: str, spec: Spec) -> list[inspect.Parameter]:
    """The Typer parameters of `harness team NAME`: its arguments and options as its spec gives them."""
    parameters = []
    for argument in (*spec.required, *spec.optional):
        optional = argument in spec.optional
        typed: Any = Annotated[
            str | None if optional else str,
            typer.Argument(metavar=argument.upper(), help=spec.about.get(argument)),
        ]
        parameters.append(
            inspect.Parameter(
                argument,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=None if optional else inspect.Parameter.empty,
                annotation=typed,
            )
        )
    for flag, (dest, kind) in spec.options.items():
        default: Any = spec.defaults.get(dest, False if kind == "flag" else None)
        if dest in REQUIRED.get(name, ()):
            default = inspect.Parameter.empty
        parameters.append(_option(dest, flag, kind, spec.about.get(flag, ""), default))
    return parameters


def _team_command(name: str, spec: Spec, table: dict[str, Spec]) -> Any:
    """The function of `harness team NAME` from its spec, with the options every team command takes (also
    before it). A group's own command (`board`) runs only when no subcommand follows; otherwise it passes
    the options it was given on to the subcommand."""
    common = {p.name for p in _COMMON}

    def command(ctx: typer.Context, **given: Any) -> None:
        taken = {dest: given.pop(dest) for dest in common}
        opts = ctx.obj if isinstance(ctx.obj, Options) else Options()
        ctx.obj = opts.merge(
            taken["json"],
            taken["home"],
            taken["socket"],
            taken["key"],
            machine=taken["machine"],
            key_file=taken["key_file"],
            team=taken["team"],
            wide=taken["wide"],
        )
        if ctx.invoked_subcommand is None:
            table[name].run(opts, given)

    parameters = (_CONTEXT, *_own_parameters(name, spec), *_COMMON)
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    command.__name__ = name.replace(" ", "_").replace("-", "_")
    return command


def _register_team_command(name: str, spec: Spec) -> None:
    team_app.command(name, help=spec.help, short_help=spec.help.split("\n")[0])(
        _team_command(name, spec, SPECS)
    )


def _register_groups() -> None:
    """`harness team board ...`: a Typer group per leading words (`board`, `board task`); a command that is
    also a group's name (`board`) is that group's own command."""
    groups: dict[str, typer.Typer] = {}
    for name in sorted(COMMANDS, key=lambda name: len(name.split())):
        spec = COMMANDS[name]
        *parents, last = name.split()
        has_children = any(other.startswith(name + " ") for other in COMMANDS)
        if not parents and not has_children:
            continue  # a plain command: _register_team_command
        parent = team_app
        for depth in range(1, len(parents) + 1):
            prefix = " ".join(parents[:depth])
            if prefix not in groups:
                groups[prefix] = typer.Typer(no_args_is_help=True, help=subgroup_help(prefix))
                parent.add_typer(groups[prefix], name=parents[depth - 1])
            parent = groups[prefix]
        function = _team_command(name, spec, SPECS if name in SPECS else BOARD_SPECS)
        if has_children:
            groups[name] = typer.Typer(help=spec.help)
            groups[name].callback(invoke_without_command=True)(function)
            parent.add_typer(groups[name], name=last, short_help=spec.help.split("\n")[0])
        else:
            parent.command(last, help=spec.help, short_help=spec.help.split("\n")[0])(function)


def _team_options(ctx: typer.Context, **given: Any) -> None:
    ctx.obj = Options().merge(
        given["json"],
        given["home"],
        given["socket"],
        given["key"],
        machine=given["machine"],
        key_file=given["key_file"],
        team=given["team"],
        wide=given["wide"],
    )


_team_options.__signature__ = inspect.Signature((_CONTEXT, *_COMMON))  # type: ignore[attr-defined]
_team_options.__annotations__ = {p.name: p.annotation for p in (_CONTEXT, *_COMMON)} | {"return": None}
team_app.callback()(_team_options)
for _name, _spec in SPECS.items():
    if not any(other.startswith(_name + " ") for other in COMMANDS):
        _register_team_command(_name, _spec)
_register_groups()


def _opts(
    ctx: typer.Context,
    json_out: bool,
    home: str | None,
    socket: str | None,
    *,
    machine: str | None = None,
    team: str | None = None,
    wide: bool = False,
) -> Options:
    base = ctx.obj if isinstance(ctx.obj, Options) else Options()
    return base.merge(json_out, home, socket, None, machine=machine, team=team, wide=wide)


def _print_version(given: bool) -> None:
    if given:
        from importlib.metadata import version

        print(f"harness {version('harness')}")
        raise typer.Exit()


def harness(
    *,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    pass


def run_typer(argv: list[str], json_out: bool) -> int:
    """Run `argv` through the part of the application it names and return its exit status. A usage error is
    one line (one JSON document with --json) with code `bad_request` and status 2, like the fast path's, never
    click's boxed message."""
    names = frozenset(argv[:1] if argv[:1] and argv[0] in TOP else TOP)
    root = _application(names)
    direct = parse_direct(root, argv)
    if direct is not None:
        return run_direct(*direct)
    try:
        status = _click_command(names).main(argv, prog_name="harness", standalone_mode=False)
    except NoArgsIsHelpError:  # the help has been printed
        return output.USAGE
    except ClickException as error:
        context = getattr(error, "ctx", None)
        hint = "" if context is None else f"; see `{context.command_path} --help`"
        output.emit_error(json_out, "bad_request", error.format_message().rstrip(".") + hint)
        return output.USAGE
    return status if isinstance(status, int) else output.OK


# --- harness team -------------------------------------------------------------------------------------------


@team_app.command(short_help=TEAM_OTHERS["watch"])
def watch(
    ctx: typer.Context,
    *,
    seconds: Annotated[
        float | None, typer.Option("--seconds", help="With --json: stop after this long without a change.")
    ] = None,
    team: TeamOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    socket: SocketOpt = None,
    machine: MachineOpt = None,
) -> None:
    """Read-only live view: roster, exchanges, the selected one in full (j/k or Up/Down, r, q or Esc).
    With --json, one JSON line per change instead. With --machine, the team of a paired machine (read through
    the relay, a look a second)."""
    opts = _opts(ctx, json_out, home, socket, machine=machine, team=team)
    if not opts.team:
        usage(opts, "'watch' needs --team TEAM_ID")
    require_text(opts, {"--team": opts.team, "--machine": opts.machine})
    home_dir = homes.resolve_home(opts.home)
    if not opts.json:
        if not (sys.stdout.isatty() and sys.stdin.isatty()):
            usage(
                opts,
                "'watch' is a terminal view and this output is redirected; use "
                f"`harness team --team {opts.team} get --json` (or `watch --json` for JSON lines)",
            )
        from harness.cli.watch import run_watch

        run_watch(home_dir, opts.team, opts.socket, opts.machine)
        return
    try:
        with contextlib.ExitStack() as stack:
            if opts.machine:
                from harness.io.remote_client import remote_snapshots

                snapshots = remote_snapshots(home_dir, opts.machine, opts.team, timeout=seconds)
            else:
                where, _ = locate_socket(home_dir, opts.socket)
                client = stack.enter_context(Client(where))
                snapshots = client.subscribe(opts.team, homes.read_owner_token(home_dir), seconds)
            for snapshot in snapshots:
                show(opts, snapshot, output.show_team)
                sys.stdout.flush()
    except Unreachable as error:
        fail(opts, output.UNREACHABLE, "unreachable", error.detail)
    except Uncertain as error:
        fail(opts, output.UNCERTAIN, "uncertain", error.detail)
    except RemoteError as error:
        fail(opts, output.PROTOCOL_ERROR, error.code, error.detail)


@team_app.command(short_help=TEAM_OTHERS["export"])
def export(
    ctx: typer.Context,
    *,
    out: Annotated[Path, typer.Option("--out", help="New file for the copy (never overwritten).")],
    team: TeamOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
) -> None:
    """Write a consistent backup of the team's ledger (safe beside a running daemon)."""
    from harness.io.doctor import NoLedger, export_team
    from harness.io.journal_files import CorruptState

    opts = _opts(ctx, json_out, home, None, team=team)
    if not opts.team:
        usage(opts, "'export' needs --team TEAM_ID")
    try:
        result = export_team(homes.resolve_home(opts.home), opts.team, out)
    except CorruptState as error:
        fail(
            opts, output.PROTOCOL_ERROR, "corrupt_state", f"{error}; copy the directory byte for byte instead"
        )
    except NoLedger as error:
        fail(opts, output.PROTOCOL_ERROR, "not_found", str(error))
    except FileExistsError as error:
        usage(opts, str(error))
    except OSError as error:  # the copy could not be written (no such directory, no permission, disk full)
        fail(
            opts,
            output.PROTOCOL_ERROR,
            "io_error",
            f"cannot write the backup {out}: {error.strerror or error}",
        )
    show(opts, result, output.show_mapping)


@team_app.command(short_help=TEAM_OTHERS["delete"])
def delete(
    ctx: typer.Context,
    *,
    team: TeamOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
) -> None:
    """Delete an archived team for good, with the daemon stopped, once `export` wrote a backup of all of its
    ledger (refused otherwise, with the code of the step missing: stop_daemon_first, archive_first or
    export_first). Frees its slot in the teams bound; its board is kept aside."""
    from harness.io.daemon import now_ms
    from harness.io.ledger_runner import CleanupRefused, delete_team

    opts = _opts(ctx, json_out, home, None, team=team)
    if not opts.team:
        usage(opts, "'delete' needs --team TEAM_ID")
    try:
        result = delete_team(homes.resolve_home(opts.home), opts.team, now_ms())
    except CleanupRefused as error:
        fail(opts, output.PROTOCOL_ERROR, error.code, error.detail)
    show(opts, result, output.show_mapping)


# --- harness daemon -----------------------------------------------------------------------------------------


@daemon_app.command()
def prune(
    before: Annotated[
        str, typer.Option("--before", help="Date (YYYY-MM-DD, or ISO date and time; UTC unless it says).")
    ],
    backup: Annotated[
        Path | None,
        typer.Option("--backup", help="New file for the backup (default: in the data directory)."),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """With the daemon stopped: write a backup of this machine's delivery desk, then drop its finished
    delivery records last changed before DATE. Never the receipt of a writing, unconfirmed, queued or held
    notice, nor of one a team still owes (it keeps a restart from delivering that notice twice)."""
    import trio

    from harness.io.daemon import limits_from_env, now_ms
    from harness.io.desk_runner import prune_desk
    from harness.io.ledger_runner import CleanupRefused

    opts = Options().merge(json_out, home, None, None)
    cutoff = _utc_ms(opts, before)
    home_dir = homes.resolve_home(home)
    now = now_ms()
    try:
        if backup is None:
            (home_dir / "backups").mkdir(mode=homes.PRIVATE_DIR_MODE, exist_ok=True)
            backup = home_dir / "backups" / f"desk-{now}.json"
        result = trio.run(prune_desk, home_dir, limits_from_env(), cutoff, backup, now)
    except CleanupRefused as error:
        fail(opts, output.PROTOCOL_ERROR, error.code, error.detail)
    except (FileExistsError, ValueError, homes.HomeError) as error:
        usage(opts, str(error))
    except OSError as error:
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"cannot prune the desk in {home_dir}: {error}")
    show(opts, result, output.show_mapping)


def _utc_ms(opts: Options, text: str) -> int:
    """--before as milliseconds since the epoch: an ISO date or date and time, UTC unless it names a zone."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        usage(opts, f"--before {text!r} is not a date (YYYY-MM-DD or an ISO date and time)")
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


@daemon_app.command()
def run(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Run the daemon in the foreground; Ctrl-C or SIGTERM stops it cleanly. It listens on the socket
    daemon.sock in the data directory, for this user only."""
    import trio

    from harness.io.daemon import Daemon, limits_from_env, serve_until_signalled
    from harness.io.tmux import TmuxTerminals

    opts = Options().merge(json_out, home, None, None)
    try:
        limits = limits_from_env()
    except ValueError as error:
        usage(opts, str(error))
    try:
        daemon = Daemon(homes.resolve_home(home), limits=limits, terminals=TmuxTerminals.from_registry)
        trio.run(serve_until_signalled, daemon)
    except BaseException as error:
        _home_failure(opts, _sole(error))
        raise


def _sole(error: BaseException) -> BaseException:
    """The exception inside trio's nursery groups (the daemon fails at start inside one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _home_failure(opts: Options, error: BaseException) -> None:
    """Exit with one error (a JSON document with --json) when the data directory cannot be used; return
    for any other exception."""
    if isinstance(error, homes.DaemonRunning):
        fail(opts, output.PROTOCOL_ERROR, "conflict", str(error))
    if isinstance(error, homes.HomeError | OSError):
        fail(opts, output.PROTOCOL_ERROR, "bad_request", f"cannot run the daemon: {error}")


@daemon_app.command()
def start(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Start the daemon in the background and wait until it listens."""
    opts = Options().merge(json_out, home, None, None)
    try:
        home_dir = homes.ensure_home(homes.resolve_home(home))
        info = homes.read_daemon_info(home_dir)
        if info is not None and isinstance(info.get("pid"), int) and homes.pid_alive(info["pid"]):
            running = f"a daemon is already running for {home_dir} (pid {info['pid']})"
            fail(opts, output.PROTOCOL_ERROR, "conflict", running)
        log_fd = os.open(
            home_dir / homes.LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, homes.PRIVATE_FILE_MODE
        )
    except (homes.HomeError, OSError) as error:
        _home_failure(opts, error)
        raise
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.cli.main", "daemon", "run", "--home", str(home_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
        )
    finally:
        os.close(log_fd)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        info = homes.read_daemon_info(home_dir)
        if info is not None and info.get("pid") == process.pid:
            show(opts, {**info, "home": str(home_dir), "running": True}, output.show_mapping)
            return
        if process.poll() is not None:
            log = (home_dir / homes.LOG_FILE).read_text(errors="replace").strip().splitlines()
            fail(
                opts,
                output.PROTOCOL_ERROR,
                "conflict" if log and "already running" in log[-1] else "offline",
                f"the daemon exited at start: {log[-1] if log else process.returncode}",
            )
        time.sleep(0.02)
    fail(opts, output.UNREACHABLE, "unreachable", f"the daemon did not start within {START_TIMEOUT:g} s")


@daemon_app.command()
def stop(
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    agents: Annotated[
        bool, typer.Option("--agents", help="Also stop the agents `agent start` started, and their tmux.")
    ] = False,
) -> None:
    """Stop the background daemon cleanly (SIGTERM) and wait until it is gone. The agents it started keep
    running unless --agents (their notices wait `offline` meanwhile)."""
    from harness.cli.agent import end_agent_server, end_session

    opts = Options().merge(json_out, home, None, None)
    home_dir = homes.resolve_home(home)
    info = running(opts, home_dir)
    listed = call(opts, "agent_list", {}, team=False)["agents"]
    started = [agent for agent in listed if agent.get("startedBy") == "daemon"]
    if agents:
        for agent in started:
            end_session(agent)
        end_agent_server(home_dir)
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while homes.pid_alive(pid):
        if time.monotonic() > deadline:
            fail(opts, output.UNCERTAIN, "uncertain", f"pid {pid} did not stop within {STOP_TIMEOUT:g} s")
        time.sleep(0.02)
    left = 0 if agents else len(started)
    view = {"stopped": True, "pid": pid, "home": str(home_dir), "agentsRunning": left}
    show(opts, view, output.show_mapping)
    if left and not opts.json:
        print(f"{left} agent(s) started by the daemon still run; `harness daemon stop --agents` stops them")


@daemon_app.command("status")
def daemon_status(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Whether a daemon runs for the data directory: machineId, socket, pid, and its listeners' counters
    (connections refused as another user, frames refused, connections dropped, internal errors)."""
    daemon_status_fast(Options().merge(json_out, home, None, None))


# --- other commands -----------------------------------------------------------------------------------------


def web(
    team: Annotated[str, typer.Option("--team", help="Team id the page shows.")],
    home: HomeOpt = None,
    socket: SocketOpt = None,
    web_port: Annotated[int, typer.Option("--web-port", help="Loopback port of the page; 0 picks one.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Serve a live page of the team on loopback, next to the running daemon; prints a one-time URL.

    The URL's fragment holds a launch ticket for one page load; the page keeps a session for reconnects.
    Ctrl-C stops the page server (the daemon keeps running)."""
    import trio

    from harness.io.web import WebServer, serve_until_signalled

    opts = Options().merge(json_out, home, socket, None)

    def announce(server: WebServer) -> None:
        url = server.url(server.mint_ticket())
        if opts.json:
            output.emit_json({"url": url, "port": server.port, "teamId": team})
        else:
            print(f"Open {url}\n(one page load; run `harness web` again for another; Ctrl-C stops)")
        sys.stdout.flush()

    def log(line: str) -> None:
        print(f"harness web: {line}", file=sys.stderr, flush=True)

    daemon_socket = None if socket is None else Path(socket)
    server = WebServer(homes.resolve_home(home), team, daemon_socket=daemon_socket, log=log)
    try:
        trio.run(serve_until_signalled, server, web_port, announce)
    except BaseException as error:
        cause = _sole(error)
        if isinstance(cause, OSError):
            fail(opts, output.PROTOCOL_ERROR, "bad_request", f"cannot serve the page: {cause}")
        raise


def doctor(
    team: TeamOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check every ledger store (read-only, safe beside a running daemon); exit 1 if any is damaged. Also
    shows what the running daemon's listeners refused and dropped, and its relay link (state, last error,
    what paired machines and strangers had refused)."""
    from harness.core.records import ID_PATTERN
    from harness.io.doctor import daemon_listeners, inspect_data_dir, over_limit_lines
    from harness.io.journal_files import ledger_store_dir

    opts = Options().merge(json_out, home, None, None)
    if team is not None and not ID_PATTERN.fullmatch(team):  # it names a directory to read: never a path
        usage(opts, f"--team {team!r} is not a team id")
    home_dir = homes.resolve_home(home)
    if home_dir.exists() and not home_dir.is_dir():
        usage(opts, f"the data directory {home_dir} is not a directory")
    if team is not None and not ledger_store_dir(home_dir, team).is_dir():
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"no team {team!r} in {home_dir}")
    report = inspect_data_dir(home_dir, team_id=team)
    daemon = daemon_listeners(home_dir)
    report["daemon"] = daemon
    if opts.json:
        output.emit_json(report)
    else:
        listeners = daemon.get("listeners")
        if isinstance(listeners, dict):
            for name, counts in listeners.items():
                output.say(f"daemon {name}: " + ", ".join(f"{key} {value}" for key, value in counts.items()))
        else:
            output.say(f"daemon: not running ({daemon.get('detail')})")
        remote = daemon.get("remote")
        if isinstance(remote, dict):
            print(output.shown(_relay_line(remote)))
        for line in over_limit_lines(daemon):
            print(output.shown(line))
        for store in report["stores"]:  # type: ignore[attr-defined]
            damage = store.get("damage")
            what = store.get("teamId") or store.get("kind")
            state = (
                "ok"
                if store["ok"]
                else f"DAMAGED: {damage}"
                if damage
                else f"problems: {store.get('permissions')}"
            )
            output.say(f"{what}: {state}")  # a directory's name and a damage report hold any bytes
        print("all stores healthy" if report["ok"] else "some stores need attention (see above)")
    if not report["ok"]:
        raise typer.Exit(output.PROTOCOL_ERROR)


def _relay_line(remote: dict[str, Any]) -> str:
    """The relay link and what paired machines and strangers had refused, in one line."""
    link = remote.get("link") or {}
    line = f"daemon relay: {link.get('state')}"
    if link.get("relay"):
        line += f" ({link['relay']})"
    if link.get("lastError") and link.get("state") != "connected":
        line += f", {link.get('failuresInARow')} failed attempts in a row, last: {link['lastError']}"
    counters = remote.get("counters") or {}
    noted = ("refused", "error", "unpaired")
    refused = {key: value for key, value in counters.items() if any(word in key for word in noted)}
    if refused:
        line += "; refused: " + ", ".join(f"{key} {value}" for key, value in sorted(refused.items()))
    return line


def demo() -> None:
    """Watch two scripted agents in a private tmux server: a team, an ask, a reply and the continuation."""
    from harness.cli.demo import run_demo

    run_demo()


def _add(root: typer.Typer, name: str) -> None:
    """Adds `harness NAME` from where fast.DECLARED says it is declared, importing its module only then: a
    Typer group with TOP's text as its help, or a command with it as its short help."""
    module, attribute = DECLARED[name]
    found = getattr(importlib.import_module(module), attribute)
    if name in SINGLE:
        root.command(name, short_help=TOP[name])(found)
    else:
        root.add_typer(found, name=name, help=TOP[name])


@functools.cache
def _click_command(names: frozenset[str]) -> Command:
    """Typer builds click's command tree anew on every call (60 ms for the whole application): once a
    process is enough, and an in-process caller (the CLI fuzz) runs thousands of command lines."""
    return typer.main.get_command(_application(names))


def application(names: Iterable[str]) -> typer.Typer:
    """`harness` with only the top-level commands `names`, in their usual order; no other is imported.
    Built once per process for each set of names, and never changed after."""
    return _application(frozenset(names))


@functools.cache
def _application(wanted: frozenset[str]) -> typer.Typer:
    root = typer.Typer(
        name="harness", help=ABOUT, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
    )
    root.callback()(harness)
    for name in TOP:
        if name in wanted:
            _add(root, name)
    return root


def __getattr__(name: str) -> typer.Typer:
    """`app`: the whole application, for whoever inspects it (a command line builds only its part)."""
    if name == "app":
        return application(TOP)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- without click's parser ---------------------------------------------------------------------------------
# Parsing through click costs more than most commands take: typer coerces every value, even an absent one,
# with a pydantic adapter, and importing pydantic alone takes longer than a `team` call. A command of plain
# options and arguments (flags, text, numbers, paths) is parsed here, from the same Typer declarations, when
# its words are plain; anything else (help, a group's own callback, a list, a value click might read another
# way, a mistake to explain) goes to click, which explains it. tests/test_cli_fast.py keeps the two equal.

_PLAIN_KINDS = (bool, str, int, float, Path)
_INT = re.compile(r"[0-9]{1,15}")
_FLOAT = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")
# What a ParameterInfo may say that changes only the help, not how a value is read.
_HELP_ONLY = {"default", "param_decls", "help", "metavar", "show_default", "rich_help_panel"}


@dataclass(frozen=True)
class _Param:
    name: str
    kind: type
    flags: tuple[str, ...]  # () for an argument
    required: bool
    default: Any
    many: bool  # an option given any number of times (a list of its values, or None)


def _plain_kind(annotation: Any) -> tuple[type | None, bool]:
    """bool, str, int, float or Path (or None), or a list of str, as the parameter's type: (the type of one
    value, whether a list) or (None, False)."""
    kinds = [kind for kind in typing.get_args(annotation) if kind is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(kinds) == 1:
        annotation = kinds[0]
    if typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,):
        return str, True
    return (annotation if annotation in _PLAIN_KINDS else None), False


def _declared(function: Callable[..., Any]) -> list[_Param] | None:
    """The parameters of a command function, or None when one is not a plain option or argument."""
    from typer.models import ArgumentInfo, OptionInfo
    from typer.utils import get_params_from_function

    params = []
    for name, meta in get_params_from_function(function).items():
        info, (kind, many) = meta.default, _plain_kind(meta.annotation)
        if not isinstance(info, OptionInfo | ArgumentInfo) or kind is None:
            return None
        fresh = vars(typer.Option() if isinstance(info, OptionInfo) else typer.Argument())
        if any(value != fresh[key] for key, value in vars(info).items() if key not in _HELP_ONLY):
            return None
        flags: tuple[str, ...] = ()
        if isinstance(info, OptionInfo):
            flags = tuple(info.param_decls or (f"--{name.replace('_', '-')}",))
            if any("/" in flag or not flag.startswith("--") for flag in flags):
                return None
        default = info.default
        if (
            (kind is bool and default is not False)
            or (many and default is not None)
            or (not flags and (many or kind is bool))
        ):
            return None
        required = default is ...
        value = None if required or default is None else kind(default)
        params.append(_Param(name, kind, flags, required, value, many))
    return params


def _value(kind: type, text: str) -> Any:
    """The value of `text` for a parameter of type `kind`, or None when click should read it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return None
    if text.startswith("-") or (kind is not str and not text):
        return None
    if kind is int:
        return int(text) if _INT.fullmatch(text) else None
    if kind is float:
        return float(text) if _FLOAT.fullmatch(text) else None
    return kind(text)


def _command(root: typer.Typer, words: list[str]) -> tuple[Callable[..., Any], list[str]] | None:
    """The function `words` name in `root` (through its groups) and the words after its name."""
    from typer.core import TyperCommand, TyperGroup
    from typer.main import get_command_name

    group = root
    for index, word in enumerate(words):
        for info in group.registered_commands:
            callback = info.callback
            if callback is not None and (info.name or get_command_name(callback.__name__)) == word:
                plain = info.cls in (None, TyperCommand) and not (
                    info.context_settings or info.no_args_is_help
                )
                plain = plain and not info.deprecated
                return (callback, words[index + 1 :]) if plain else None
        groups = [sub for sub in group.registered_groups if sub.name == word]
        if not groups or groups[0].typer_instance is None:
            return None
        group = groups[0].typer_instance
        for setting in (groups[0], group.info):
            if (
                _set(setting.callback)
                or _set(setting.context_settings)
                or _set(setting.cls) not in (None, TyperGroup)
            ):
                return None
        if group.registered_callback is not None:
            return None
    return None


def _set(value: Any) -> Any:
    """A Typer setting as given: None when unset (None, or a placeholder holding the default None)."""
    from typer.models import DefaultPlaceholder

    return value.value if isinstance(value, DefaultPlaceholder) else value


def parse_direct(root: typer.Typer, argv: list[str]) -> tuple[Callable[..., Any], dict[str, Any]] | None:
    """The command function `argv` names and the values click would give it, when the words are plain."""
    found = _command(root, argv)
    params = None if found is None else _declared(found[0])
    if found is None or params is None:
        return None
    by_flag = {flag: param for param in params for flag in param.flags}
    values: dict[str, Any] = {}
    positional: list[Any] = []
    words = iter(found[1])
    for word in words:
        if word in ("--", "--help"):
            return None
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        flag, equals, inline = word.partition("=")
        param = by_flag.get(flag)
        if param is None or (param.kind is bool and equals):
            return None
        if param.kind is bool:
            values[param.name] = True
            continue
        text = inline if equals else next(words, None)
        value = None if text is None else _value(param.kind, text)
        if value is None:
            return None
        if param.many:
            values.setdefault(param.name, []).append(value)
        else:
            values[param.name] = value
    arguments = [param for param in params if not param.flags]
    if len(positional) > len(arguments):
        return None
    for param, text in zip(arguments, positional, strict=False):
        values[param.name] = _value(param.kind, text)
        if values[param.name] is None:
            return None
    for param in params:
        if param.name not in values:
            if param.required:
                return None
            values[param.name] = param.default
    return found[0], values


def run_direct(function: Callable[..., Any], values: dict[str, Any]) -> int:
    """Run a command as click's main does without standalone mode (typer.core._main): its exit status."""
    try:
        status = function(**values)
    except EOFError as error:
        print(file=sys.stderr)
        raise typer.Abort() from error
    except KeyboardInterrupt:
        return 130
    except typer.Exit as stop:
        return stop.exit_code
    except OSError as error:
        if error.errno == errno.EPIPE:
            sys.exit(output.PROTOCOL_ERROR)
        raise
    return status if isinstance(status, int) else output.OK
