# Issue 19: core/outcome.py's defaults decide what a reducer's answer means: an Accepted changed the state
# unless it says otherwise, and `unchanged` (an idempotent repeat, a no-op) says so, carrying its record.
from __future__ import annotations

from typing import get_args, get_origin

from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted, Outcome, reject, unchanged


def test_an_accepted_outcome_changed_the_state_and_carries_nothing_else_unless_told() -> None:
    accepted = Accepted("state")
    assert (accepted.result, accepted.events, accepted.effects, accepted.changed) == (None, (), (), True)


def test_unchanged_keeps_the_state_and_its_record_and_says_nothing_changed() -> None:
    assert unchanged("state", "record") == Accepted("state", "record", (), (), False)
    assert unchanged("state") == Accepted("state", None, changed=False)


def test_reject_is_a_rejected_value_with_its_bound() -> None:
    assert reject(ErrorCode.BOUND_EXCEEDED, "too many", "teams") == Rejected(
        ErrorCode.BOUND_EXCEEDED, "too many", "teams"
    )
    assert reject(ErrorCode.CONFLICT, "no") == Rejected(ErrorCode.CONFLICT, "no", None)


def test_an_outcome_is_an_accepted_state_or_a_rejection() -> None:
    accepted, rejected = get_args(Outcome)
    assert get_origin(accepted) is Accepted and rejected is Rejected
