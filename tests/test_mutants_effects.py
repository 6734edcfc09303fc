# Issue 19: core/effects.py's notice ids at the core. They are derived, never drawn, so every destination
# recognises a resubmitted notice; `parse_notice_id` is how routing, reads and the remote grant take one
# apart, and it must refuse anything that is not exactly team/subject/kind.
from __future__ import annotations

import pytest

from harness.core.effects import notice_id, parse_notice_id
from harness.core.records import NoticeKind


@pytest.mark.parametrize("kind", list(NoticeKind))
def test_a_notice_id_is_team_subject_kind_and_parses_back(kind: NoticeKind) -> None:
    made = notice_id("t1", "q7", kind)
    assert made == f"t1/q7/{kind.value}"
    assert parse_notice_id(made) == ("t1", "q7", kind)


@pytest.mark.parametrize(
    "value",
    [
        "t1/q7",  # too few parts
        "t1/q7/answer/x",  # too many
        "t1/q7/answerx",  # not a kind
        "t1/q7/",
        "t1:q7:answer",  # another separator
        "",
    ],
)
def test_anything_but_exactly_three_parts_ending_in_a_kind_is_no_notice_id(value: str) -> None:
    assert parse_notice_id(value) is None
