# `harness session`: run a coordination session (spec/session-v1.md) of engines in tmux, hosted by the
# running daemon (io/session_keeper.py) and followed here, and read or stop one from another shell. Each
# NAME=ENGINE is an agent this machine has registered under that name (`harness agent start|attach`), or one
# this command starts with `harness agent start` when its engine is an installed one (claude, codex, gemini,
# grok); a scripted or shell agent runs a program only its owner can name, so it is started beforehand.
# The session tools that are no team operation (announce, rollcall, rfc, acknowledge) are commands an engine
# runs with its member key: each leaves a call file for the session's runner and waits for its result.
from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import output
from harness.cli.agent import ENGINE_COMMANDS
from harness.cli.commands import Options, fail, member_key, read_text, require_text, show, usage
from harness.core import session as s
from harness.core.bounded_json import parse_own
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import ID_PATTERN
from harness.io import home as homes
from harness.io import session_files

if TYPE_CHECKING:  # loaded by the commands that use it: it brings trio, which no other command needs here
    from harness.io import session_runner as runner

session_app = typer.Typer(
    help="Coordination sessions: run, status, stop; a member's tools: announce, rollcall, rfc, acknowledge, "
    "recess.",
    no_args_is_help=True,
)

SESSION_ID_CHARS = 48  # room for the suffixes of the session's own question ids within the ledger's 128
# The orchestrator's words around the brief in the lead's introduction fit in what is left of a question.
BRIEF_CHARS = DEFAULT_LIMITS.question_chars - 2_000

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None, typer.Option("--home", help="Data directory (default $HARNESS_HOME, else per user).")
]
SocketOpt = Annotated[
    str | None,
    typer.Option("--daemon-socket", help="Another local daemon's socket (default: from daemon.json)."),
]
SessionArg = Annotated[str, typer.Argument(metavar="SESSION_ID", help="The session's id.")]
KeyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--key-file", help="The member key file your introduction named (else $HARNESS_MEMBER_KEY)."
    ),
]
TextArg = Annotated[str | None, typer.Argument(metavar="[TEXT]", help="The text (or --text-file).")]
TextFileOpt = Annotated[Path | None, typer.Option("--text-file", help="Read the text from this file.")]
CallIdOpt = Annotated[
    str | None, typer.Option("--id", help="The call's id (default: drawn); repeat it to retry the same call.")
]
WaitOpt = Annotated[float, typer.Option("--wait", help="Seconds to wait for the session's answer.")]
CALL_WAIT_SECONDS = 60.0
CALL_POLL_SECONDS = 0.1
FOLLOW_SECONDS = 0.25  # how often `session run` looks at the status of the session the daemon hosts


def _opts(json_out: bool, home: str | None, socket: str | None) -> Options:
    return Options().merge(json_out, home, socket, None)


