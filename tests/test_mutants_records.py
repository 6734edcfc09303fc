# Issue 19: core/records.py's values that leave the core as strings (journals, snapshots, notice ids, the
# JSON the CLI prints) and its two patterns, pinned at the core: a changed string would orphan every stored
# journal, and a loosened pattern would let an id or a reason carry what it must not.
from __future__ import annotations

import pytest

from harness.core import records as r


def test_the_wire_strings_of_the_record_enums_and_the_owner_author() -> None:
    assert [s.value for s in r.TeamState] == ["active", "paused", "archived"]
    assert [s.value for s in r.QuestionState] == ["open", "answered", "expired", "cancelled"]
    assert [s.value for s in r.MembershipState] == ["active", "removed"]
    assert [k.value for k in r.NoticeKind] == ["introduction", "question", "answer"]
    assert r.USER == "user"


@pytest.mark.parametrize("value", ["t1", "A", "9.x_y:z-w", "a" * 200])
def test_an_id_is_letters_digits_and_dot_underscore_colon_dash(value: str) -> None:
    assert r.ID_PATTERN.fullmatch(value)


@pytest.mark.parametrize("value", ["", "-t", ".t", "t/1", "t 1", "t\n", "t\x1b"])
def test_an_id_that_could_be_a_path_or_start_with_punctuation_is_refused(value: str) -> None:
    assert not r.ID_PATTERN.fullmatch(value)


@pytest.mark.parametrize("value", ["no_answer", "concluded", "a", "x" * 32])
def test_a_reason_is_a_short_lowercase_token(value: str) -> None:
    assert r.REASON_PATTERN.fullmatch(value)


@pytest.mark.parametrize("value", ["", "x" * 33, "No", "no answer", "a1", "a\x1b[0m"])
def test_a_reason_with_anything_else_is_refused(value: str) -> None:
    assert not r.REASON_PATTERN.fullmatch(value)


def test_optional_fields_default_to_absent_and_an_empty_ledger_has_no_teams() -> None:
    member = r.Membership("m1", "mach", "agent", "alice", "dev", r.MembershipState.ACTIVE, 5)
    assert (member.removed_at, member.introduction) == (None, None)
    exchange = r.Exchange(
        "q1", "m1", "m2", "hi", None, None, 1, 1000, True, False, 5, 1005, r.QuestionState.OPEN
    )
    optional = (
        exchange.answer,
        exchange.ended_at,
        exchange.delivery,
        exchange.answer_delivery,
        exchange.reason,
    )
    assert optional == (None,) * 5
    assert len(r.Ledger().teams) == 0 and r.Ledger() == r.EMPTY_LEDGER
