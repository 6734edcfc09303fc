# Issue 19: boundaries of core/delivery_invariants.py that scripts/mutate_core.py found no test pinned
# (tests/test_delivery_invariants_fire.py has the rest: an excess of one over a bound of zero).
from __future__ import annotations

from harness.core import delivery_invariants as di
from tests.test_invariants_fire import INTRO3, _rewritten, world


def test_a_loss_declared_at_the_instant_its_write_began_is_a_valid_record() -> None:
    """D1: a loss is declared no earlier than the write it declares lost; at the same instant is allowed,
    a write recorded after the declaration is not."""
    started = world().desk.notices[INTRO3].started_at
    assert started is not None
    assert di.desk_violations(_rewritten(lost_at=started - 1, lost_started_at=started - 1)) == []
    later_write = di.desk_violations(_rewritten(lost_at=started - 1, lost_started_at=started))
    assert [invariant for invariant, _detail in later_write] == ["D1"]
