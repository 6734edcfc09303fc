# The session spec's tables are the code's tables: any change to a mode, role, tool, transition, bound, error
# code or invariant must change spec/session-v1.md in the same commit, or this fails.
from __future__ import annotations

import re
from pathlib import Path

import attrs

from harness.core import session, session_invariants
from harness.core.errors import ErrorCode
from harness.core.session import (
    ASK_TRANSITIONS,
    DEFAULT_SESSION_LIMITS,
    ENDINGS,
    MODES,
    ROLE_TOOLS,
    SESSION_GATE,
    AskEvent,
    AskState,
    Mode,
    Participants,
    Role,
    SessionLimits,
    SessionState,
    Termination,
    Tool,
    TraceKind,
)
from tests.spec_tables import read_table

SPEC = "session-v1.md"


def test_mode_table_equals_code() -> None:
    spec = {
        Mode(row["mode"]): (
            Role(row["lead"]),
            None if row["participant"] == "-" else Role(row["participant"]),
            Participants(row["participants"]),
        )
        for row in read_table(SPEC, "modes")
    }
    assert spec == dict(MODES)


def test_role_tool_table_equals_code() -> None:
    rows = read_table(SPEC, "role-tools")
    assert list(rows[0])[1:] == [tool.value for tool in Tool], "one column per tool, in order"
    spec = {
        Role(row["role"]): frozenset(Tool(name) for name, mark in row.items() if mark == "yes")
        for row in rows
    }
    assert all(mark in ("yes", "-") for row in rows for name, mark in row.items() if name != "role")
    assert spec == dict(ROLE_TOOLS)
    assert set(ROLE_TOOLS) == set(Role)


def test_session_gate_table_equals_code_and_is_total() -> None:
    rows = read_table(SPEC, "session-gate")
    spec = {
        (SessionState(row["state"]), row["command"]): ErrorCode(row["next"])
        if row["next"] in ErrorCode.__members__.values()
        else SessionState(row["next"])
        for row in rows
    }
    assert spec == dict(SESSION_GATE)
    assert len(rows) == len(SessionState) * len(session.COMMAND_NAMES), "the gate must be total"


def test_ending_table_equals_code() -> None:
    rows = read_table(SPEC, "endings")
    assert {row["command"]: Termination(row["termination"]) for row in rows} == dict(ENDINGS)
    running = SessionState.RUNNING
    assert set(ENDINGS) == {
        name for (state, name), target in SESSION_GATE.items() if state is running and target == "ended"
    }


def test_ask_transition_table_equals_code_and_is_total() -> None:
    rows = read_table(SPEC, "ask-transitions")
    spec = {(AskState(row["state"]), AskEvent(row["event"])): AskState(row["next"]) for row in rows}
    assert spec == dict(ASK_TRANSITIONS)
    assert len(rows) == len(AskState) * len(AskEvent), "the ask table must be total"


def test_trace_event_table_lists_every_kind() -> None:
    assert [TraceKind(row["kind"]) for row in read_table(SPEC, "trace-events")] == list(TraceKind)


def test_bounds_table_equals_session_limits() -> None:
    rows = read_table(SPEC, "bounds")
    assert {row["bound"]: int(row["number"]) for row in rows} == attrs.asdict(DEFAULT_SESSION_LIMITS)
    assert [row["bound"] for row in rows] == [field.name for field in attrs.fields(SessionLimits)]


def test_error_code_table_lists_exactly_the_codes_the_session_uses() -> None:
    listed = [ErrorCode(row["code"]) for row in read_table(SPEC, "error-codes")]
    source = Path(session.__file__).read_text(encoding="utf-8")
    used = {ErrorCode[name] for name in re.findall(r"\bE\.([A-Z_]+)\b", source)}
    assert set(listed) == used and len(listed) == len(used)


def test_invariant_table_matches_the_checks_in_core() -> None:
    ids = [row["id"] for row in read_table(SPEC, "invariants")]
    assert ids == [f"S{n}" for n in range(1, len(ids) + 1)]
    source = Path(session_invariants.__file__).read_text(encoding="utf-8")
    cited = set(re.findall(r'"(S\d+)"', source)) | set(re.findall(r"(S\d+)[:.]", source))
    assert set(ids) - {"S8"} <= cited, "every invariant but S8 (true by construction) has a check"
    assert cited <= set(ids), "core cites an invariant the spec does not define"


def test_every_tool_has_the_command_the_spec_names() -> None:
    """Every tool of table role-tools is callable from a terminal, as table tool-commands says: the session's
    own tools are `harness session` commands (CALL_TOOLS), the rest team operations or the brief's reply."""
    from harness.io.session_runner import CALL_TOOLS, TOOL_USAGE

    rows = {Tool(row["tool"]): row["command"] for row in read_table(SPEC, "tool-commands")}
    assert list(rows) == list(Tool) and set(TOOL_USAGE) == set(Tool)
    session_commands = {
        tool: command.removeprefix("harness session ")
        for tool, command in rows.items()
        if command.startswith("harness session ")
    }
    assert session_commands == {tool: name for name, (tool, _) in CALL_TOOLS.items()}
