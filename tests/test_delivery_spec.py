# The delivery spec's tables are the code's tables: any change to a transition, reason, bound or invariant
# must change spec/delivery-v1.md in the same commit, or this fails.
from __future__ import annotations

import re
from pathlib import Path

from harness.core import delivery as d
from harness.core import delivery_invariants
from harness.core.errors import ErrorCode
from harness.core.limits import DEFAULT_LIMITS
from tests.spec_tables import limit_names, read_table

SPEC = "delivery-v1.md"


def _next(value: str) -> object:
    return ErrorCode(value) if value in ErrorCode.__members__.values() else d.DeliveryState(value)


def test_transition_table_equals_code() -> None:
    rows = read_table(SPEC, "delivery-transitions")
    spec = {
        (d.DeliveryState(row["state"]), d.DeliveryEvent(event)): _next(row[event])
        for row in rows
        for event in row
        if event != "state"
    }
    assert spec == dict(d.DELIVERY_TRANSITIONS)
    assert len(spec) == len(d.DeliveryState) * len(d.DeliveryEvent), "the table must be total"


def test_the_bulk_events_are_admitted_from_every_state() -> None:
    """spec/delivery-v1.md: "The columns read, retrieve, withdraw, hold and release hold no error code"."""
    for (state, event), target in d.DELIVERY_TRANSITIONS.items():
        if event in d.BULK_EVENTS:
            assert isinstance(target, d.DeliveryState), (state, event, target)


def test_event_reasons_equal_code() -> None:
    rows = read_table(SPEC, "event-reasons")
    spec = {
        d.DeliveryEvent(row["event"]): None if row["reason"] == "-" else d.Reason(row["reason"])
        for row in rows
    }
    assert spec == dict(d.EVENT_REASON)


def test_observation_reasons_equal_code() -> None:
    rows = read_table(SPEC, "observation-reasons")
    assert {d.Observed(row["observed"]): d.Reason(row["reason"]) for row in rows} == dict(
        d.OBSERVATION_REASON
    )


def test_bounds_table_equals_limits() -> None:
    rows = read_table(SPEC, "delivery-bounds")
    assert {row["bound"]: int(row["number"]) for row in rows} == {
        name: getattr(DEFAULT_LIMITS, name) for name in limit_names("delivery")
    }


def test_no_written_state_leads_back_to_unsent_or_writing_but_a_declared_loss() -> None:
    """The one way back from a state that may have written is the owner's declared loss of an unconfirmed
    write (`_inspect` admits it once per notice, core/delivery.py)."""
    declared = (d.DeliveryState.UNCONFIRMED, d.DeliveryEvent.INSPECT_LOST)
    assert d.DELIVERY_TRANSITIONS[declared] is d.DeliveryState.QUEUED
    for (state, event), target in d.DELIVERY_TRANSITIONS.items():
        if state in d.WRITTEN and state is not d.DeliveryState.WRITING and (state, event) != declared:
            assert target not in (d.DeliveryState.QUEUED, d.DeliveryState.HELD, d.DeliveryState.WRITING)
        if state is d.DeliveryState.WRITING:
            assert target not in (d.DeliveryState.QUEUED, d.DeliveryState.HELD)


def test_invariant_table_matches_the_checks_in_core() -> None:
    ids = [row["id"] for row in read_table(SPEC, "invariants")]
    assert ids == [f"D{n}" for n in range(1, len(ids) + 1)]
    source = Path(delivery_invariants.__file__).read_text(encoding="utf-8")
    cited = set(re.findall(r'"(D\d+)"', source))
    assert cited == set(ids), "every invariant has a check, and core cites no invariant the spec lacks"
