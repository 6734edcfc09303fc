# The spec's tables are the code's tables: any change to a transition, bound or error code must change
# spec/team-v1.md in the same commit, or this fails.
from __future__ import annotations

import re
from pathlib import Path

from harness.core import invariants
from harness.core.errors import ErrorCode
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import QuestionState, TeamState
from harness.core.team import QUESTION_TRANSITIONS, TEAM_GATE, QuestionEvent
from tests.spec_tables import limit_names, read_table


def _next(value: str) -> object:
    return ErrorCode(value) if value in ErrorCode.__members__.values() else value


def test_team_gate_table_equals_code() -> None:
    spec = {
        (TeamState(row["state"]), row["command"]): _next(row["next"])
        for row in read_table("team-v1.md", "team-gate")
    }
    assert spec == dict(TEAM_GATE)


def test_question_table_equals_code() -> None:
    rows = read_table("team-v1.md", "question-transitions")
    spec = {(QuestionState(row["state"]), QuestionEvent(row["event"])): _next(row["next"]) for row in rows}
    assert spec == dict(QUESTION_TRANSITIONS)
    assert len(rows) == len(QuestionState) * len(QuestionEvent), "the question table must be total"


def test_bounds_table_equals_limits() -> None:
    spec = {row["bound"]: int(row["number"]) for row in read_table("team-v1.md", "bounds")}
    assert spec == {name: getattr(DEFAULT_LIMITS, name) for name in limit_names("team")}


def test_error_code_table_lists_every_code() -> None:
    assert [row["code"] for row in read_table("team-v1.md", "error-codes")] == [
        code.value for code in ErrorCode
    ]


def test_invariant_table_matches_the_checks_in_core() -> None:
    ids = [row["id"] for row in read_table("team-v1.md", "invariants")]
    assert ids == [f"T{n}" for n in range(1, len(ids) + 1)]
    source = Path(invariants.__file__).read_text(encoding="utf-8")
    cited = set(re.findall(r'"(T\d+)"', source)) | set(re.findall(r"(T\d+):", source))
    assert set(ids) - {"T10"} <= cited, "every invariant but T10 (true by construction) has a check"
    assert cited <= set(ids), "core cites an invariant the spec does not define"
