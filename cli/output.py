# What the CLI prints. Agents read `--json` (one JSON document on stdout, errors included, so a script never
# parses prose); people get rich tables. rich is imported only on the human path, which keeps an agent's
# `--json` call fast.
#
# Nearly every word shown was written by someone else: a peer's names, roles, questions, answers and
# evidence, a daemon's reasons and error details. On a terminal such text could carry escape sequences that
# set the title, write the clipboard (OSC 52) or hide what follows, and rich would read `[link=…]` in it as
# markup. So every readable line and table cell, here and in the watch view, is built by `shown`
# (core.terminal_text, as rich Text, never markup), and JSON documents spell the same characters as \uXXXX:
# the exact text for a parser, inert on a terminal.
from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.terminal_text import QUOTE, is_terminal_safe, quoted, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# Exit statuses of the contract.
OK = 0
PROTOCOL_ERROR = 1
USAGE = 2
UNREACHABLE = 3
UNCERTAIN = 4

SHORT_ID = 8  # characters of an id shown (more when another id shares them), like git's short hashes
WIDE_COLUMNS = 10_000  # --wide: as wide as the longest line


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON spells a code point beyond the BMP as its UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_text(value: object) -> str:
    """`value` as one line of JSON that a terminal prints as itself. json.dumps escapes only C0 controls;
    with ensure_ascii=False it leaves DEL, C1 controls (U+009B is CSI), bidi overrides and line separators
    raw. Outside strings it writes ASCII only, so each such character is inside a string and may be
    spelled as \\uXXXX there: the document parses to the same value."""
    text = json.dumps(value, ensure_ascii=False)
    if terminal_safe(text, line_breaks=False) == text:
        return text
    return "".join(c if is_terminal_safe(c, line_breaks=False) else _json_escape(c) for c in text)


def emit_json(value: object) -> None:
    sys.stdout.write(json_text(value) + "\n")


def emit_error(
    json_out: bool, code: str, detail: str, operation_id: str | None = None, *, retry: str | None = None
) -> None:
    """One JSON object on stdout with --json, else one line on stderr. `retry` is how a retry reuses the
    operation id (`--id ID`): given only when the outcome is uncertain, as a rejection is final and a retry
    of it would fail the same way."""
    if json_out:
        emit_json({"error": code, "detail": detail, "operationId": operation_id})
        return
    line = f"harness: {code}: {detail}"
    if operation_id is not None and retry is not None:
        line += f" (operation id {operation_id}; a retry must reuse it: retry with {retry})"
    sys.stderr.write(terminal_safe(line, line_breaks=False) + "\n")


# --- readable output: every piece goes through `shown` ---------------------------------------------------


def shown(value: object, *, block: bool = False, style: str = "") -> Text:
    """`value` as a viewer shows it: terminal-safe, and rich Text, so no part of it is read as markup or an
    emoji code. One line unless `block` (a question, an answer: its line breaks and tabs stay)."""
    from rich.text import Text

    return Text(terminal_safe(str(value), line_breaks=block, tabs=block), style=style)


def one_line(value: object, width: int | None = None) -> str:
    """`value` on one line for a table cell (its line breaks and runs of spaces folded), cut to `width`."""
    flat = " ".join(terminal_safe(str(value), tabs=True).split())
    return flat if width is None or len(flat) <= width else flat[: width - 1] + "…"


def say(text: str, look: Look | None = None, *, block: bool = False, style: str = "") -> None:
    """Print one line (or a `block`) of text that may hold words from elsewhere."""
    _console(look).print(shown(text, block=block, style=style))


def say_quoted(text: str, look: Look | None = None, *, indent: str = "") -> None:
    """Print text someone else wrote (a question, an answer, a note), every line of it after `> `: no line
    of it can pass for one this CLI wrote (a note's `note … from …` header, an answer's `answer by …`).
    On a terminal a line is also folded to its width, each piece after `> `: a line the terminal wrapped
    itself would go on at the left edge, and a peer padded its answer so that the wrapped part read as the
    CLI's own `answer by owner … (verified by harness)`."""
    from rich.cells import cell_len

    safe = terminal_safe(text, line_breaks=True, tabs=True)
    lines = quoted(safe).replace("\r\n", "\n").split("\n")
    columns = _terminal_columns()
    if columns is not None:
        room = max(columns - cell_len(indent + QUOTE), 1)
        lines = [QUOTE + piece for line in lines for piece in _fold(line[len(QUOTE) :].expandtabs(), room)]
    _console(look).print(shown("\n".join(indent + line for line in lines), block=True))


