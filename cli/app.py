# The Typer application: every command of the contract with its help text. The common `team` invocations
# are parsed faster by `commands.parse_fast` (see there); both run the same functions of `commands`.
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError

from harness.cli import agent, commands, output
from harness.cli.commands import MEMBER_KEY_ENV, Options, fail, show, usage
from harness.cli.pair import pair_app
from harness.cli.relay import relay_app
from harness.io import home as homes
from harness.io.client import Client, RemoteError, Uncertain, Unreachable, locate_socket

app = typer.Typer(
    name="harness",
    help="team.v1: coding agents in terminals joined into a team through a durable exchange ledger.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
team_app = typer.Typer(
    help="Teams: roster, questions and answers (ask, reply, inbox, wait).", no_args_is_help=True
)
daemon_app = typer.Typer(help="The machine daemon that owns the team ledgers.", no_args_is_help=True)
app.add_typer(team_app, name="team")
app.add_typer(daemon_app, name="daemon")
app.add_typer(pair_app, name="pair")
app.add_typer(relay_app, name="relay")
app.add_typer(agent.app, name="agent")

START_TIMEOUT = 15.0
STOP_TIMEOUT = 30.0

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None, typer.Option("--home", help="Data directory (default $HARNESS_HOME, else per user).")
]
SocketOpt = Annotated[
    str | None, typer.Option("--socket", help="Another local daemon's socket (default: from daemon.json).")
]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key",
        help=f"Private member key (acts as that member; `ps` shows it: use --key-file or ${MEMBER_KEY_ENV}).",
    ),
]
KeyFileOpt = Annotated[
    Path | None,
    typer.Option("--key-file", help="File holding the private member key (the one the introduction names)."),
]
MachineOpt = Annotated[
    str | None,
    typer.Option("--machine", help="The paired machine that owns the team (through this daemon's relay)."),
]
TeamOpt = Annotated[str | None, typer.Option("--team", help="Team id.")]
TextOpt = Annotated[str | None, typer.Argument(metavar="TEXT")]
TextFileOpt = Annotated[Path | None, typer.Option("--text-file", help="Read TEXT from a file (- for stdin).")]
QuestionArg = Annotated[str, typer.Argument(metavar="QUESTION_ID")]


def _opts(
    ctx: typer.Context,
    json_out: bool,
    home: str | None,
    socket: str | None,
    key: str | None,
    *,
    machine: str | None = None,
    key_file: Path | None = None,
    team: str | None = None,
) -> Options:
    base = ctx.obj if isinstance(ctx.obj, Options) else Options()
    return base.merge(json_out, home, socket, key, machine=machine, key_file=key_file, team=team)


_CONTEXT = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
_COMMON = tuple(
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    for name, annotation, default in (
        ("team", TeamOpt, None),
        ("json_out", JsonOpt, False),
        ("home", HomeOpt, None),
        ("socket", SocketOpt, None),
        ("key", KeyOpt, None),
        ("key_file", KeyFileOpt, None),
        ("machine", MachineOpt, None),
    )
)


