# What the CLI prints. Agents read `--json` (one JSON document on stdout, errors included, so a script never
# parses prose); people get rich tables. rich is imported only on the human path, which keeps an agent's
# `--json` call fast.
from __future__ import annotations

import json
import sys
from typing import Any

# Exit statuses of the contract.
OK = 0
PROTOCOL_ERROR = 1
USAGE = 2
UNREACHABLE = 3
UNCERTAIN = 4


def emit_json(value: object) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")


def emit_error(json_out: bool, code: str, detail: str, operation_id: str | None = None) -> None:
    """One JSON object on stdout with --json, else one line on stderr."""
    if json_out:
        emit_json({"error": code, "detail": detail, "operationId": operation_id})
        return
    line = f"harness: {code}: {detail}"
    if operation_id is not None:
        line += f" (operation id {operation_id}; a retry must reuse it)"
    sys.stderr.write(line + "\n")


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _clock(ms: object) -> str:
    if not isinstance(ms, int):
        return "-"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _delivery(view: object) -> str:
    if not isinstance(view, dict):
        return "-"
    reason = view.get("reason")
    return f"{view.get('state')} ({reason})" if reason else str(view.get("state"))


def _short(text: object, width: int = 60) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _exchange_rows(exchanges: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for e in exchanges:
        answer = e.get("answer")
        answer_text = (
            "-" if not answer else _short(answer.get("text"), 40) + (" (late)" if answer.get("late") else "")
        )
        rows.append(
            [
                e["id"],
                e["from"],
                e["to"],
                e["state"],
                _short(e["text"], 50),
                answer_text,
                _delivery(e.get("delivery")),
            ]
        )
    return rows


_EXCHANGE_COLUMNS = ["question", "from", "to", "state", "text", "answer", "delivery"]


def show_exchange(e: dict[str, Any]) -> None:
    console = _console()
    console.print(f"Question {e['id']}  {e['from']} -> {e['to']}  ({e['state']})", markup=False, style="bold")
    console.print(f"  asked {_clock(e.get('createdAt'))}, deadline {_clock(e.get('deadlineAt'))}")
    console.print(f"  delivery: {_delivery(e.get('delivery'))}")
    console.print("  text: " + str(e["text"]), markup=False)
    if e.get("context"):
        console.print("  context: " + str(e["context"]), markup=False)
    answer = e.get("answer")
    if answer:
        late = " (late)" if answer.get("late") else ""
        console.print(f"  answer by {answer['author']} at {_clock(answer.get('at'))}{late}:", markup=False)
        console.print("    " + str(answer["text"]), markup=False)
        for ref in answer.get("evidence") or []:
            console.print("    evidence: " + str(ref), markup=False)


def show_members(result: dict[str, Any]) -> None:
    rows = [
        [
            m["id"],
            m["name"],
            m["role"] or "-",
            f"{m['machineId']}/{m['agentId']}",
            m["state"],
            _delivery(m.get("introduction")),
        ]
        for m in result["members"]
    ]
    _console().print(_table("Members", ["id", "name", "role", "agent", "state", "introduction"], rows))


def show_team(team: dict[str, Any]) -> None:
    console = _console()
    console.print(
        f"{team['name']}  {team['id']}  ({team['state']})  revision {team['revision']}",
        markup=False,
        style="bold",
    )
    show_members(team)
    if team["exchanges"]:
        console.print(_table("Exchanges", _EXCHANGE_COLUMNS, _exchange_rows(team["exchanges"])))


def show_list(result: dict[str, Any]) -> None:
    rows = [
        [t["id"], t["name"], t["state"], str(t["members"]), str(t["exchanges"]), str(t["revision"])]
        for t in result["teams"]
    ]
    console = _console()
    console.print(_table("Teams", ["id", "name", "state", "members", "exchanges", "revision"], rows))
    for broken in result.get("unavailable", []):
        console.print(f"unavailable: {broken['id']}: {broken['detail']}", markup=False)


def show_inbox(result: dict[str, Any]) -> None:
    console = _console()
    if not result["questions"] and not result["answers"]:
        console.print("Inbox is empty.")
        return
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
    _console().print(f"wait ended: {result['reason']}")
    show_exchange(result["exchange"])
    if result["incoming"]:
        _console().print(
            _table("Questions for you (answer these)", _EXCHANGE_COLUMNS, _exchange_rows(result["incoming"]))
        )


def show_mapping(result: dict[str, Any]) -> None:
    console = _console()
    for key, value in result.items():
        shown = value if isinstance(value, str | int | float) else json.dumps(value)
        console.print(f"{key}: {shown}", markup=False)


def show_member(member: dict[str, Any]) -> None:
    show_members({"members": [member]})
