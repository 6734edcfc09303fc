# spec/trace-v1.md's tables are the code's: a change to a redaction rule, a trace bound or a summary step
# changes the spec in the same commit, or this fails.
from __future__ import annotations

from harness.core import redaction
from harness.io import trace, trace_files
from tests.spec_tables import read_table

SPEC = "trace-v1.md"


def test_pattern_table_equals_code() -> None:
    rows = read_table(SPEC, "patterns")
    assert {row["kind"]: row["pattern"].replace("\\|", "|") for row in rows} == dict(redaction.PATTERNS)


def test_credential_field_table_equals_code() -> None:
    rows = read_table(SPEC, "credential-fields")
    assert {row["field"]: row["kind"] for row in rows} == dict(redaction.CREDENTIAL_FIELDS)


def test_bounds_table_equals_code() -> None:
    rows = {row["bound"]: int(row["value"]) for row in read_table(SPEC, "bounds")}
    bounds = trace.DEFAULT_BOUNDS
    assert rows == {
        "file_bytes": bounds.file_bytes,
        "rotated_files": bounds.rotated_files,
        "total_bytes": bounds.total_bytes,
        "max_line_bytes": trace_files.MAX_LINE_BYTES,
    }


def test_sources_table_names_the_harness_sources() -> None:
    rows = read_table(SPEC, "sources")
    harness_sources = [trace_files.LEDGER, trace_files.DESK, trace_files.BOARD, trace_files.ORCHESTRATOR]
    assert [row["source"] for row in rows] == harness_sources


def test_milestone_table_equals_code() -> None:
    rows = read_table(SPEC, "milestones")
    spec = {
        row["step"]: (row["source"], row["type"], dict(f.split("=") for f in row["fields"].split()))
        for row in rows
    }
    assert spec == {step: (s, t, dict(f)) for step, (s, t, f) in trace_files.MILESTONES.items()}


def test_default_allowlist_is_the_seeds() -> None:
    """"ANTHROPIC_API_KEY, GH_TOKEN, GITHUB_TOKEN by default"."""
    assert redaction.DEFAULT_ENV_VARS == ("ANTHROPIC_API_KEY", "GH_TOKEN", "GITHUB_TOKEN")
    assert redaction.env_var_names({}) == redaction.DEFAULT_ENV_VARS
