# The `harness team` commands as plain functions, plus a fast path that parses the common invocations
# without Typer. Agents call these inside their turns, and Typer 0.29 builds pydantic adapters for every
# parameter at parse time (well over 100 ms); the fast path takes the exact grammar of the Typer commands
# and hands anything else (help, a typo, a missing argument) to Typer, which then explains it. Both paths
# run the same functions below; a test keeps the two option tables equal.
from __future__ import annotations

import json
import math
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from harness.cli import output
from harness.core.actions import TEAM_ACTIONS, Answer, Kind, Refers, TeamAction
from harness.core.bounded_json import JsonRefused, parse_json
from harness.io import home as homes
from harness.io.client import (
    REPLY_TIMEOUT,
    Client,
    ClientError,
    RemoteError,
    Uncertain,
    Unreachable,
    incompatibility,
    locate_socket,
)
from harness.io.rpc import INCOMPATIBLE, MAX_FRAME_BYTES

MEMBER_KEY_ENV = "HARNESS_MEMBER_KEY"
DEFAULT_WAIT_SECONDS = 30.0
# The daemon refuses a wait beyond its own bound (an hour) at once, so no reply is awaited longer than this.
LONGEST_WAIT = 24 * 3600.0


class Options:
    """Options given on `harness team` and on its subcommands (each is taken in both places); the
    subcommand's win."""

    def __init__(self) -> None:
        self.team: str | None = None
        self.json = False
        self.home: str | None = None
        self.socket: str | None = None  # another local daemon's socket (default: from daemon.json)
        self.key: str | None = None
        self.key_file: Path | None = None
        self.machine: str | None = None  # the paired machine that owns the team (else this one)
        self.wide = False  # readable output with whole ids and cells, however long its lines

    def merge(
        self,
        json_out: bool,
        home: str | None,
        socket: str | None,
        key: str | None,
        *,
        machine: str | None = None,
        key_file: Path | None = None,
        team: str | None = None,
        wide: bool = False,
    ) -> Options:
        self.team = team or self.team
        self.json = self.json or json_out
        self.wide = self.wide or wide
        self.home = home or self.home
        self.socket = socket or self.socket
        self.key = key or self.key
        self.key_file = key_file or self.key_file
        self.machine = machine or self.machine
        return self


def fail(
    opts: Options,
    status: int,
    code: str,
    detail: str,
    operation_id: str | None = None,
    *,
    retry: str | None = None,
) -> NoReturn:
    output.emit_error(opts.json, code, detail, operation_id, retry=retry)
    raise SystemExit(status)


def usage(opts: Options, detail: str) -> NoReturn:
    fail(opts, output.USAGE, "bad_request", detail)


def member_key(opts: Options) -> str | None:
    """The member key to act with: `--key`, else the file `--key-file` names (what introductions teach, so
    that no key shows on a command line), else $HARNESS_MEMBER_KEY; None acts as the owner."""
    if opts.key and opts.key_file:
        usage(opts, "give --key or --key-file, not both")
    if opts.key_file is not None:
        try:
            return homes.read_member_key(opts.key_file)
        except homes.HomeError as error:
            usage(opts, str(error))
    return opts.key or os.environ.get(MEMBER_KEY_ENV) or None


def require_text(opts: Options, given: dict[str, Any]) -> None:
    """Usage error naming the first value (a string, or a list of them) that is not Unicode text: one with a
    lone surrogate, which is how Python passes on bytes that are not UTF-8 in an argument or the environment.
    No frame to the daemon can carry one. (JSON files are parsed strictly, so their values are text.)"""
    for name, value in given.items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    usage(opts, f"{name} is not valid UTF-8 text")


def _request(
    opts: Options,
    action: str,
    fields: dict[str, Any] | None,
    *,
    team: bool,
    operation_id: str | None,
    timeout: float,
) -> Any:
    """One request to the daemon of `opts.home` (or, with --machine, through its gateway to the paired machine
    that owns the team); raises the client's errors."""
    home = homes.resolve_home(opts.home)
    key = member_key(opts)
    given = {"--team": opts.team, "--machine": opts.machine, "the member key": key, **(fields or {})}
    require_text(opts, given)
    if opts.machine:
        # Imported here: the relay stack (trio, nacl) would slow every local call of an agent's turn.
        from harness.io.remote_client import call_remote

        return call_remote(
            home,
            opts.machine,
            action,
            team_id=opts.team if team else None,
            member_key=key,
            fields=fields,
            operation_id=operation_id,
            timeout=timeout,
        )
    where, info = locate_socket(home, opts.socket)
    if info is not None:
        problem = incompatibility(info.get("protocol"), info.get("protocolRevision"))
        if problem is not None:
            raise RemoteError(INCOMPATIBLE, problem)
    with Client(where) as client:
        if info is None:
            client.check_compatible()
        return client.request(
            action,
            team_id=opts.team if team else None,
            member_key=key,
            owner_token=None if key else homes.read_owner_token(home),
            fields=fields,
            operation_id=operation_id,
            timeout=timeout,
        )


