# Issue 16, item 4: a daemon killed between its paste and its Enter leaves the notice in the composer. The
# next desk names it (`queued`, reason `leftover`, with that notice's id) instead of an unexplained `draft`,
# and never touches it: a person submits it or clears it. Real parts: a tmux server on its own socket, the
# fake TUI (tests/fake_tui.py) classified by the real `claude` profile, and a desk process that is SIGKILLed
# inside its write. Run as a module, this file is that doomed desk.
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from harness.cli.watch import delivery_advice
from harness.core import delivery as d
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind
from harness.io.daemon import now_ms
from harness.io.desk_runner import IN_COMPOSER, DeskRunner, RunnerTiming
from harness.io.team_delivery import DeliveryReport
from harness.io.terminal_port import ScreenState
from harness.io.tmux import AgentTerminal, ProcessRunner, TmuxTerminals, WriteTiming
from tests.test_tmux import Pane, server, tui  # noqa: F401  (fixtures)

AGENT, MACHINE = "a", "m1"
LIMITS = attrs.evolve(DEFAULT_LIMITS, write_settle_ms=50)
TIMING = RunnerTiming(poll_ms=20)
DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine
TEXTS = {
    1: "[team t] Question q1 from alice:\nWhich port?",
    2: "[team t] Question q2 from alice:\nAnd the host?",
}


def submit(n: int) -> d.Submit:
    return d.Submit(
        now_ms(), "t1", f"t1/q{n}/question", NoticeKind.QUESTION, f"q{n}", "mem-a", MACHINE, AGENT,
        now_ms() + 3_600_000, TEXTS[n],
    )  # fmt: skip


def desk(home: Path, terminals: TmuxTerminals, reports: list[DeliveryReport]) -> DeskRunner:
    async def report(one: DeliveryReport) -> None:
        reports.append(one)

    return DeskRunner(home, MACHINE, report, terminals, limits=LIMITS, clock=now_ms, timing=TIMING)


async def _doomed_desk(home: Path, socket: str, target: str) -> None:
    """A desk whose Enter never comes: it pastes, then waits ten minutes before pressing it."""
    timing = WriteTiming(enter_delay=600.0, confirm=10.0, poll=0.02, settle=0.15)
    terminals = TmuxTerminals(lambda: [AgentTerminal(AGENT, "claude", socket, target)], timing=timing)
    async with trio.open_nursery() as nursery:
        runner = await nursery.start(desk(home, terminals, []).run)
        await runner.submit(submit(1))


async def until(check: Callable[[], bool]) -> None:
    with trio.fail_after(DEADLINE):
        while not check():
            await trio.sleep(0.02)


async def test_a_crash_leftover_is_named_and_only_a_person_acts_on_it(
    tui: Pane,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    """Seed: "Never send interrupt/cancel keys or overwrite a human draft" and "offline, unpaired, busy,
    draft, expired, cancelled, and uncertain states are visible and actionable"."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.test_leftover", str(home), tui.socket, tui.target], cwd=Path.cwd()
    )
    try:
        with trio.fail_after(DEADLINE):
            while not any("paste" in e for e in tui.inputs()):
                assert child.poll() is None, "the doomed desk died before its paste"
                await trio.sleep(0.02)
            await tui.until(ScreenState.DRAFT)  # the paste shows in the composer, not submitted
    finally:
        child.kill()  # SIGKILL between the paste and the Enter: no shutdown path runs
        child.wait(10)
    assert [e for e in tui.inputs() if "key" in e] == []

    reports: list[DeliveryReport] = []
    async with trio.open_nursery() as nursery:
        runner = await nursery.start(desk(home, tui.terminals, reports).run)
        cut, later = submit(1).notice_id, submit(2).notice_id
        assert runner.desk.notices[cut].state is d.DeliveryState.UNCONFIRMED
        await runner.submit(submit(2))
        await until(lambda: runner.desk.notices[later].reason is d.Reason.LEFTOVER)
        assert runner.leftovers[AGENT] == cut
        assert DeliveryReport("t1", later, "queued", "leftover") in reports  # what status, watch and web show
        inspection = await runner.inspect("t1", cut)
        assert not isinstance(inspection, d.Rejected) and inspection.found == IN_COMPOSER
        await trio.sleep(1.0)  # it stays named and untouched for as long as nobody acts
        assert runner.desk.notices[later].reason is d.Reason.LEFTOVER
        assert sum("paste" in e for e in tui.inputs()) == 1 and [e for e in tui.inputs() if "key" in e] == []

        await ProcessRunner(tui.socket).run("send-keys", "-t", tui.target, "Enter")  # the person submits it
        landed = (d.DeliveryState.DELIVERED, d.DeliveryState.ACCEPTED)
        await until(lambda: runner.desk.notices[later].state in landed)
        await until(lambda: runner.desk.notices[cut].state is d.DeliveryState.ACCEPTED)
        assert AGENT not in runner.leftovers
        pastes = [str(e["paste"]).replace("\r", "\n") for e in tui.inputs() if "paste" in e]
        assert pastes == [TEXTS[1], TEXTS[2]]  # the leftover was never pasted again
        assert [e.get("key") for e in tui.inputs() if "key" in e] == ["Enter", "Enter"]  # the person's, ours
        runner.stop()


def test_the_views_name_the_leftover_and_the_two_safe_actions() -> None:
    exchange = {"id": "q2", "delivery": {"state": "queued", "reason": "leftover"}}
    (advice,) = delivery_advice(exchange, ["t1/q1/question"])
    assert "t1/q1/question" in advice and "submit it" in advice and "clear it" in advice
    assert delivery_advice({"id": "q3", "delivery": {"state": "queued", "reason": "draft"}}, []) == []
    unconfirmed = delivery_advice({"id": "q1", "delivery": {"state": "unconfirmed"}}, [])
    assert any("inspect q1" in line and "resolve q1 --landed" in line for line in unconfirmed)


if __name__ == "__main__":
    trio.run(_doomed_desk, Path(sys.argv[1]), sys.argv[2], sys.argv[3])
