# The board spec's tables are the code's tables: any change to a transition, actor rule, bound, error code or
# invariant must change spec/board-v1.md in the same commit, or this fails.
from __future__ import annotations

import re
from pathlib import Path

import attrs

from harness.core import board, board_invariants
from harness.core.board import (
    COMMAND_ACTORS,
    DEFAULT_BOARD_LIMITS,
    DEPENDENCY_STATE,
    TASK_TRANSITIONS,
    BoardLimits,
    DependencySummary,
    TaskEvent,
    TaskState,
)
from harness.core.errors import ErrorCode
from tests.spec_tables import read_table

SPEC = "board-v1.md"


def _next(value: str) -> object:
    return ErrorCode(value) if value in ErrorCode.__members__.values() else TaskState(value)


def test_task_transition_table_equals_code_and_is_total() -> None:
    rows = read_table(SPEC, "task-transitions")
    spec = {(TaskState(row["state"]), TaskEvent(row["event"])): _next(row["next"]) for row in rows}
    assert spec == dict(TASK_TRANSITIONS)
    assert len(rows) == len(TaskState) * len(TaskEvent), "the task table must be total"


def test_dependency_state_table_equals_code() -> None:
    rows = read_table(SPEC, "dependency-state")
    assert {DependencySummary(row["dependencies"]): TaskState(row["state"]) for row in rows} == dict(
        DEPENDENCY_STATE
    )


def test_command_actor_table_equals_code() -> None:
    assert {row["command"]: row["actor"] for row in read_table(SPEC, "command-actors")} == dict(
        COMMAND_ACTORS
    )
    assert set(COMMAND_ACTORS) == set(board.BOARD_COMMAND_NAMES.values())


def test_bounds_table_equals_board_limits() -> None:
    rows = read_table(SPEC, "bounds")
    assert {row["bound"]: int(row["number"]) for row in rows} == attrs.asdict(DEFAULT_BOARD_LIMITS)
    assert [row["bound"] for row in rows] == [field.name for field in attrs.fields(BoardLimits)]


def test_error_code_table_lists_exactly_the_codes_the_board_uses() -> None:
    listed = [ErrorCode(row["code"]) for row in read_table(SPEC, "error-codes")]
    source = Path(board.__file__).read_text(encoding="utf-8")
    used = {ErrorCode[name] for name in re.findall(r"\bE\.([A-Z_]+)\b", source)}
    assert set(listed) == used and len(listed) == len(used)


def test_invariant_table_matches_the_checks_in_core() -> None:
    ids = [row["id"] for row in read_table(SPEC, "invariants")]
    assert ids == [f"B{n}" for n in range(1, len(ids) + 1)]
    source = Path(board_invariants.__file__).read_text(encoding="utf-8")
    cited = set(re.findall(r'"(B\d+)"', source)) | set(re.findall(r"(B\d+)[:.]", source))
    assert set(ids) - {"B9"} <= cited, "every invariant but B9 (true by construction) has a check"
    assert cited <= set(ids), "core cites an invariant the spec does not define"