def call(
    opts: Options,
    action: str,
    fields: dict[str, Any] | None = None,
    *,
    team: bool = True,
    operation_id: str | None = None,
    timeout: float = REPLY_TIMEOUT,
    retry: str | None = None,
    explain: Callable[[RemoteError], str] | None = None,
) -> Any:
    """`_request` with the contract's exit status for every failure. `retry` tells how a retry reuses the
    operation id (shown only when the outcome is uncertain: a rejection is final); `explain` words a
    rejection for the options this command took."""
    if team and not opts.team:
        usage(opts, f"'{action}' needs --team TEAM_ID")
    if team:
        _resolve_team(opts)
    try:
        return _request(opts, action, fields, team=team, operation_id=operation_id, timeout=timeout)
    except Unreachable as error:
        fail(opts, output.UNREACHABLE, "unreachable", error.detail)
    except Uncertain as error:
        detail = f"{error.detail}; the outcome is unknown"
        fail(opts, output.UNCERTAIN, "uncertain", detail, error.operation_id, retry=retry)
    except RemoteError as error:
        detail = error.detail if explain is None else explain(error)
        fail(opts, output.PROTOCOL_ERROR, error.code, detail, error.operation_id)
    except OSError as error:  # the data directory's own files (the owner token) cannot be read
        home = homes.resolve_home(opts.home)
        fail(opts, output.PROTOCOL_ERROR, "bad_request", f"cannot use the data directory {home}: {error}")


def show(
    opts: Options, result: Any, render: Callable[[Any, output.Look], None], *, named: bool = False
) -> None:
    """Print `result` as JSON, or readably; `named` readable output shows member names for membership ids,
    read with one more request (`members`), as exchanges carry only the ids."""
    if opts.json:
        output.emit_json(result)
    else:
        render(result, output.Look(opts.wide, _names(opts) if named else {}))


def _names(opts: Options) -> dict[str, str]:
    """Membership id -> name; empty when the roster cannot be read (the ids are shown instead)."""
    try:
        roster = _request(opts, "members", None, team=True, operation_id=None, timeout=REPLY_TIMEOUT)
        return {str(m["id"]): str(m["name"]) for m in roster["members"]}
    except (ClientError, OSError, LookupError, TypeError):
        return {}


# --- ids given by a prefix, like git's short hashes -------------------------------------------------------
# Readable output shows ids cut to a unique prefix, and every id argument takes one back. The daemon knows
# only whole ids, so a prefix is resolved here from one more read (`status` lists the exchanges the caller
# may see, `members` the roster, `list` the teams), made only for what may be such a prefix (`_whole`).

_HEX = frozenset("0123456789abcdef")


def _whole(given: str | None) -> bool:
    """Whether `given` is sent as it is: anything but 4 to 31 hex digits, which may be the prefix of an id
    the daemon drew (a name, or an id a caller chose, is taken only whole; so no agent's call that names a
    teammate costs a second request)."""
    return given is None or not 4 <= len(given) < 32 or not set(given) <= _HEX


def _pick(opts: Options, given: str, ids: list[str], what: str) -> str:
    """The one of `ids` that is or starts with `given`; `given` itself when none does (the daemon then says
    what is wrong with it); usage error when several do."""
    if given in ids:
        return given
    found = sorted(i for i in ids if i.startswith(given))
    if len(found) > 1:
        shown = ", ".join(found[:4]) + (", …" if len(found) > 4 else "")
        usage(opts, f"{what} {given!r} starts {len(found)} ids ({shown}); give more of it")
    return found[0] if found else given


def _resolve_team(opts: Options) -> None:
    """--team given by a prefix becomes the whole id, from the owner's `list` (a member may not list: its
    --team is sent as it is, as is any --team when the list cannot be read)."""
    if _whole(opts.team) or member_key(opts) is not None:
        return
    try:
        teams = _request(opts, "list", None, team=False, operation_id=None, timeout=REPLY_TIMEOUT)["teams"]
        ids = [str(t["id"]) for t in teams]
    except (ClientError, OSError, LookupError, TypeError):
        return
    assert opts.team is not None
    opts.team = _pick(opts, opts.team, ids, "team id")


def resolve_question(opts: Options, given: str | None) -> str | None:
    """The whole question id that `given` (an id or a prefix of one) names."""
    if given is None or _whole(given):
        return given
    exchanges = call(opts, "status")["exchanges"]
    return _pick(opts, given, [str(e["id"]) for e in exchanges], "question id")


def resolve_member(opts: Options, given: str | None) -> str | None:
    """A member's name as given, or the whole membership id that `given` (an id or a prefix) names."""
    if given is None or _whole(given):
        return given
    members = call(opts, "members")["members"]
    if any(given == m["name"] for m in members):
        return given
    return _pick(opts, given, [str(m["id"]) for m in members], "membership id")


def _read_bytes(path: Path) -> bytes:
    """The contents of `path`, or stdin for `-`; raises OSError."""
    return sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()


def read_text(opts: Options, text: str | None, text_file: Path | None, what: str) -> str:
    if (text is None) == (text_file is None):
        usage(opts, f"give the {what} as an argument or with --text-file, not both and not neither")
    if text_file is None:
        assert text is not None
        return text
    try:
        return _read_bytes(text_file).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        usage(opts, f"cannot read {text_file}: {error}")


def read_json_file(opts: Options, path: Path) -> dict[str, Any]:
    try:
        data = parse_json(_read_bytes(path), max_bytes=MAX_FRAME_BYTES)
    except OSError as error:
        usage(opts, f"cannot read {path}: {error}")
    if isinstance(data, JsonRefused):
        usage(opts, f"cannot read {path} as JSON: {data.detail}")
    if not isinstance(data, dict):
        usage(opts, f"{path} must hold one JSON object")
    try:
        json.dumps(data, allow_nan=False)
    except ValueError:  # 1e999 parses as infinity, which JSON cannot carry on to the daemon
        usage(opts, f"{path} holds a number too large for JSON")
    return data


