# Issue 19: core/errors.py at the core: a Rejected names a bound only when one was exhausted, and a
# ProtocolViolation (an invariant check firing) carries which invariant and why, which the daemon reports.
from __future__ import annotations

import pytest

from harness.core.errors import ErrorCode, ProtocolViolation, Rejected


def test_a_rejection_names_no_bound_unless_given_one() -> None:
    assert Rejected(ErrorCode.CONFLICT, "no").bound is None
    assert Rejected(ErrorCode.BOUND_EXCEEDED, "full", "teams").bound == "teams"


def test_a_protocol_violation_carries_its_invariant_and_detail() -> None:
    with pytest.raises(ProtocolViolation) as raised:
        raise ProtocolViolation("T14", "a repeat changed the ledger")
    assert (raised.value.invariant, raised.value.detail) == ("T14", "a repeat changed the ledger")
    assert str(raised.value) == "T14: a repeat changed the ledger"