def _terminal_columns() -> int | None:
    """The width of the terminal stdout is, or None when it is none (a pipe wraps nothing)."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    return console.width if console.is_terminal else None


def _fold(line: str, room: int) -> list[str]:
    """`line` in pieces of at most `room` terminal cells each (at least one piece, maybe empty)."""
    from rich.cells import cell_len

    pieces, piece, used = [], "", 0
    for char in line:
        width = cell_len(char)
        if piece and used + width > room:
            pieces.append(piece)
            piece, used = "", 0
        piece += char
        used += width
    return [*pieces, piece]


@dataclass(frozen=True)
class Look:
    """How readable output is laid out: `wide` shows whole ids and cells however long the lines get; else
    ids are cut to a unique prefix (`harness team` takes prefixes back) and tables fit the terminal (80
    columns when it is not one). `names` maps membership ids to member names."""

    wide: bool = False
    names: Mapping[str, str] = field(default_factory=dict)

    def who(self, member_id: object) -> str:
        return self.names.get(str(member_id), str(member_id))


def short_ids(ids: Iterable[str], wide: bool = False) -> dict[str, str]:
    """Each id's shortest prefix of at least SHORT_ID characters that no other of `ids` starts with (the
    whole id with `wide`, or when it is a prefix of another)."""
    ordered = sorted(set(ids))
    if wide:
        return {i: i for i in ordered}
    shortest: dict[str, str] = {}
    for index, this in enumerate(ordered):
        need = SHORT_ID
        for other in ordered[max(index - 1, 0) : index + 2]:
            if other != this:
                need = max(need, _common_prefix(this, other) + 1)
        shortest[this] = this[:need]
    return shortest


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _console(look: Look | None = None) -> Console:
    from rich.console import Console

    if look is not None and look.wide:
        return Console(highlight=False, soft_wrap=True, width=WIDE_COLUMNS)
    return Console(highlight=False, soft_wrap=True)


def _fit(natural: list[int], room: int) -> list[int]:
    """Column widths that add up to at most `room`: a narrow column keeps its natural width, the wide ones
    share what the narrow leave."""
    widths = list(natural)
    order = sorted(range(len(natural)), key=natural.__getitem__)
    for done, index in enumerate(order):
        widths[index] = max(min(natural[index], room // (len(order) - done)), 1)
        room -= widths[index]
    return widths


def print_table(title: str, columns: list[str], rows: list[list[str]], look: Look, ids: int = 1) -> None:
    """A table whose first `ids` columns (ids, names, states) are never cut nor broken over lines (a broken
    id cannot be copied); the other cells are cut to one line of what the terminal's width leaves them."""
    from rich.table import Table

    console = _console(look)
    cells = [[one_line(cell) for cell in row] for row in rows]
    natural = [max([len(column)] + [len(row[i]) for row in cells]) for i, column in enumerate(columns)]
    # each border between columns takes 3 characters: a space, the rule, a space
    room = console.width - 3 * (len(columns) - 1) - sum(natural[:ids])
    widths = natural[:ids] + (natural[ids:] if look.wide else _fit(natural[ids:], room))
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column, width in zip(columns, widths, strict=True):
        table.add_column(column, no_wrap=True, overflow="ellipsis", width=width)
    for row in cells:
        table.add_row(*(shown(cell) for cell in row))
    console.print(table)


def clock(ms: object) -> str:
    """Epoch milliseconds as local time; "-" for anything else, and for a time no calendar holds (a hostile
    trace's `at` of 10**20 ended `trace query` with an OSError)."""
    if not isinstance(ms, int):
        return "-"
    import time

    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    except (OverflowError, OSError, ValueError):
        return "-"


def delivery_text(view: object) -> str:
    if not isinstance(view, dict):
        return "-"
    reason = view.get("reason")
    return f"{view.get('state')} ({reason})" if reason else str(view.get("state"))


def _exchange_rows(exchanges: list[dict[str, Any]], look: Look) -> list[list[str]]:
    ids = short_ids((e["id"] for e in exchanges), look.wide)
    rows = []
    for e in exchanges:
        answer = e.get("answer")
        late = " (late)" if answer and answer.get("late") else ""
        answer_text = "-" if not answer else (answer.get("text") or "") + late
        rows.append(
            [
                ids[e["id"]],
                look.who(e["from"]),
                look.who(e["to"]),
                e["state"],
                e["text"] or "",
                answer_text,
                delivery_text(e.get("delivery")),
            ]
        )
    return rows


_EXCHANGE_COLUMNS = ["question", "from", "to", "state", "text", "answer", "delivery"]


def _exchanges(title: str, exchanges: list[dict[str, Any]], look: Look) -> None:
    print_table(title, _EXCHANGE_COLUMNS, _exchange_rows(exchanges, look), look, ids=4)


