# `replace` stands in for attrs.evolve on the hot path; it must behave like it.
from __future__ import annotations

import attrs
import pytest
from immutables import Map

from harness.core.records import DeliveryView, Ledger
from harness.core.values import replace


def test_replace_matches_evolve() -> None:
    view = DeliveryView("queued", "busy", 5)
    assert replace(view, state="delivered") == attrs.evolve(view, state="delivered")
    assert replace(view) == view


def test_replace_refuses_unknown_fields() -> None:
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(DeliveryView("queued", None, 1), nope=1)


@pytest.mark.parametrize("teams", [0, 1, 2])
def test_replace_on_a_record_of_one_field(teams: int) -> None:
    """`attrgetter` of a single name returns the value, not a tuple: a one-field record (the Ledger) once
    raised IndexError with no teams and TypeError with two, and worked only with exactly one."""
    ledger = Ledger(Map({f"t{n}": n for n in range(teams)}))
    assert replace(ledger, teams=Map()) == attrs.evolve(ledger, teams=Map())
    assert replace(ledger) == ledger