def finite_seconds(opts: Options, option: str, seconds: float) -> float:
    """`seconds` when it is a number of seconds that also converts to milliseconds; usage error else."""
    if not math.isfinite(seconds * 1000):
        usage(opts, f"{option} takes a number of seconds, not {seconds}")
    return seconds


# --- the team commands: `v` holds the command's own arguments and options by their Python names -----------

Values = dict[str, Any]


def _in_file(data: dict[str, Any]) -> str:
    """How a retry of `create` or `add` reuses the record's id (drawn here when the file has none, so that an
    uncertain outcome can name it)."""
    data.setdefault("id", secrets.token_hex(16))
    return f'"id": {json.dumps(data["id"])} in the file'


def run_create(opts: Options, v: Values) -> None:
    data = read_json_file(opts, v["file"])
    retry = _in_file(data)
    result = call(opts, "create", data, team=False, operation_id=str(data["id"]), retry=retry)
    show(opts, result, output.show_team)
    if not opts.json:
        output.say(f"next: harness team --team {result['id']} members (or get, ask, inbox, watch)")


def _pairs(opts: Options, option: str, given: list[str] | None) -> list[tuple[str, str | None]]:
    """`NAME=VALUE` (or a bare `NAME`) words of a repeated option, in order."""
    pairs: list[tuple[str, str | None]] = []
    for word in given or []:
        name, has_value, value = word.partition("=")
        if not name.strip() or (has_value and not value.strip()):
            usage(opts, f"{option} takes NAME=VALUE, not {word!r}")
        pairs.append((name, value if has_value else None))
    return pairs


def _init_members(opts: Options, v: Values, machine_id: str) -> list[dict[str, str]]:
    """The members `init` writes: each --member NAME=AGENT_ID (NAME alone: the registered agent of that
    name), else every registered agent under its own name."""
    agents = call(opts, "agent_list", team=False)["agents"]
    by_name = {str(a.get("name")): str(a.get("agentId")) for a in agents}
    given = _pairs(opts, "--member", v["member"])
    if not given:
        given = [(name, agent_id) for name, agent_id in by_name.items()]
    if not given:
        usage(
            opts,
            "no agent is registered on this machine: start one (`harness agent start --engine claude --name "
            "alice`) or name each member with --member NAME=AGENT_ID",
        )
    roles = dict(_pairs(opts, "--role", v["role"]))
    for name in roles.keys() - {name for name, _ in given}:
        usage(opts, f"--role {name}=…: no member is named {name!r}")
    members = []
    for name, agent_id in given:
        if agent_id is None and name not in by_name:
            usage(opts, f"no registered agent is named {name!r}; give --member {name}=AGENT_ID")
        agent = agent_id or by_name[name]
        role = roles.get(name) or ""
        members.append({"machineId": machine_id, "agentId": agent, "name": name, "role": role})
    return members