def show_exchange(e: dict[str, Any], look: Look) -> None:
    say(f"Question {e['id']}", look, style="bold")
    ended = f", {e['reason']}" if e.get("reason") else ""  # the owner said why (expire, cancel)
    say(f"  {look.who(e['from'])} -> {look.who(e['to'])}  ({e['state']}{ended})", look)
    say(f"  asked {clock(e.get('createdAt'))}, deadline {clock(e.get('deadlineAt'))}", look)
    say(f"  delivery: {delivery_text(e.get('delivery'))}", look)
    say("  text:", look)
    say_quoted(str(e["text"]), look, indent="    ")
    if e.get("context"):
        say("  context:", look)
        say_quoted(str(e["context"]), look, indent="    ")
    answer = e.get("answer")
    if answer:
        late = " (late)" if answer.get("late") else ""
        say(f"  answer by {look.who(answer['author'])} at {clock(answer.get('at'))}{late}:", look)
        say_quoted(str(answer["text"]), look, indent="    ")
        for ref in answer.get("evidence") or []:
            say("    evidence: " + str(ref), look)


def show_members(result: dict[str, Any], look: Look) -> None:
    members = result["members"]
    ids = short_ids((m["id"] for m in members), look.wide)
    machines = short_ids((m["machineId"] for m in members), look.wide)
    agents = short_ids((m["agentId"] for m in members), look.wide)
    rows = [
        [
            ids[m["id"]],
            m["name"],
            f"{agents[m['agentId']]}@{machines[m['machineId']]}",
            m["state"],
            m["role"] or "-",
            delivery_text(m.get("introduction")),
        ]
        for m in members
    ]
    columns = ["member", "name", "agent@machine", "state", "role", "introduction"]
    print_table("Members", columns, rows, look, ids=4)


def show_team(team: dict[str, Any], look: Look) -> None:
    look = Look(look.wide, {m["id"]: m["name"] for m in team["members"]})
    say(f"{team['name']}  ({team['state']}, revision {team['revision']})", look, style="bold")
    say(f"team id {team['id']}", look)
    show_members(team, look)
    if team["exchanges"]:
        _exchanges("Exchanges", team["exchanges"], look)


def show_list(result: dict[str, Any], look: Look) -> None:
    teams = result["teams"]
    ids = short_ids((t["id"] for t in teams), look.wide)
    rows = [
        [ids[t["id"]], t["state"], str(t["members"]), str(t["exchanges"]), str(t["revision"]), t["name"]]
        for t in teams
    ]
    columns = ["team", "state", "members", "exchanges", "revision", "name"]
    print_table("Teams", columns, rows, look, ids=5)
    for broken in result.get("unavailable", []):
        say(f"unavailable: {broken['id']}: {broken['detail']}", look)


def show_inbox(result: dict[str, Any], look: Look) -> None:
    if not result["questions"] and not result["answers"]:
        say("Inbox is empty.", look)
        return
    if result["questions"]:
        _exchanges("Questions for you", result["questions"], look)
    if result["answers"]:
        _exchanges("Answers to your questions", result["answers"], look)


def show_status(result: dict[str, Any], look: Look) -> None:
    if "exchanges" not in result:
        show_exchange(result, look)
        return
    _exchanges("Exchanges", result["exchanges"], look)


def show_wait(result: dict[str, Any], look: Look) -> None:
    say(f"wait ended: {result['reason']}", look)
    show_exchange(result["exchange"], look)
    if result["incoming"]:
        _exchanges("Questions for you (answer these)", result["incoming"], look)


def show_usage(result: dict[str, Any], look: Look) -> None:
    """A table of the bounds, a warning marked `!` (`FULL` once the use reaches the limit); then, whole, what
    can be done about each warned bound (a table cell would be cut to the terminal's width)."""
    rows = []
    advice = []
    for b in result["bounds"]:
        mark = ("FULL" if b["use"] >= b["limit"] else "!") if b["warning"] else ""
        who = "-" if b["subject"] is None else look.who(b["subject"])
        rows.append([b["bound"], mark, str(b["use"]), str(b["limit"]), f"{100 * b['ratio']:.0f}", who])
        if b["warning"]:
            of = "" if b["subject"] is None else f" ({who})"
            advice.append(f"{mark} {b['bound']} {b['use']}/{b['limit']}{of}: {b['advice']}")
    title = f"Usage of team {result['teamId']} (desk: machine {result['machineId']})"
    print_table(title, ["bound", "warn", "use", "limit", "%", "of"], rows, look, ids=5)
    for line in advice:
        say(line, look)
    if not advice:
        say(f"every bound is below {result['warnPercent']} % of its limit", look)


def show_mapping(result: dict[str, Any], look: Look) -> None:
    for key, value in result.items():
        say(f"{key}: {value if isinstance(value, str | int | float) else json.dumps(value)}", look)


def show_member(member: dict[str, Any], look: Look) -> None:
    show_members({"members": [member]}, look)


def show_init(result: dict[str, Any], look: Look) -> None:
    team = result["team"]
    say(f"wrote {result['file']}: team {team['name']} with {len(team['members'])} members", look)
    for m in team["members"]:
        role = f" ({m['role']})" if m["role"] else ""
        say(f"  {m['name']}{role}: agent {m['agentId']} on machine {m['machineId']}", look)
    say(f"next: {result['next']}", look)