def _seat_spec(opts: Options, option: str, value: str) -> tuple[str, str]:
    from harness.io import session_runner as runner
    from harness.io.profiles import ENGINES

    name, _, engine = value.partition("=")
    if not name or not engine:
        usage(opts, f"{option} takes NAME=ENGINE, not {value!r}")
    if not ID_PATTERN.fullmatch(name) or name == runner.ORCHESTRATOR_NAME:
        usage(opts, f"{option} {value!r}: a name is letters, digits, '.', '_', ':' or '-', and not 'session'")
    if engine not in ENGINES:
        usage(opts, f"{option} {value!r}: unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    return name, engine


def _brief(opts: Options, path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        usage(opts, f"cannot read the brief {path}: {error}")
    if not text.strip():
        usage(opts, f"the brief {path} is empty")
    if len(text) > BRIEF_CHARS:
        fail(
            opts,
            output.USAGE,
            "bound_exceeded",
            f"the brief has {len(text)} characters; at most {BRIEF_CHARS} (the lead gets it as one notice)",
        )
    return text.strip()


def _seat(opts: Options, call: Any, name: str, engine: str) -> runner.Seat:
    """The registered agent of this name, or one `harness agent start` starts for an installed engine."""
    from harness.io import session_runner as runner
    from harness.io.client import RemoteError

    try:
        entry = call("agent_show", {"agentId": name})
    except RemoteError as error:
        if error.code != "not_found":
            fail(opts, output.PROTOCOL_ERROR, error.code, error.detail)
        entry = _start_agent(opts, name, engine)
    if entry.get("engine") != engine:
        usage(opts, f"agent {name!r} is registered with engine {entry.get('engine')!r}, not {engine!r}")
    return runner.Seat(name, str(entry["agentId"]))


def _start_agent(opts: Options, name: str, engine: str) -> dict[str, Any]:
    if engine not in ENGINE_COMMANDS:
        usage(
            opts,
            f"no agent {name!r} is registered; start it first: harness agent start --engine {engine} "
            f"--name {name} -- PROGRAM",
        )
    argv = [sys.executable, "-m", "harness.cli.main", "agent", "start", "--engine", engine, "--name", name]
    argv += ["--json", *(["--home", opts.home] if opts.home else [])]
    argv += ["--daemon-socket", opts.socket] if opts.socket else []
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"error": "unavailable", "detail": (done.stderr or done.stdout).strip()[-500:]}
    if done.returncode != 0 or not isinstance(result, dict):
        fail(opts, output.PROTOCOL_ERROR, str(result.get("error")), f"agent {name}: {result.get('detail')}")
    return result


@session_app.command("run")
def run_session(
    *,
    mode: Annotated[str, typer.Option("--mode", help="supervise, facilitate, discuss, run or judge.")],
    lead: Annotated[str, typer.Option("--lead", help="NAME=ENGINE: the agent that leads.")],
    agent: Annotated[
        list[str] | None, typer.Option("--agent", help="NAME=ENGINE: a participant (repeatable).")
    ] = None,
    brief: Annotated[Path, typer.Option("--brief", help="A text file: the lead's brief.")],
    session_id: Annotated[
        str | None, typer.Option("--id", help="The session's id, also its team's (default: drawn).")
    ] = None,
    reminder_after: Annotated[
        float, typer.Option("--reminder-after", help="Seconds an ask is owed before its one reminder.")
    ] = s.DEFAULT_SESSION_LIMITS.reminder_after_ms / 1000,
    violation_after: Annotated[
        float,
        typer.Option("--violation-after", help="Seconds after the reminder until a protocol violation."),
    ] = s.DEFAULT_SESSION_LIMITS.violation_after_ms / 1000,
    lead_turns: Annotated[
        int,
        typer.Option("--lead-turns", help="The lead's turns before the session stops (lead_turn_limit)."),
    ] = s.DEFAULT_SESSION_LIMITS.lead_turns,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    daemon_socket: SocketOpt = None,
) -> None:
    """Start (or attach) the engines and hand the session to the daemon, which forms a team, introduces each
    with its role's tools, gives the lead the brief and runs it (across its own restarts); follow it here
    until it ends: exit 0 when it concluded, 1 when it stopped. Interrupted, the session runs on."""
    from harness.io import session_runner as runner
    from harness.io.client import Client, ClientError, locate_socket
    from harness.io.session_keeper import write_plan

    opts = _opts(json_out, home, daemon_socket)
    if mode not in tuple(s.Mode):
        usage(opts, f"unknown mode {mode!r}; one of {', '.join(s.Mode)}")
    sid = session_id or f"s-{secrets.token_hex(4)}"
    if not ID_PATTERN.fullmatch(sid) or len(sid) > SESSION_ID_CHARS:
        usage(opts, f"--id {sid!r}: at most {SESSION_ID_CHARS} letters, digits, '.', '_', ':' or '-'")
    specs = [_seat_spec(opts, "--lead", lead), *(_seat_spec(opts, "--agent", a) for a in agent or [])]
    for seconds, option in ((reminder_after, "--reminder-after"), (violation_after, "--violation-after")):
        if not 0 < seconds <= 24 * 3600:
            usage(opts, f"{option} is more than 0 and at most a day of seconds")
    if not 0 < lead_turns <= s.DEFAULT_SESSION_LIMITS.lead_turns:
        usage(opts, f"--lead-turns is from 1 to {s.DEFAULT_SESSION_LIMITS.lead_turns}")
    names = [name for name, _ in specs]
    # The session's own checks (participants per mode, bounds) before any engine is started for it.
    formed = s.step(None, s.Start(0, sid, s.Mode(mode), names[0], tuple(names[1:])))
    if isinstance(formed, Rejected):
        usage(opts, formed.detail)
    text = _brief(opts, brief)
    home_dir = homes.resolve_home(opts.home)
    if session_files.session_dir(home_dir, sid).exists():
        fail(opts, output.PROTOCOL_ERROR, "conflict", f"session {sid!r} exists already; give another --id")
    token = homes.read_owner_token(home_dir)
    try:
        socket_path, _ = locate_socket(home_dir, opts.socket)
        with Client(socket_path) as client:
            capabilities = client.check_compatible()

            def call(action: str, fields: dict[str, Any]) -> Any:
                team = None if action in ("create", "agent_show") else sid
                return client.request(action, team_id=team, owner_token=token, fields=fields)

            seats = [_seat(opts, call, name, engine) for name, engine in specs]
            limits = s.SessionLimits(
                reminder_after_ms=round(reminder_after * 1000),
                violation_after_ms=round(violation_after * 1000),
                lead_turns=lead_turns,
            )
            plan = runner.SessionPlan(
                sid, s.Mode(mode), seats[0], tuple(seats[1:]), text, str(capabilities["machineId"]), limits
            )
            write_plan(home_dir, plan)  # the daemon hosts it from here on, across its own restarts
    except ClientError as error:
        fail(opts, output.UNREACHABLE, "unavailable", error.detail)
    view = _follow(opts, home_dir, sid)
    show(opts, view, _show_status)
    raise SystemExit(output.OK if view["termination"] == "concluded" else output.PROTOCOL_ERROR)


def _follow(opts: Options, home: Path, session_id: str) -> dict[str, Any]:
    """Wait for the daemon to end the session and answer the calls left before the end; its last status. A
    daemon that is down meanwhile (a crash, a restart) resumes the session when it starts again."""
    from harness.io.session_keeper import FAILED_FILE

    while True:
        failed = _result(session_files.session_dir(home, session_id) / FAILED_FILE)
        if failed is not None:
            fail(opts, output.PROTOCOL_ERROR, str(failed.get("error")), str(failed.get("detail")))
        view = _read_status(opts, home, session_id)
        if view is not None and view.get("state") == "ended" and view.get("callsClosed"):
            return view
        time.sleep(FOLLOW_SECONDS)


def _show_status(view: dict[str, Any], look: output.Look) -> None:
    if view.get("state") == "unreadable":
        output.say(f"session {view['sessionId']}: unreadable ({view['detail']})", look)
        return
    ended = f"{view['termination']} ({view.get('reason')})" if view.get("termination") else "running"
    output.say(f"session {view['sessionId']} ({view['mode']}, led by {view['lead']}): {ended}", look)
    for ask in view["asks"]:
        why = f" ({ask['reason']})" if ask.get("reason") else ""
        output.say(f"  ask {ask['id']}: {ask['asker']} -> {ask['to']}: {ask['state']}{why}", look)
    output.say(f"  reminders {len(view['reminders'])}, violations {', '.join(view['violations']) or 'none'}")
    if view.get("summary"):
        output.say(f"  summary: {view['summary']}", look)
    output.say(f"  trace: {view['trace']}", look)


def _show_sessions(listed: dict[str, Any], look: output.Look) -> None:
    for view in listed["sessions"]:
        _show_status(view, look)
    if not listed["sessions"]:
        output.say("no sessions", look)


@session_app.command("status")
def status(
    session_id: Annotated[str | None, typer.Argument(metavar="[SESSION_ID]", help="One session.")] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
) -> None:
    """A session's state, asks, reminders and violations as its runner last wrote them; without an id, every
    session of the data directory."""
    opts = _opts(json_out, home, None)
    home_dir = homes.resolve_home(opts.home)
    if session_id is None:
        views = [_listed_status(home_dir, sid) for sid in session_files.sessions(home_dir)]
        listed = {"sessions": [_alive(v) for v in views if v is not None]}
        show(opts, listed, _show_sessions)
        return
    show(opts, _alive(_status(opts, home_dir, session_id)), _show_status)


def _status(opts: Options, home: Path, session_id: str) -> dict[str, Any]:

    if not ID_PATTERN.fullmatch(session_id):
        usage(opts, f"not a session id: {session_id!r}")
    view = _read_status(opts, home, session_id)
    if view is None:
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"no session {session_id!r} in {home}")
    return view


