# Issue 19: "no invariant check is ever seen to fire". tests/test_invariants_fire.py breaks each desk rule
# (D1-D11) and shows the aggregate checks report it; here each public check function of
# core/delivery_invariants.py is called on its own, on the same valid world and on a neighbour that breaks one
# rule, so that no function's share of the checking can be lost behind another that happens to catch it too.
from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from harness.core import delivery as d
from harness.core import delivery_invariants as di
from harness.core.errors import ProtocolViolation
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from tests.test_invariants_fire import (
    INTRO3,
    Q2N,
    _blind_wait,
    _notice,
    _patched,
    _system,
    _write_step,
    world,
)

Violation = tuple[str, str]
S = d.DeliveryState


def _tick() -> d.Tick:
    return d.Tick(world().now)


def _over_by_one(broken: bool) -> list[Violation]:
    """A desk allowed no records that gains its first one."""
    empty = d.empty_desk(world().desk.machine_id)
    one = attrs.evolve(empty, notices=empty.notices.set(INTRO3, world().desk.notices[INTRO3]))
    return di.grown_excess(empty, one if broken else empty, Limits(delivery_records=0))


def _effects(broken: bool) -> list[Violation]:
    """The real write step, reported as if a Tick (no idle check at the write boundary) had made it."""
    before, started, outcome = _write_step()
    return di.effect_violations(before, _tick() if broken else started, outcome)


def _waits(broken: bool) -> list[Violation]:
    with _patched(di, "decide_wait", _blind_wait, broken):
        return di.wait_violations(world().system, world().now)


def _misfiled(broken: bool) -> d.Desk:
    return _notice(world().desk, INTRO3, team_id="t9") if broken else world().desk


# Each public check: (broken) -> what it reports, and the one invariant it must report when broken.
CHECKS: dict[str, tuple[Callable[[bool], list[Violation]], str]] = {
    "desk_violations": (lambda broken: di.desk_violations(_notice(world().desk, Q2N, reason=None if broken
                        else d.Reason.CANCELLED)), "D8"),
    "step_violations": (lambda broken: di.step_violations(world().desk, _tick(), Accepted(attrs.evolve(
                        world().desk, restarted_at=world().desk.restarted_at - broken))), "D5"),
    "grown_excess": (_over_by_one, "D9"),
    "transition_violations": (lambda broken: di.transition_violations(world().desk, _notice(
                              world().desk, Q2N, state=S.EXPIRED if broken else S.WITHDRAWN)), "D1"),
    "effect_violations": (_effects, "D3"),
    "system_violations": (lambda broken: di.system_violations(_system(_misfiled(broken)), world().now), "D8"),
    "spanning_violations": (lambda broken: di.spanning_violations(_system(_misfiled(broken)), world().now),
                            "D8"),
    "wait_violations": (_waits, "D10"),
}  # fmt: skip


def test_every_public_check_function_has_a_case() -> None:
    public = {name for name in di.__dict__ if name.endswith(("_violations", "_excess")) and name[0] != "_"}
    assert public - {"bound_excess"} == CHECKS.keys()  # bound_excess returns amounts: its own test below


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_function_fires_on_its_violation_and_not_on_the_valid_neighbour(name: str) -> None:
    run, invariant = CHECKS[name]
    assert run(False) == []
    fired = run(True)
    assert {found for found, _detail in fired} == {invariant}, fired


def test_bound_excess_names_each_bound_by_subject_with_how_far_it_reaches() -> None:
    """D9's measure: by subject, the count or size that is over its bound, and nothing at a bound."""
    desk = world().desk
    longest = max(len(n.text.encode("utf-8")) for n in desk.notices.values())
    at_bounds = Limits(delivery_records=len(desk.notices), notice_bytes=longest, queued_per_agent=3)
    assert di.bound_excess(desk, at_bounds) == {}  # agent1: its introduction writing, q1 and q2a queued
    over = attrs.evolve(at_bounds, delivery_records=len(desk.notices) - 1, queued_per_agent=2)
    assert {subject: amount for subject, (amount, _detail) in di.bound_excess(desk, over).items()} == {
        "delivery_records": len(desk.notices),
        "queued_per_agent/agent1": 3,
    }
    tight = di.bound_excess(desk, attrs.evolve(at_bounds, notice_bytes=longest - 1))
    assert tight and all(s.startswith("notice_bytes/") and a == longest for s, (a, _) in tight.items())
    assert di.bound_excess(desk) == {}


def test_check_step_raises_what_step_violations_reports_and_passes_a_real_step() -> None:
    before, started, outcome = _write_step()
    assert di.step_violations(before, started, outcome, DEFAULT_LIMITS) == []
    di.check_step(before, started, outcome)
    with pytest.raises(ProtocolViolation, match=r"^D3: "):
        di.check_step(before, _tick(), outcome)
