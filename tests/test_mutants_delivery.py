# Issue 19: behaviours of core/delivery.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import re
from pathlib import Path

from harness.core import delivery as d
from harness.core.delivery import WriteResult
from harness.core.errors import ErrorCode
from tests.test_delivery_examples import Desk

SPEC = Path(__file__).resolve().parent.parent / "spec" / "delivery-v1.md"


def test_write_results_are_the_spec_words() -> None:
    """spec/delivery-v1.md's desk commands: `write_finished | noticeId, result ok / failed / uncertain`; the
    shell reports these words, so a result spelled otherwise in the code would not decode."""
    row = next(
        line for line in SPEC.read_text(encoding="utf-8").splitlines() if line.startswith("| write_finished")
    )
    assert {result.value for result in WriteResult} == set(re.findall(r"`([a-z_]+)`", row))


def test_a_loss_declared_at_the_expiry_instant_is_refused_and_a_moment_before_is_not() -> None:
    """Rule 5: an expired notice is never written again; a notice expires at `expires_at`, not after it."""
    for before_expiry, code in ((1, None), (0, ErrorCode.EXPIRED)):
        desk = Desk()
        late = desk.submit(1, expires_at=desk.now + 60_000)
        expires_at = desk.desk.notices[late].expires_at
        desk.write(late, d.WriteResult.UNCERTAIN)
        declared = d.Inspect(expires_at - before_expiry, late, landed=False)
        if code is None:
            desk.ok(declared)
        else:
            desk.fails(declared, code)


def test_the_desk_arms_its_timer_when_a_sessions_first_deadline_changes() -> None:
    """The shell sleeps until the desk's next deadline: a submit that brings a session's first deadline
    forward asks for the timer again (`ArmDeskTimer` at that deadline); one that expires later does not."""
    desk = Desk()
    first = desk.submit(1, expires_at=desk.now + 60_000)
    due = desk.desk.notices[first].expires_at
    assert [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)] == [d.ArmDeskTimer(due)]
    desk.submit(2, expires_at=due + 10_000)
    assert not [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)]
    sooner = desk.submit(3, expires_at=due - 10_000)
    assert [e for e in desk.effects if isinstance(e, d.ArmDeskTimer)] == [
        d.ArmDeskTimer(desk.desk.notices[sooner].expires_at)
    ]


def test_a_reason_only_change_of_a_queued_notice_is_reported() -> None:
    """A queued notice whose reason changes (busy -> draft) is a new delivery view for the owner: the
    desk says so (`DeliveryChanged`), although its state stays `queued`."""
    desk = Desk()
    notice = desk.submit(1)
    desk.observe(d.Observed.BUSY)
    assert desk.desk.notices[notice].reason is d.Reason.BUSY
    effects = desk.observe(d.Observed.DRAFT)
    changed = [e for e in effects if isinstance(e, d.DeliveryChanged)]
    assert [(e.notice_id, e.state, e.reason) for e in changed] == [
        (notice, d.DeliveryState.QUEUED, d.Reason.DRAFT)
    ]