def team_command(
    name: str, cli_name: str | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `harness team NAME` from a declaration: a function whose signature holds the command's own
    arguments and options (their values go to `commands.SPECS[name]` by parameter name) and whose docstring
    is its help. The options every team command takes (also before the subcommand) are added here, once."""

    def register(declaration: Callable[..., None]) -> Callable[..., None]:
        own = tuple(inspect.signature(declaration).parameters.values())

        def command(ctx: typer.Context, **given: Any) -> None:
            team, json_out, home, socket, key, key_file, machine = (given.pop(p.name) for p in _COMMON)
            opts = _opts(ctx, json_out, home, socket, key, machine=machine, key_file=key_file, team=team)
            commands.SPECS[name].run(opts, given)

        parameters = (_CONTEXT, *own, *_COMMON)
        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        command.__name__ = declaration.__name__
        command.__doc__ = declaration.__doc__
        team_app.command(cli_name or name)(command)
        return command

    return register


def _print_version(given: bool) -> None:
    if given:
        from importlib.metadata import version

        print(f"harness {version('harness')}")
        raise typer.Exit()


@app.callback()
def harness(
    *,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    pass


def run_typer(argv: list[str], json_out: bool) -> int:
    """Run `app` on `argv` and return its exit status. A usage error is one line (one JSON document with
    --json) with code `bad_request` and status 2, like the fast path's, never click's boxed message."""
    try:
        status = typer.main.get_command(app).main(argv, prog_name="harness", standalone_mode=False)
    except NoArgsIsHelpError:  # the help has been printed
        return output.USAGE
    except ClickException as error:
        context = getattr(error, "ctx", None)
        hint = "" if context is None else f"; see `{context.command_path} --help`"
        output.emit_error(json_out, "bad_request", error.format_message().rstrip(".") + hint)
        return output.USAGE
    return status if isinstance(status, int) else output.OK


# --- harness team -------------------------------------------------------------------------------------------


@team_app.callback()
def team_options(
    ctx: typer.Context,
    *,
    team: TeamOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    socket: SocketOpt = None,
    key: KeyOpt = None,
    key_file: KeyFileOpt = None,
    machine: MachineOpt = None,
) -> None:
    ctx.obj = Options().merge(json_out, home, socket, key, machine=machine, key_file=key_file, team=team)


@team_command("create")
def create(
    *,
    file: Annotated[
        Path, typer.Option("--file", help="team.json: {id?, name, members: [...]}; - for stdin.")
    ],
) -> None:
    """Create a team (idempotent by its id; one is drawn when the file has none)."""


@team_command("list")
def list_teams() -> None:
    """Every team this daemon owns."""


@team_command("get")
def get() -> None:
    """The team's snapshot: roster and exchanges (never a member key)."""


@team_command("members")
def members() -> None:
    """The roster with membership ids (use them for --from, --member, remove)."""


@team_command("add")
def add(
    *,
    file: Annotated[Path, typer.Option("--file", help="member.json: {id?, machineId, agentId, name, role}.")],
) -> None:
    """Add a member (idempotent by its id; one is drawn when the file has none)."""


@team_command("remove")
def remove(
    membership_id: Annotated[str, typer.Argument(metavar="MEMBERSHIP_ID")],
) -> None:
    """Remove a member; its key stops working, its exchanges stay attributable."""


@team_command("key")
def member_key(
    member: Annotated[str, typer.Argument(metavar="MEMBER", help="Membership id or name.")],
) -> None:
    """Owner only: a member's private key, its key file and the command prefix its introduction teaches."""


@team_command("pause")
def pause() -> None:
    """Hold new questions and unsent notices."""


@team_command("resume")
def resume() -> None:
    """Release held work."""


@team_command("archive")
def archive() -> None:
    """Keep the record, cancel pending work."""


@team_command("ask")
def ask(
    to: Annotated[str, typer.Argument(metavar="TO", help="Member name or membership id.")],
    text: TextOpt = None,
    *,
    context: Annotated[str | None, typer.Option("--context", help="What the peer needs to know.")] = None,
    ttl: Annotated[float | None, typer.Option("--ttl", help="Deadline in seconds (10 s to 24 h).")] = None,
    parent: Annotated[str | None, typer.Option("--parent", help="Follow-up of this question id.")] = None,
    no_notify: Annotated[
        bool, typer.Option("--no-notify", help="No answer notice; read it with inbox.")
    ] = False,
    operation_id: Annotated[
        str | None, typer.Option("--id", help="Operation id (reuse it to retry).")
    ] = None,
    text_file: TextFileOpt = None,
    from_member: Annotated[
        str | None, typer.Option("--from", help="Owner only: ask for this member.")
    ] = None,
) -> None:
    """Ask a teammate; the operation id becomes the question id."""


@team_command("reply")
def reply(
    question_id: QuestionArg,
    text: TextOpt = None,
    *,
    evidence: Annotated[
        list[str] | None, typer.Option("--evidence", help="Reference (path:line); repeat.")
    ] = None,
    text_file: TextFileOpt = None,
    member: Annotated[
        str | None, typer.Option("--member", help="Owner only: answer for this member.")
    ] = None,
) -> None:
    """Answer a question addressed to you (the only way a question is answered)."""


@team_command("inbox")
def inbox() -> None:
    """Questions waiting for you and recent answers to yours."""


@team_command("status")
def status(
    question_id: Annotated[str | None, typer.Argument(metavar="[QUESTION_ID]")] = None,
) -> None:
    """One exchange, or every exchange you may see."""


@team_command("wait")
def wait(
    question_id: QuestionArg,
    *,
    seconds: Annotated[
        float, typer.Option("--seconds", help="Give up after this long (never cancels).")
    ] = commands.DEFAULT_WAIT_SECONDS,
) -> None:
    """Block until the question is answered or ends, a question for you arrives, or time runs out."""


@team_command("cancel")
def cancel(
    question_id: QuestionArg,
) -> None:
    """Cancel your open question (withdraws its unsent notice; never interrupts the peer)."""


@team_command("delivery")
def delivery(
    question_id: QuestionArg,
    *,
    answer: Annotated[
        bool, typer.Option("--answer", help="The answer's continuation notice, not the question's.")
    ] = False,
) -> None:
    """Owner: ask the destination's desk what became of a notice (through the relay for a paired machine);
    never sends anything again."""


@team_command("capabilities")
def capabilities() -> None:
    """What the daemon speaks: {"protocol": "team.v1", ...}."""


@team_app.command()
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
    opts = _opts(ctx, json_out, home, socket, None, machine=machine, team=team)
    if not opts.team:
        usage(opts, "'watch' needs --team TEAM_ID")
    commands.require_text(opts, {"--team": opts.team, "--machine": opts.machine})
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


@team_app.command()
def export(
    ctx: typer.Context,
    *,
    out: Annotated[Path, typer.Option("--out", help="New file for the copy (never overwritten).")],
    team: TeamOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
) -> None:
    """Write a consistent backup of the team's ledger (safe beside a running daemon)."""
    from harness.io.doctor import export_team
    from harness.io.journal import CorruptState

    opts = _opts(ctx, json_out, home, None, None, team=team)
    if not opts.team:
        usage(opts, "'export' needs --team TEAM_ID")
    try:
        result = export_team(homes.resolve_home(opts.home), opts.team, out)
    except CorruptState as error:
        fail(
            opts, output.PROTOCOL_ERROR, "corrupt_state", f"{error}; copy the directory byte for byte instead"
        )
    except FileNotFoundError:
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"no ledger of team {opts.team!r}")
    except FileExistsError as error:
        usage(opts, str(error))
    show(opts, result, output.show_mapping)


