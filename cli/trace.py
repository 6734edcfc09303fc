# `harness trace`: read a trace offline (no daemon), a file or a whole trace directory (a team's by its id).
# `export` re-redacts every line with this run's redactor before it leaves the machine (the trace may have
# been written before a key existed, or with redaction off); `query` filters; `summary` times each exchange
# and lists violations.
from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from harness.cli import output
from harness.io import home as homes

if TYPE_CHECKING:  # the trace reader is loaded by a command that runs, not by `--help`
    from harness.io import trace_files

trace_app = typer.Typer(help="Read a trace offline: export, query, summary.", no_args_is_help=True)

PathArg = Annotated[
    Path | None,
    typer.Argument(help="A trace file, or a trace directory (<home>/traces/team-ID or session-ID)."),
]
TeamOpt = Annotated[
    str | None, typer.Option("--team", help="Read this team's trace in the data directory (instead of PATH).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None,
    typer.Option(
        "--home",
        help="Data directory: where --team's trace is, and whose member keys and owner token export "
        "redacts too (default: HARNESS_HOME, else the user data directory).",
    ),
]
SourceOpt = Annotated[list[str] | None, typer.Option("--source", help="Keep this source (repeatable).")]
TypeOpt = Annotated[list[str] | None, typer.Option("--type", help="Keep this event type (repeatable).")]
ExchangeOpt = Annotated[list[str] | None, typer.Option("--exchange", help="Keep this exchange (repeatable).")]
MemberOpt = Annotated[
    list[str] | None,
    typer.Option("--member", help="Keep events of this member: source, memberId or `to` (repeatable)."),
]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Keep events at or after: epoch ms or ISO 8601 (naive = UTC).")
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", help="Keep events at or before: epoch ms or ISO 8601 (naive = UTC).")
]


# Epoch ms has 13 digits until the year 2286; more than this is no time (and int() refuses over 4300 digits).
_MAX_MS_DIGITS: Final = 18


def _time(value: str | None, json_out: bool) -> int | None:
    if value is None:
        return None
    # str.isdigit() also holds for '²' or Arabic-Indic digits, which int() refuses or reads as another number.
    if value.isascii() and value.isdigit() and len(value) <= _MAX_MS_DIGITS:
        return int(value)
    try:
        moment = datetime.datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        output.emit_error(json_out, "bad_request", f"not a time (epoch ms or ISO 8601): {value!r}")
        raise SystemExit(output.USAGE) from None


def _filter(
    json_out: bool,
    *,
    source: list[str] | None,
    type_: list[str] | None,
    exchange: list[str] | None,
    member: list[str] | None,
    since: str | None,
    until: str | None,
) -> trace_files.TraceFilter:
    from harness.io import trace_files

    return trace_files.TraceFilter(
        tuple(source or ()),
        tuple(type_ or ()),
        tuple(exchange or ()),
        tuple(member or ()),
        _time(since, json_out),
        _time(until, json_out),
    )


def _located(path: Path | None, team: str | None, home: str | None, json_out: bool) -> Path:
    """PATH, or the trace of `--team` in the data directory (exactly one of them)."""
    from harness.core.records import ID_PATTERN
    from harness.io import trace_files

    if (path is None) == (team is None):
        output.emit_error(json_out, "bad_request", "give a trace PATH or --team ID (one of them)")
        raise SystemExit(output.USAGE)
    if team is None:
        assert path is not None
        return path
    if not ID_PATTERN.fullmatch(team):
        output.emit_error(json_out, "bad_request", f"not a team id: {team!r}")
        raise SystemExit(output.USAGE)
    return trace_files.team_trace_dir(homes.resolve_home(home), team)


def _lines(path: Path, where: trace_files.TraceFilter, json_out: bool) -> Iterator[trace_files.TraceLine]:
    """The matching lines, read as they are used (a summary keeps none of them); damage, or a file that is
    not a regular one (a FIFO, a device), ends the command with one error line, wherever it is found."""
    from harness.io import trace_files

    try:
        if not path.exists():  # raises for a name too long, which is no trace either
            output.emit_error(json_out, "not_found", f"no trace at {path}")
            raise SystemExit(output.PROTOCOL_ERROR)
        yield from trace_files.query(path, where)
    except trace_files.TraceDamaged as error:
        output.emit_error(json_out, "corrupt_state", str(error))
        raise SystemExit(output.PROTOCOL_ERROR) from None
    except OSError as error:
        output.emit_error(json_out, "unavailable", f"cannot read {path}: {error.strerror or error}")
        raise SystemExit(output.PROTOCOL_ERROR) from None


def _envelope(line: trace_files.TraceLine) -> dict[str, object]:
    return {"source": line.source, "seq": line.seq, "event": line.event}