def run_init(opts: Options, v: Values) -> None:
    if opts.machine:
        usage(opts, "'init' writes a team of this machine's agents; run it on the machine that owns the team")
    machine_id = str(call(opts, "capabilities", team=False)["machineId"])
    team = {
        "id": secrets.token_hex(16),
        "name": v["name"] or Path.cwd().name or "team",
        "members": _init_members(opts, v, machine_id),
    }
    text = json.dumps(team, indent=2, ensure_ascii=False) + "\n"
    out: Path = v["out"]
    if str(out) == "-":
        sys.stdout.write(output.json_text(team) + "\n")
        return
    try:
        with out.open("x", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        usage(opts, f"{out} exists; remove it, or give another --out")
    except OSError as error:
        usage(opts, f"cannot write {out}: {error}")
    next_step = f"harness team create --file {out}"
    show(opts, {"file": str(out), "team": team, "next": next_step}, output.show_init)


def run_list(opts: Options, v: Values) -> None:
    show(opts, call(opts, "list", team=False), output.show_list)


def run_get(opts: Options, v: Values) -> None:
    show(opts, call(opts, "get"), output.show_team)


def run_members(opts: Options, v: Values) -> None:
    show(opts, call(opts, "members"), output.show_members)


def run_add(opts: Options, v: Values) -> None:
    data = read_json_file(opts, v["file"])
    retry = _in_file(data)
    show(opts, call(opts, "add", data, operation_id=str(data["id"]), retry=retry), output.show_member)


def run_key(opts: Options, v: Values) -> None:
    show(opts, call(opts, "key", {"memberId": resolve_member(opts, v["member"])}), output.show_mapping)


def _ttl_detail(opts: Options, ttl: float | None, rejection: RemoteError) -> str:
    """A rejected --ttl in the seconds it was given in (the daemon's bounds are in milliseconds, and it
    says which in its capabilities); any other rejection as the daemon put it."""
    if ttl is None or rejection.bound != "ttl":
        return rejection.detail
    try:
        limits = _request(opts, "capabilities", None, team=False, operation_id=None, timeout=REPLY_TIMEOUT)
        low, high = limits["limits"]["ttlMinMs"] / 1000, limits["limits"]["ttlMaxMs"] / 1000
    except (ClientError, OSError, LookupError, TypeError):
        return rejection.detail
    return f"--ttl must be {low:g} s to {high:g} s, not {ttl:g} s (bound ttl)"


def run_ask(opts: Options, v: Values) -> None:
    body = read_text(opts, v["text"], v["text_file"], "question")
    ttl = None if v["ttl"] is None else finite_seconds(opts, "--ttl", v["ttl"])
    question_id = v["operation_id"] or secrets.token_hex(16)
    fields = {
        "id": question_id,
        "to": resolve_member(opts, v["to"]),
        "text": body,
        "context": v["context"],
        "ttlMs": None if ttl is None else round(ttl * 1000),
        "parentId": resolve_question(opts, v["parent"]),
        "notify": False if v["no_notify"] else None,
        "from": resolve_member(opts, v["from_member"]),
    }
    result = call(
        opts,
        "ask",
        fields,
        operation_id=question_id,
        retry=f"--id {question_id}",
        explain=lambda rejection: _ttl_detail(opts, ttl, rejection),
    )
    show(opts, result, output.show_exchange, named=True)


def run_reply(opts: Options, v: Values) -> None:
    body = read_text(opts, v["text"], v["text_file"], "answer")
    fields = {
        "questionId": resolve_question(opts, v["question_id"]),
        "text": body,
        "evidence": v["evidence"] or None,
        "memberId": resolve_member(opts, v["member"]),
    }
    show(opts, call(opts, "reply", fields), output.show_exchange, named=True)


def run_inbox(opts: Options, v: Values) -> None:
    show(opts, call(opts, "inbox"), output.show_inbox, named=True)


def run_status(opts: Options, v: Values) -> None:
    fields = {"questionId": resolve_question(opts, v["question_id"])}
    show(opts, call(opts, "status", fields), output.show_status, named=True)


def run_wait(opts: Options, v: Values) -> None:
    seconds = finite_seconds(opts, "--seconds", float(v["seconds"]))
    fields = {"questionId": resolve_question(opts, v["question_id"]), "seconds": seconds}
    timeout = min(max(seconds, 0.0), LONGEST_WAIT) + REPLY_TIMEOUT
    show(opts, call(opts, "wait", fields, timeout=timeout), output.show_wait, named=True)


def run_delivery(opts: Options, v: Values) -> None:
    notice = "answer" if v["answer"] else "question"
    fields = {"questionId": resolve_question(opts, v["question_id"]), "notice": notice}
    show(opts, call(opts, "delivery_check", fields), output.show_mapping)


def run_inspect(opts: Options, v: Values) -> None:
    fields = {"noticeId": v["notice_id"]}
    show(opts, call(opts, "delivery_inspect", fields), output.show_mapping)


def run_resolve(opts: Options, v: Values) -> None:
    if v["landed"] == v["lost"]:
        usage(opts, "give exactly one of --landed and --lost")
    fields = {"noticeId": v["notice_id"], "landed": bool(v["landed"])}
    show(opts, call(opts, "delivery_resolve", fields), output.show_mapping)


def run_usage(opts: Options, v: Values) -> None:
    show(opts, call(opts, "usage"), output.show_usage, named=True)


def run_capabilities(opts: Options, v: Values) -> None:
    show(opts, call(opts, "capabilities", team=False), output.show_mapping)


# --- the board (board-v1): roles, tasks and pulled notes ----------------------------------------------------
# Writes go through the one `board` action with a command object; the daemon sets its actor, session and time.


def _addressee(given: str) -> dict[str, str]:
    """`role:NAME` names a role; anything else a member (name or membership id)."""
    kind, is_role, name = given.partition("role:")
    return {"kind": "role", "name": name} if is_role and not kind else {"kind": "member", "name": given}


def resolve_task(opts: Options, given: str | None) -> str | None:
    """The whole task id that `given` (an id or a prefix of one) names."""
    if given is None or _whole(given):
        return given
    tasks = call(opts, "board_get")["tasks"]
    return _pick(opts, given, [str(t["id"]) for t in tasks], "task id")


def _board_write(
    opts: Options, v: Values, command: dict[str, Any], render: Callable[[Any, output.Look], None]
) -> None:
    operation_id = v.get("operation_id") or secrets.token_hex(16)
    fields = {"id": operation_id, "generation": v.get("generation"), "command": command}
    result = call(opts, "board", fields, operation_id=operation_id, retry=f"--id {operation_id}")
    show(opts, result, lambda r, look: render(r["result"], look), named=True)


def _show_task(task: dict[str, Any], look: output.Look) -> None:
    owner = task.get("owner")
    output.say(f"{task['title']}  ({task['state']})", look, style="bold")
    output.say(f"task id {task['id']}", look)
    for label, value in (
        ("owner", "-" if owner is None else f"{owner['kind']} {look.who(owner['name'])}"),
        ("creator", look.who(task["creator"])),
        ("claimant", "-" if task["claimant"] is None else look.who(task["claimant"])),
        ("after", ", ".join(task["dependencies"]) or "-"),
        ("evidence", ", ".join(task["evidence"]) or "-"),
    ):
        output.say(f"{label}: {value}", look)
    if task["description"]:
        output.say_quoted(task["description"], look)


def _show_tasks(tasks: list[dict[str, Any]], look: output.Look) -> None:
    if not tasks:
        output.say("no tasks on the board", look)
        return
    ids = output.short_ids([str(t["id"]) for t in tasks], look.wide)
    rows = [
        [
            ids[t["id"]],
            t["state"],
            "-" if t["claimant"] is None else look.who(t["claimant"]),
            ", ".join(ids.get(dep, dep) for dep in t["dependencies"]) or "-",
            t["title"],
        ]
        for t in tasks
    ]
    output.print_table("Tasks", ["task", "state", "claimant", "after", "title"], rows, look, ids=3)


def _show_board(board: dict[str, Any], look: output.Look) -> None:
    output.say(
        f"board of team {board['teamId']} (generation {board['generation']}, revision {board['revision']})",
        look,
    )
    for role in board["roles"]:
        holders = ", ".join(look.who(h) for h in role["holders"]) or "nobody"
        output.say(f"role {role['name']}: {holders} — {role['description'] or '-'}", look)
    for member in board["members"]:
        if member["state"] == "active":
            output.say(f"{look.who(member['id'])}: {member['unread']} unread note(s)", look)
    _show_tasks(board["tasks"], look)


def _show_role(role: dict[str, Any], look: output.Look) -> None:
    holders = ", ".join(look.who(h) for h in role["holders"]) or "nobody"
    output.say(f"role {role['name']}: {holders} — {role['description'] or '-'}", look)


def _show_note(note: dict[str, Any], look: output.Look) -> None:
    to = note["to"]
    output.say(
        f"note {note['id']} from {look.who(note['sender'])} to {to['kind']} {look.who(to['name'])}", look
    )
    output.say_quoted(note["text"], look)


def _show_page(page: dict[str, Any], look: output.Look) -> None:
    for note in page["notes"]:
        _show_note(note, look)
    more = "" if page["nextOffset"] is None else f"; more with --offset {page['nextOffset']}"
    output.say(f"{len(page['notes'])} note(s), {page['unread']} unread left{more}", look)


def run_board(opts: Options, v: Values) -> None:
    show(opts, call(opts, "board_get"), _show_board, named=True)


def run_board_role(opts: Options, v: Values) -> None:
    command = {"type": "define_role", "name": v["name"], "description": v["description"] or ""}
    _board_write(opts, v, command, _show_role)


def _run_role_change(kind: str) -> Callable[[Options, Values], None]:
    def run(opts: Options, v: Values) -> None:
        command = {"type": kind, "role": v["name"], "member": resolve_member(opts, v["member"])}
        _board_write(opts, v, {k: value for k, value in command.items() if value is not None}, _show_role)

    return run


def run_board_task_add(opts: Options, v: Values) -> None:
    command: dict[str, Any] = {
        "type": "add_task",
        "title": v["title"],
        "description": v["description"] or "",
        "dependencies": [resolve_task(opts, after) for after in v["after"] or []],
    }
    if v["owner"] is not None:
        command["owner"] = _addressee(v["owner"])
    _board_write(opts, v, command, _show_task)


def _run_task_event(kind: str) -> Callable[[Options, Values], None]:
    def run(opts: Options, v: Values) -> None:
        command: dict[str, Any] = {"type": kind, "taskId": resolve_task(opts, v["task_id"])}
        if v.get("evidence"):
            command["evidence"] = v["evidence"]
        if v.get("claimant") is not None:
            command["claimant"] = resolve_member(opts, v["claimant"])
        _board_write(opts, v, command, _show_task)

    return run


def run_board_task_list(opts: Options, v: Values) -> None:
    board = call(opts, "board_get")
    show(opts, {"tasks": board["tasks"]}, lambda r, look: _show_tasks(r["tasks"], look), named=True)


def run_board_task_show(opts: Options, v: Values) -> None:
    task_id = resolve_task(opts, v["task_id"])
    task = next((t for t in call(opts, "board_get")["tasks"] if t["id"] == task_id), None)
    if task is None:
        fail(opts, output.PROTOCOL_ERROR, "not_found", f"no task {task_id!r} on the board")
    show(opts, task, _show_task, named=True)


def run_board_note(opts: Options, v: Values) -> None:
    body = read_text(opts, v["text"], v["text_file"], "note")
    _board_write(opts, v, {"type": "send_note", "to": _addressee(v["to"]), "text": body}, _show_note)


def run_board_notes(opts: Options, v: Values) -> None:
    command: dict[str, Any] = {
        "type": "read_messages",
        "unreadOnly": bool(v["unread"]),
        "offset": v["offset"] or 0,
    }
    if v["member"] is not None:
        command["member"] = resolve_member(opts, v["member"])
    _board_write(opts, v, command, _show_page)


# --- the fast path ------------------------------------------------------------------------------------------

# Option kinds: "flag" (no value), "str", "float", "path", "list" (repeatable str). The common options are
# taken before the subcommand (`team --team T get`) and after it (`team get --team T`).
COMMON_OPTIONS: dict[str, tuple[str, str]] = {
    "--team": ("team", "str"),
    "--json": ("json", "flag"),
    "--wide": ("wide", "flag"),
    "--home": ("home", "str"),
    "--socket": ("socket", "str"),
    "--key": ("key", "str"),
    "--key-file": ("key_file", "path"),
    "--machine": ("machine", "str"),
}
COMMON_HELP: dict[str, str] = {
    "--team": "Team id (or a unique prefix of it).",
    "--json": "Print one JSON document (errors too).",
    "--wide": "Readable output with whole ids and cells, however wide (default: fit the terminal).",
    "--home": "Data directory (default $HARNESS_HOME, else per user).",
    "--socket": "Another local daemon's socket (default: from daemon.json).",
    "--key": f"Private member key (acts as that member; `ps` shows it: use --key-file or ${MEMBER_KEY_ENV}).",
    "--key-file": "File holding the private member key (the one the introduction names).",
    "--machine": "The paired machine that owns the team (through this daemon's relay).",
}

# What `create`, `add` and `init` say of a member: the shape is otherwise only in the protocol's spec.
AGENT_ID_HELP = (
    "A member is {machineId, agentId, name, role?}: agentId names an agent on the machine machineId "
    "(`harness agent list` shows this machine's). It need not run yet: the member's notices wait "
    "`offline` until an agent with that id starts (`harness agent start --id AGENT_ID ...`)."
)
PREFIX_HELP = "Ids may be given by a unique prefix, as readable output shows them."


@dataclass(frozen=True)
class Spec:
    run: Callable[[Options, Values], None]
    help: str  # the first line is the command's summary
    required: tuple[str, ...] = ()  # positional arguments
    optional: tuple[str, ...] = ()  # positional arguments after the required ones
    options: dict[str, tuple[str, str]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    about: dict[str, str] = field(default_factory=dict)  # help of each argument (by name) and option


# The typed commands of the action table (core/actions.py): each generated from its row, run by `run_action`.
CLI_KINDS: dict[Kind, str] = {Kind.TEXT: "str", Kind.INT: "int", Kind.BOOL: "flag", Kind.TEXT_LIST: "list"}
RENDERERS: dict[Answer, Callable[[Any, output.Look], None]] = {
    Answer.TEAM: output.show_team,
    Answer.EXCHANGE: output.show_exchange,
    Answer.MEMBER: output.show_member,
}


# How a typed command makes a unique prefix whole, by what its field names.
WHOLE_IDS: dict[Refers | None, Callable[[Options, str | None], str | None]] = {
    Refers.QUESTION: resolve_question,
    Refers.MEMBER: resolve_member,
}


def _python_name(cli: str) -> str:
    """The name an argument (`question_id`) or option (`--reason`) is given to a command's function by."""
    return cli.removeprefix("--").replace("-", "_")


def run_action(action: TeamAction, opts: Options, v: Values) -> None:
    """A typed command as its row declares it: each field the CLI takes, with a question or member given by
    a unique prefix made whole, is sent under its wire name; the answer is shown as its kind is."""
    taken = [(declared, v[_python_name(declared.cli)]) for declared in action.fields if declared.cli]
    for declared, value in taken:
        if value is None and declared.required:  # an option (an argument is never absent)
            usage(opts, f"give {declared.cli}: {declared.help[:1].lower()}{declared.help[1:]}")
    fields: dict[str, Any] = {}
    for declared, given in taken:
        made_whole = WHOLE_IDS.get(declared.refers)
        fields[declared.wire] = given if made_whole is None else made_whole(opts, given)
    assert action.answer is not None
    result = call(opts, action.name, fields or None)
    show(opts, result, RENDERERS[action.answer], named=action.answer is Answer.EXCHANGE)


def typed_spec(action: TeamAction) -> Spec:
    """The command of a typed row: its fields' `cli` names are its arguments (as named) and options."""
    assert action.help is not None
    taken = {declared.cli: declared for declared in action.fields if declared.cli is not None}
    arguments = [(cli, declared) for cli, declared in taken.items() if not cli.startswith("--")]
    return Spec(
        partial(run_action, action),
        action.help,
        tuple(cli for cli, declared in arguments if declared.required),
        tuple(cli for cli, declared in arguments if not declared.required),
        options={
            cli: (_python_name(cli), CLI_KINDS[declared.kind])
            for cli, declared in taken.items()
            if cli.startswith("--")
        },
        about={cli: declared.help for cli, declared in taken.items() if declared.help},
    )


TYPED_SPECS: dict[str, Spec] = {
    name: typed_spec(action) for name, action in TEAM_ACTIONS.items() if action.help is not None
}

WRITTEN_SPECS: dict[str, Spec] = {
    "init": Spec(
        run_init,
        "Write team.json for a first team of this machine's agents; then `harness team create --file "
        "team.json`.\n\nWithout --member, every agent registered on this machine joins under its name. "
        + AGENT_ID_HELP,
        options={
            "--name": ("name", "str"),
            "--member": ("member", "list"),
            "--role": ("role", "list"),
            "--out": ("out", "path"),
        },
        defaults={"out": Path("team.json")},
        about={
            "--name": "Team name (default: this directory's name).",
            "--member": "NAME=AGENT_ID, or NAME of a registered agent; repeat.",
            "--role": "NAME=ROLE, what the member does for the team; repeat.",
            "--out": "File to write (never overwritten; - for stdout).",
        },
    ),
    "create": Spec(
        run_create,
        "Create a team from a file (idempotent by its id; one is drawn when the file has none).\n\n"
        "`harness team init` writes such a file. " + AGENT_ID_HELP,
        options={"--file": ("file", "path")},
        about={"--file": 'team.json: {"id"?, "name", "members": [MEMBER, ...]}; - for stdin.'},
    ),
    "list": Spec(run_list, "Every team this daemon owns."),
    "get": Spec(run_get, "The team's snapshot: roster and exchanges (never a member key)."),
    "members": Spec(run_members, "The roster with membership ids (use them for --from, --member, remove)."),
    "add": Spec(
        run_add,
        "Add a member (idempotent by its id; one is drawn when the file has none).\n\n" + AGENT_ID_HELP,
        options={"--file": ("file", "path")},
        about={"--file": 'member.json: {"id"?, "machineId", "agentId", "name", "role"?}; - for stdin.'},
    ),
    "key": Spec(
        run_key,
        "Owner only: a member's private key, its key file and the command prefix its introduction teaches.",
        ("member",),
        about={"member": "Membership id (or a unique prefix) or name."},
    ),
    "ask": Spec(
        run_ask,
        "Ask a teammate; the operation id becomes the question id.",
        ("to",),
        ("text",),
        {
            "--context": ("context", "str"),
            "--ttl": ("ttl", "float"),
            "--parent": ("parent", "str"),
            "--no-notify": ("no_notify", "flag"),
            "--id": ("operation_id", "str"),
            "--text-file": ("text_file", "path"),
            "--from": ("from_member", "str"),
        },
        about={
            "to": "Member name or membership id.",
            "text": "The question.",
            "--context": "What the peer needs to know.",
            "--ttl": "Deadline in seconds (10 s to 24 h).",
            "--parent": "Follow-up of this question id.",
            "--no-notify": "No answer notice; read it with inbox.",
            "--id": "Operation id (reuse it to retry).",
            "--text-file": "Read TEXT from a file (- for stdin).",
            "--from": "Owner only: ask for this member.",
        },
    ),
    "reply": Spec(
        run_reply,
        "Answer a question addressed to you (the only way a question is answered).",
        ("question_id",),
        ("text",),
        {
            "--evidence": ("evidence", "list"),
            "--text-file": ("text_file", "path"),
            "--member": ("member", "str"),
        },
        about={
            "text": "The answer.",
            "--evidence": "Reference (path:line); repeat.",
            "--text-file": "Read TEXT from a file (- for stdin).",
            "--member": "Owner only: answer for this member.",
        },
    ),
    "inbox": Spec(run_inbox, "Questions waiting for you and recent answers to yours."),
    "status": Spec(run_status, "One exchange, or every exchange you may see.", (), ("question_id",)),
    "wait": Spec(
        run_wait,
        "Block until the question is answered or ends, a question for you arrives, or time runs out.",
        ("question_id",),
        (),
        {"--seconds": ("seconds", "float")},
        {"seconds": DEFAULT_WAIT_SECONDS},
        {"--seconds": "Give up after this long (never cancels)."},
    ),
    "delivery": Spec(
        run_delivery,
        "Owner: ask the destination's desk what became of a notice (through the relay for a paired machine); "
        "never sends anything again.",
        ("question_id",),
        (),
        {"--answer": ("answer", "flag")},
        about={"--answer": "The answer's continuation notice, not the question's."},
    ),
    "inspect": Spec(
        run_inspect,
        "Owner: look in the agent's pane for evidence that a written notice landed (its first line in the "
        "history, or its text left in the composer). A read: nothing is sent or recorded.",
        ("notice_id",),
        about={"notice_id": "Notice id (TEAM/SUBJECT/KIND, as `delivery` shows it) or a question id."},
    ),
    "resolve": Spec(
        run_resolve,
        "Owner: resolve an unconfirmed notice after inspecting: --landed confirms it; --lost lets it be "
        "written once more under a new write id (once; never automatic).",
        ("notice_id",),
        (),
        {"--landed": ("landed", "flag"), "--lost": ("lost", "flag")},
        about={
            "notice_id": "Notice id (TEAM/SUBJECT/KIND) or a question id.",
            "--landed": "It reached the agent.",
            "--lost": "It never did: write it once more.",
        },
    ),
    "usage": Spec(
        run_usage,
        "Each bound with its use and limit, a warning from 80 %, and what you can do before it bites.\n\n"
        "A member sees its own open questions and chains; the desk's bounds are this machine's.",
    ),
    "capabilities": Spec(run_capabilities, 'What the daemon speaks: {"protocol": "team.v1", ...}.'),
    "board": Spec(
        run_board,
        "The team's board: roles, tasks by state with their dependencies, unread notes.\n\n"
        "board role | take-role | leave-role NAME; board task add TITLE; board task claim | release | "
        "start | done | cancel | show TASK_ID; board task list; board note TO TEXT; board notes [--unread] "
        "[--offset N]. Notes are pulled with `board notes`, never pushed into a terminal.",
    ),
}
# Every `harness team` command of one word but `board`'s: the written ones, then the typed ones.
SPECS: dict[str, Spec] = {**WRITTEN_SPECS, **TYPED_SPECS}

# `harness team board ...`: commands named by their words (`board` alone, in SPECS, shows the board).
BOARD_WRITE_OPTIONS: dict[str, tuple[str, str]] = {
    "--id": ("operation_id", "str"),
    "--generation": ("generation", "int"),
}
BOARD_WRITE_ABOUT = {
    "--id": "Operation id (reuse it to retry).",
    "--generation": "Refuse unless the board is this generation (`board` shows it).",
}
TASK_ID_ABOUT = {"task_id": "Task id (or a unique prefix)."}


def _writes(spec: Spec) -> Spec:
    """A board command that changes the board: it takes an operation id and the generation it expects."""
    return replace(
        spec, options={**spec.options, **BOARD_WRITE_OPTIONS}, about={**spec.about, **BOARD_WRITE_ABOUT}
    )


def _task_spec(kind: str, help: str, **options: tuple[str, str]) -> Spec:
    about = {
        "--evidence": "Reference (path:line); repeat.",
        "--claimant": "Owner only: the claim it releases.",
    }
    flags = {f"--{name}": value for name, value in options.items()}
    return _writes(
        Spec(
            _run_task_event(kind),
            help,
            ("task_id",),
            options=flags,
            about={**TASK_ID_ABOUT, **{flag: about[flag] for flag in flags}},
        )
    )


def _role_spec(kind: str, verb: str, verbs: str) -> Spec:
    return _writes(
        Spec(
            _run_role_change(kind),
            f"{verb} a role (the owner names the member).",
            ("name",),
            options={"--member": ("member", "str")},
            about={"name": "Role name.", "--member": f"Owner only: the member that {verbs} it."},
        )
    )


BOARD_SPECS: dict[str, Spec] = {
    "board role": _writes(
        Spec(
            run_board_role,
            "Owner: define a role (members then take it).",
            ("name",),
            options={"--description": ("description", "str")},
            about={"name": "Role name.", "--description": "What the role does."},
        )
    ),
    "board take-role": _role_spec("take_role", "Take", "takes"),
    "board leave-role": _role_spec("leave_role", "Leave", "leaves"),
    "board task add": _writes(
        Spec(
            run_board_task_add,
            "Add a task; the operation id becomes the task id. It is ready once every task it comes after is "
            "done.",
            ("title",),
            options={
                "--description": ("description", "str"),
                "--owner": ("owner", "str"),
                "--after": ("after", "list"),
            },
            about={
                "title": "The task's title.",
                "--description": "What is to be done.",
                "--owner": "Who may claim it: a member (name or id) or role:NAME (default: anyone).",
                "--after": "A task this one depends on; repeat.",
            },
        )
    ),
    "board task claim": _task_spec("claim", "Claim a ready task (a claim is never stolen)."),
    "board task release": _task_spec(
        "release", "Release your claim (the owner names the claimant).", claimant=("claimant", "str")
    ),
    "board task start": _task_spec("start", "Start the task you claimed."),
    "board task done": _task_spec("done", "Complete the task you started.", evidence=("evidence", "list")),
    "board task cancel": _task_spec("cancel", "Cancel a task (its creator, or the owner)."),
    "board task list": Spec(run_board_task_list, "Every task with its state, claimant and dependencies."),
    "board task show": Spec(run_board_task_show, "One task in full.", ("task_id",), about=TASK_ID_ABOUT),
    "board note": _writes(
        Spec(
            run_board_note,
            "Leave a note in a member's (or a role's holders') mailbox; it is read with `board notes`, never "
            "pushed.",
            ("to",),
            ("text",),
            options={"--text-file": ("text_file", "path")},
            about={
                "to": "Member name or id, or role:NAME.",
                "text": "The note.",
                "--text-file": "Read TEXT from a file (- for stdin).",
            },
        )
    ),
    "board notes": _writes(
        Spec(
            run_board_notes,
            "Read your notes, at most 25 a page; what is shown is marked read. With --unread, follow the "
            "returned offset (it stays put until that page is exhausted).",
            options={
                "--unread": ("unread", "flag"),
                "--offset": ("offset", "int"),
                "--member": ("member", "str"),
            },
            about={
                "--unread": "Only unread notes.",
                "--offset": "Where the page starts (the previous page's next offset).",
                "--member": "Owner only: read this member's notes.",
            },
        )
    ),
}
# Every `harness team` command by its words: the fast path matches the longest.
COMMANDS: dict[str, Spec] = {**SPECS, **BOARD_SPECS}
LONGEST_COMMAND = max(len(name.split()) for name in COMMANDS)

REQUIRED = {"create": ("file",), "add": ("file",)}  # options without a default


def match_command(words: list[str]) -> str | None:
    """The longest command name `words` begins with."""
    for count in range(min(LONGEST_COMMAND, len(words)), 0, -1):
        name = " ".join(words[:count])
        if name in COMMANDS:
            return name
    return None


def _convert(kind: str, raw: str) -> Any:
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "path":
        return Path(raw)
    return raw


class NotFast(Exception):
    pass


def take_option(argv: list[str], index: int, table: dict[str, tuple[str, str]], into: Values) -> int:
    token = argv[index]
    name, has_value, inline = token.partition("=")
    if name not in table:
        raise NotFast
    dest, kind = table[name]
    if kind == "flag":
        if has_value:
            raise NotFast
        into[dest] = True
        return index + 1
    if has_value:
        raw, index = inline, index + 1
    elif index + 1 < len(argv):
        raw, index = argv[index + 1], index + 2
    else:
        raise NotFast
    try:
        value = _convert(kind, raw)
    except ValueError:
        raise NotFast from None
    if kind == "list":
        into[dest] = [*(into.get(dest) or []), value]
    else:
        into[dest] = value
    return index


def parse_fast(argv: list[str]) -> tuple[Spec, Options, Values] | None:
    """The command, options and values of a plain `team` invocation, or None to let Typer parse it."""
    if not argv or argv[0] != "team" or "--" in argv:
        return None
    try:
        group: Values = {}
        index = 1
        while index < len(argv) and argv[index].startswith("-"):
            index = take_option(argv, index, COMMON_OPTIONS, group)
        command = match_command(argv[index:])
        if command is None:
            return None
        spec = COMMANDS[command]
        values: Values = {dest: None for dest, _kind in spec.options.values()}
        values.update({dest: False for dest, kind in spec.options.values() if kind == "flag"})
        values.update(spec.defaults)
        table = {**COMMON_OPTIONS, **spec.options}
        common: Values = {}
        positionals: list[str] = []
        index += len(command.split())
        while index < len(argv):
            token = argv[index]
            if token.startswith("-") and token != "-":
                index = take_option(
                    argv, index, table, values if token.partition("=")[0] in spec.options else common
                )
            else:
                positionals.append(token)
                index += 1
    except NotFast:
        return None
    names = spec.required + spec.optional
    if not len(spec.required) <= len(positionals) <= len(names):
        return None
    if any(values.get(dest) is None for dest in REQUIRED.get(command, ())):
        return None
    values.update(dict(zip(names, positionals, strict=False)))
    values.update({name: None for name in names[len(positionals) :]})
    opts = Options()
    for given in (group, common):  # the subcommand's options win
        opts.merge(
            bool(given.get("json")),
            given.get("home"),
            given.get("socket"),
            given.get("key"),
            machine=given.get("machine"),
            key_file=given.get("key_file"),
            team=given.get("team"),
            wide=bool(given.get("wide")),
        )
    return spec, opts, values