# --- harness daemon -----------------------------------------------------------------------------------------


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


def _running(opts: Options, home: Path) -> dict[str, Any]:
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
def stop(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Stop the background daemon cleanly (SIGTERM) and wait until it is gone."""
    opts = Options().merge(json_out, home, None, None)
    home_dir = homes.resolve_home(home)
    info = _running(opts, home_dir)
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while homes.pid_alive(pid):
        if time.monotonic() > deadline:
            fail(opts, output.UNCERTAIN, "uncertain", f"pid {pid} did not stop within {STOP_TIMEOUT:g} s")
        time.sleep(0.02)
    show(opts, {"stopped": True, "pid": pid, "home": str(home_dir)}, output.show_mapping)


@daemon_app.command("status")
def daemon_status(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Whether a daemon runs for the data directory: machineId, socket, pid, and its listeners' counters
    (connections refused as another user, frames refused, connections dropped, internal errors)."""
    opts = Options().merge(json_out, home, None, None)
    show(opts, _running(opts, homes.resolve_home(home)), output.show_mapping)


# --- other commands -----------------------------------------------------------------------------------------


@app.command()
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


@app.command()
def doctor(
    team: TeamOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check every ledger store (read-only, safe beside a running daemon); exit 1 if any is damaged. Also
    shows what the running daemon's listeners refused and dropped, and its relay link (state, last error,
    what paired machines and strangers had refused)."""
    from harness.io.doctor import daemon_listeners, inspect_data_dir

    opts = Options().merge(json_out, home, None, None)
    home_dir = homes.resolve_home(home)
    report = inspect_data_dir(home_dir, team_id=team)
    daemon = daemon_listeners(home_dir)
    report["daemon"] = daemon
    if opts.json:
        output.emit_json(report)
    else:
        listeners = daemon.get("listeners")
        if isinstance(listeners, dict):
            for name, counts in listeners.items():
                print(f"daemon {name}: " + ", ".join(f"{key} {value}" for key, value in counts.items()))
        else:
            print(f"daemon: not running ({daemon.get('detail')})")
        remote = daemon.get("remote")
        if isinstance(remote, dict):
            print(output.shown(_relay_line(remote)))
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
            print(f"{what}: {state}")
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


@app.command()
def demo() -> None:
    """Watch two scripted agents in a private tmux server: a team, an ask, a reply and the continuation."""
    from harness.cli.demo import run_demo

    run_demo()


def _register_check() -> None:
    # Imported lazily: the model checker pulls in every scenario, which plain `team` calls never need.
    from harness.cli.check import check_command

    app.command("check", help="Model-check the protocol over the real reducers (scenarios, mutants).")(
        check_command
    )


_register_check()