def _read_status(opts: Options, home: Path, session_id: str) -> dict[str, Any] | None:
    try:
        return session_files.read_status(home, session_id)
    except session_files.StatusUnreadable as error:
        fail(opts, output.PROTOCOL_ERROR, "corrupt_state", str(error))


def _listed_status(home: Path, session_id: str) -> dict[str, Any] | None:
    """One session of the listing: a damaged status is listed as such, and hides none of the others."""
    try:
        return session_files.read_status(home, session_id)
    except session_files.StatusUnreadable as error:
        return {"sessionId": session_id, "state": "unreadable", "detail": str(error)}


def _alive(view: dict[str, Any]) -> dict[str, Any]:
    """A running session whose runner is gone says so (it ended without its summary)."""
    pid = view.get("pid")
    gone = view.get("state") == "running" and not (isinstance(pid, int) and homes.pid_alive(pid))
    return {**view, "runnerGone": gone}


@session_app.command("stop")
def stop(session_id: SessionArg, json_out: JsonOpt = False, home: HomeOpt = None) -> None:
    """Stop a running session (abort): its runner cancels every ask in flight with the reason and ends it
    `stopped`."""
    from harness.io import session_runner as runner

    opts = _opts(json_out, home, None)
    home_dir = homes.resolve_home(opts.home)
    view = _alive(_status(opts, home_dir, session_id))
    if view["state"] != "running" or view["runnerGone"]:
        fail(opts, output.PROTOCOL_ERROR, "conflict", f"session {session_id!r} is not running")
    runner.request_stop(home_dir, session_id)
    show(opts, {"sessionId": session_id, "stopRequested": True}, output.show_mapping)