@trace_app.command()
def export(
    path: PathArg = None,
    *,
    team: TeamOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the NDJSON here (0600, must not exist) not stdout.")
    ] = None,
    source: SourceOpt = None,
    type_: TypeOpt = None,
    exchange: ExchangeOpt = None,
    member: MemberOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The matching lines as NDJSON, each redacted again by this run's rules."""
    from harness.io import trace_files
    from harness.io.redaction_env import from_environment

    where = _filter(
        json_out, source=source, type_=type_, exchange=exchange, member=member, since=since, until=until
    )
    located = _located(path, team, home, json_out)
    # The data directory whose secrets are redacted is --home's, else HARNESS_HOME's, else the user's, as for
    # --team: a PATH alone once meant none, and the owner token left the machine in clear. A directory that
    # does not exist holds no secrets; one whose token cannot be read stops the export (it cannot redact it).
    secrets_home = homes.resolve_home(home)
    try:
        redactor = from_environment(secrets_home)
    except (OSError, UnicodeDecodeError) as error:
        detail = f"cannot read the secrets of {secrets_home} to redact them: {error}"
        output.emit_error(json_out, "unavailable", detail)
        raise SystemExit(output.PROTOCOL_ERROR) from None
    lines = list(_lines(located, where, json_out))
    encoded = b"".join(
        trace_files.encode_line(redactor.text(line.source), line.seq, _event(redactor.value(line.event)))
        for line in lines
    )
    if out is None:
        sys.stdout.buffer.write(encoded)
        sys.stdout.flush()
        return
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, homes.PRIVATE_FILE_MODE)
    except OSError as error:
        output.emit_error(json_out, "bad_request", f"cannot create {out}: {error.strerror or error}")
        raise SystemExit(output.PROTOCOL_ERROR) from None
    with os.fdopen(fd, "wb") as file:
        file.write(encoded)
    if json_out:
        output.emit_json({"exported": len(lines), "out": str(out)})
    else:
        output.say(f"exported {len(lines)} lines to {out}")


def _event(value: object) -> dict[str, object]:
    assert isinstance(value, dict)
    return value


@trace_app.command("query")
def query_command(
    path: PathArg = None,
    *,
    team: TeamOpt = None,
    home: HomeOpt = None,
    source: SourceOpt = None,
    type_: TypeOpt = None,
    exchange: ExchangeOpt = None,
    member: MemberOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Show at most the first N matches.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The matching lines: a table, or with --json {"count", "lines": [{source, seq, event}, ...]}."""
    if limit is not None and limit < 0:  # checked here, not by click: the command keeps the direct parse
        output.emit_error(json_out, "bad_request", f"--limit is a count of lines, not {limit}")
        raise SystemExit(output.USAGE)
    where = _filter(
        json_out, source=source, type_=type_, exchange=exchange, member=member, since=since, until=until
    )
    lines: list[trace_files.TraceLine] = []
    for line in _lines(_located(path, team, home, json_out), where, json_out):  # all read: damage is found
        if limit is None or len(lines) < limit:
            lines.append(line)
    if json_out:
        output.emit_json({"count": len(lines), "lines": [_envelope(line) for line in lines]})
        return
    rows = [
        [
            str(line.seq),
            output.clock(line.event.get("at")),
            line.source,
            str(line.event.get("type")),
            str(line.event.get("exchangeId") or "-"),
            str(line.event.get("memberId") or "-"),
        ]
        for line in lines
    ]
    columns = ["seq", "at", "source", "type", "exchange", "member"]
    output.print_table(f"{len(lines)} lines", columns, rows, output.Look(), ids=4)


def _ms(value: object) -> str:
    return f"+{value} ms" if isinstance(value, int) else "-"


@trace_app.command()
def summary(
    path: PathArg = None,
    *,
    team: TeamOpt = None,
    home: HomeOpt = None,
    source: SourceOpt = None,
    exchange: ExchangeOpt = None,
    member: MemberOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per exchange the times ask -> delivered -> accepted -> answered -> continuation, and the violations."""
    from harness.io import trace_files

    where = _filter(
        json_out, source=source, type_=None, exchange=exchange, member=member, since=since, until=until
    )
    result = trace_files.summarize(_lines(_located(path, team, home, json_out), where, json_out))
    if json_out:
        output.emit_json(result)
        return
    look = output.Look()
    output.say(f"{result['lines']} lines, seq {result['firstSeq']}..{result['lastSeq']}")
    exchanges = result["exchanges"]
    violations = result["violations"]
    assert isinstance(exchanges, list) and isinstance(violations, list)
    for e in exchanges:
        after = e["sinceAsk"]
        output.say(
            f"exchange {e['exchangeId']} ({e['state'] or 'open'}, {e['violations']} violations): "
            f"{e['asker']} -> {e['to']}, asked {output.clock(e['at'].get('asked'))}"
        )
        steps = list(trace_files.MILESTONES)[1:]
        output.say("  " + "  ".join(f"{step} {_ms(after.get(step))}" for step in steps))
    rows = [
        [
            str(v["seq"]),
            output.clock(v.get("at")),
            str(v.get("exchangeId") or "-"),
            str(v.get("memberId") or "-"),
            str(v.get("rule") or "-"),
        ]
        for v in violations
    ]
    output.print_table(
        f"{len(violations)} protocol violations", ["seq", "at", "exchange", "member", "rule"], rows, look
    )
