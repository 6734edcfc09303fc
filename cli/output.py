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
from typing import TYPE_CHECKING, Any

from harness.core.terminal_text import is_terminal_safe, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

# Exit statuses of the contract.
OK = 0
PROTOCOL_ERROR = 1
USAGE = 2
UNREACHABLE = 3
UNCERTAIN = 4


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


def say(text: str, *, block: bool = False, style: str = "") -> None:
    """Print one line (or a `block`) of text that may hold words from elsewhere."""
    _console().print(shown(text, block=block, style=style))


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(shown(one_line(cell)) for cell in row))
    return table


def clock(ms: object) -> str:
    if not isinstance(ms, int):
        return "-"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def delivery_text(view: object) -> str:
    if not isinstance(view, dict):
        return "-"
    reason = view.get("reason")
    return f"{view.get('state')} ({reason})" if reason else str(view.get("state"))


def _exchange_rows(exchanges: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for e in exchanges:
        answer = e.get("answer")
        answer_text = (
            "-"
            if not answer
            else one_line(answer.get("text") or "", 40) + (" (late)" if answer.get("late") else "")
        )
        rows.append(
            [
                e["id"],
                e["from"],
                e["to"],
                e["state"],
                one_line(e["text"] or "", 50),
                answer_text,
                delivery_text(e.get("delivery")),
            ]
        )
    return rows


_EXCHANGE_COLUMNS = ["question", "from", "to", "state", "text", "answer", "delivery"]


def show_exchange(e: dict[str, Any]) -> None:
    say(f"Question {e['id']}  {e['from']} -> {e['to']}  ({e['state']})", style="bold")
    say(f"  asked {clock(e.get('createdAt'))}, deadline {clock(e.get('deadlineAt'))}")
    say(f"  delivery: {delivery_text(e.get('delivery'))}")
    say("  text: " + str(e["text"]), block=True)
    if e.get("context"):
        say("  context: " + str(e["context"]), block=True)
    answer = e.get("answer")
    if answer:
        late = " (late)" if answer.get("late") else ""
        say(f"  answer by {answer['author']} at {clock(answer.get('at'))}{late}:")
        say("    " + str(answer["text"]), block=True)
        for ref in answer.get("evidence") or []:
            say("    evidence: " + str(ref))


def show_members(result: dict[str, Any]) -> None:
    rows = [
        [
            m["id"],
            m["name"],
            m["role"] or "-",
            f"{m['machineId']}/{m['agentId']}",
            m["state"],
            delivery_text(m.get("introduction")),
        ]
        for m in result["members"]
    ]
    _console().print(_table("Members", ["id", "name", "role", "agent", "state", "introduction"], rows))


def show_team(team: dict[str, Any]) -> None:
    say(f"{team['name']}  {team['id']}  ({team['state']})  revision {team['revision']}", style="bold")
    show_members(team)
    if team["exchanges"]:
        _console().print(_table("Exchanges", _EXCHANGE_COLUMNS, _exchange_rows(team["exchanges"])))


def show_list(result: dict[str, Any]) -> None:
    rows = [
        [t["id"], t["name"], t["state"], str(t["members"]), str(t["exchanges"]), str(t["revision"])]
        for t in result["teams"]
    ]
    _console().print(_table("Teams", ["id", "name", "state", "members", "exchanges", "revision"], rows))
    for broken in result.get("unavailable", []):
        say(f"unavailable: {broken['id']}: {broken['detail']}")


def show_inbox(result: dict[str, Any]) -> None:
    if not result["questions"] and not result["answers"]:
        say("Inbox is empty.")
        return
    console = _console()
    if result["questions"]:
        console.print(_table("Questions for you", _EXCHANGE_COLUMNS, _exchange_rows(result["questions"])))
    if result["answers"]:
        console.print(
            _table("Answers to your questions", _EXCHANGE_COLUMNS, _exchange_rows(result["answers"]))
        )


def show_status(result: dict[str, Any]) -> None:
    if "exchanges" not in result:
        show_exchange(result)
        return
    _console().print(_table("Exchanges", _EXCHANGE_COLUMNS, _exchange_rows(result["exchanges"])))


def show_wait(result: dict[str, Any]) -> None:
    say(f"wait ended: {result['reason']}")
    show_exchange(result["exchange"])
    if result["incoming"]:
        _console().print(
            _table("Questions for you (answer these)", _EXCHANGE_COLUMNS, _exchange_rows(result["incoming"]))
        )


def show_mapping(result: dict[str, Any]) -> None:
    for key, value in result.items():
        say(f"{key}: {value if isinstance(value, str | int | float) else json.dumps(value)}")


def show_member(member: dict[str, Any]) -> None:
    show_members({"members": [member]})