# --- a member's session tools -----------------------------------------------------------------------------


def _call_tool(
    opts: Options, session_id: str, tool: str, text: str, *, call_id: str | None, wait: float
) -> dict[str, Any]:
    """Leave one call file for the session's runner and wait for its result file; the result, or a one-line
    error with the session's code."""
    from harness.io import session_runner as runner

    require_text(opts, {"SESSION_ID": session_id, "TEXT": text, "--id": call_id})
    key = member_key(opts)
    if key is None:
        usage(opts, "a session tool acts as a member: give --key-file KEY_FILE (or $HARNESS_MEMBER_KEY)")
    cid = call_id or f"c-{secrets.token_hex(8)}"
    if not ID_PATTERN.fullmatch(cid) or len(cid) > runner.CALL_ID_CHARS:
        usage(opts, f"--id {cid!r}: at most {runner.CALL_ID_CHARS} letters, digits, '.', '_', ':' or '-'")
    if not 0 < wait <= 3600:
        usage(opts, "--wait is more than 0 and at most an hour of seconds")
    home_dir = homes.resolve_home(opts.home)
    view = _alive(_status(opts, home_dir, session_id))
    if view["state"] != "running" or view["runnerGone"]:
        fail(opts, output.PROTOCOL_ERROR, "conflict", f"session {session_id!r} is not running")
    calls = session_files.session_dir(home_dir, session_id) / runner.CALLS_DIR
    result_file = calls / f"{cid}{runner.RESULT_SUFFIX}"
    result_file.unlink(missing_ok=True)  # a retry of the same id waits for its own answer, not the last one
    call = {"tool": tool, "text": text, "keyDigest": runner.key_digest(key)}
    try:
        homes.write_private_json(calls / f"{cid}{runner.CALL_SUFFIX}", call)
    except OSError as error:
        fail(
            opts,
            output.PROTOCOL_ERROR,
            "unavailable",
            f"cannot leave the call for session {session_id}: {error}",
        )
    deadline = time.monotonic() + wait
    result = _result(result_file)
    while result is None:
        now = _alive(_read_status(opts, home_dir, session_id) or view)
        closed = now["runnerGone"] or now.get("callsClosed")
        if closed or time.monotonic() >= deadline:
            result = _result(result_file)  # answered just before it closed
            if result is not None:
                break
            if closed:
                fail(opts, output.PROTOCOL_ERROR, "conflict", f"session {session_id!r} ended first", cid)
            detail = (
                f"session {session_id}'s runner did not answer call {cid} in time; repeat it with --id {cid}"
            )
            fail(opts, output.UNREACHABLE, "unavailable", detail, cid)
        time.sleep(CALL_POLL_SECONDS)
        result = _result(result_file)
    result_file.unlink(missing_ok=True)
    if "error" in result:
        fail(opts, output.PROTOCOL_ERROR, str(result["error"]), str(result.get("detail")), cid)
    return {"callId": cid, **result["result"]}


