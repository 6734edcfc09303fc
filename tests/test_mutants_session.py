# Issue 19: behaviours of core/session.py that scripts/mutate_core.py found no test pinned (seed 0,
# sample 40).
from __future__ import annotations

from harness.core import session as s
from harness.core.errors import ErrorCode as E
from tests.test_session_examples import LIMITS, T0, Driver


def test_an_over_long_id_names_the_bound_it_exceeds() -> None:
    """The refusal of a too-long id says which bound (`id_chars`), as every bound_exceeded does."""
    long = "x" * (LIMITS.id_chars + 1)
    refused = Driver().fails(E.BOUND_EXCEEDED, s.Start(T0, long, s.Mode.DISCUSS, "lead", ("a",)))
    assert refused.bound == "id_chars"


def test_a_turn_of_a_stranger_is_not_found() -> None:
    d = Driver()
    d.start(s.Mode.SUPERVISE, "boss", "worker")
    refused = d.fails(E.NOT_FOUND, s.TurnStarted(T0, "stranger"))
    assert refused.detail == "no member 'stranger' in session 'sess'"
