# `replace` stands in for attrs.evolve on the hot path; it must behave like it.
from __future__ import annotations

import attrs
import pytest

from harness.core.records import DeliveryView
from harness.core.values import replace


def test_replace_matches_evolve() -> None:
    view = DeliveryView("queued", "busy", 5)
    assert replace(view, state="delivered") == attrs.evolve(view, state="delivered")
    assert replace(view) == view


def test_replace_refuses_unknown_fields() -> None:
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(DeliveryView("queued", None, 1), nope=1)