def _result(path: Path) -> dict[str, Any] | None:
    """The runner's answer to a call, once written (it is renamed into place whole)."""
    try:
        data = parse_own(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _text_tool(tool: str, doc: str) -> None:
    """Register `harness session TOOL SESSION_ID TEXT`: the tools that carry a text differ only in it."""

    def command(
        session_id: SessionArg,
        text: TextArg = None,
        *,
        text_file: TextFileOpt = None,
        call_id: CallIdOpt = None,
        key_file: KeyFileOpt = None,
        wait: WaitOpt = CALL_WAIT_SECONDS,
        json_out: JsonOpt = False,
        home: HomeOpt = None,
    ) -> None:
        opts = Options().merge(json_out, home, None, None, key_file=key_file)
        body = read_text(opts, text, text_file, "text")
        show(opts, _call_tool(opts, session_id, tool, body, call_id=call_id, wait=wait), output.show_mapping)

    command.__doc__ = doc
    session_app.command(tool)(command)


_text_tool(
    "announce",
    "Announce: leave every other member of the session a board note (pulled, never pushed), counted against "
    "the session's announcement budget; no reply is expected.",
)
_text_tool(
    "rfc",
    "RequestForComment: record an intent to open a new discussion thread later (kept apart from the "
    "thread's replies).",
)
_text_tool(
    "recess",
    "Recess (a discuss session's lead): pause the discussion; it ends the session `concluded` with TEXT as "
    "its summary and cancels every ask still in flight, telling each asker why.",
)
_text_tool(
    "acknowledge",
    "Acknowledge: post a brief message (a status update, a follow-up) to a discuss session's thread.",
)


@session_app.command("rollcall")
def rollcall(
    session_id: SessionArg,
    *,
    key_file: KeyFileOpt = None,
    wait: WaitOpt = CALL_WAIT_SECONDS,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
) -> None:
    """RollCall: each member's screen (idle, busy, draft, dialog, offline), the asks it owes and its last
    activity."""
    opts = Options().merge(json_out, home, None, None, key_file=key_file)
    show(opts, _call_tool(opts, session_id, "rollcall", "", call_id=None, wait=wait), _show_roll_call)


def _show_roll_call(view: dict[str, Any], look: output.Look) -> None:
    for member in view["members"]:
        owed = ", ".join(member["owed"]) or "nothing"
        line = f"{member['name']} ({member['role']}): {member['observed']}; owes {owed}"
        output.say(f"{line}; last active {member['lastActivityAt']}", look)
