# The daemon's session keeper (io/session_keeper.py) and the plan `harness session run` hands it: a plan reads
# back as written, and a plan that is not one (garbage, too large, a FIFO in its place, another session's) is
# refused with one logged line, never hosted, and never stops the keeper or the daemon's loop. The keeper
# hosting real sessions across a daemon's SIGKILL is tests/test_session_restart.py.
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from harness.core import session as s
from harness.io import session_files
from harness.io import session_keeper as keeper
from harness.io import session_runner as runner


def a_plan(session_id: str = "s1") -> runner.SessionPlan:
    return runner.SessionPlan(
        session_id,
        s.Mode.FACILITATE,
        runner.Seat("chair", "agent-chair"),
        (runner.Seat("ann", "agent-ann"), runner.Seat("ben", "agent-ben")),
        "Find the endpoint.",
        "m-one",
        s.SessionLimits(reminder_after_ms=3_000, lead_turns=7),
    )


def test_a_plan_reads_back_as_written(tmp_path: Path) -> None:
    keeper.write_plan(tmp_path, a_plan())
    assert keeper.read_plan(tmp_path, "s1") == a_plan()
    path = session_files.session_dir(tmp_path, "s1") / runner.PLAN_FILE
    assert path.stat().st_mode & 0o777 == 0o600


def plan_text(**changes: object) -> bytes:
    view = {**keeper.plan_view(a_plan()), **changes}
    return json.dumps(view).encode()


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"{not json", "Expecting property name"),
        (b"[]", "list indices"),
        (plan_text(sessionId="s2"), "not this session's plan"),
        (plan_text(mode="chat"), "'chat' is not a valid Mode"),
        (plan_text(seats=[]), "not this session's plan"),
        (plan_text(seats=[{"name": "chair"}]), "agentId"),
        (plan_text(limits={"lead_turns": "many"}), "invalid literal"),
        (plan_text(limits={"no_such_bound": 1}), "unexpected keyword"),
        (plan_text(brief="x" * keeper.PLAN_BYTES), "larger than"),
    ],
)
def test_a_plan_that_is_not_one_is_refused(tmp_path: Path, content: bytes, detail: str) -> None:
    directory = session_files.session_dir(tmp_path, "s1")
    directory.mkdir(parents=True)
    (directory / runner.PLAN_FILE).write_bytes(content)
    with pytest.raises(keeper.PlanError, match=r"plan\.json") as refused:
        keeper.read_plan(tmp_path, "s1")
    assert detail in str(refused.value)


def test_a_fifo_in_place_of_a_plan_is_refused_without_waiting_on_it(tmp_path: Path) -> None:
    """The keeper runs in the daemon's loop: a FIFO (no writer) read with a plain open would block it."""
    directory = session_files.session_dir(tmp_path, "s1")
    directory.mkdir(parents=True)
    os.mkfifo(directory / runner.PLAN_FILE)
    with pytest.raises(keeper.PlanError, match="not a regular file"):
        keeper.read_plan(tmp_path, "s1")
    assert not keeper.hosted(tmp_path, "s1")


def test_the_keeper_logs_a_bad_plan_once_and_hosts_no_finished_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass every period: the bad plan is tried once (logged, and its failure left for `session run` to
    report), a session marked done and a directory without a plan are never hosted, and the keeper goes on."""
    bad = session_files.session_dir(tmp_path, "bad")
    bad.mkdir(parents=True)
    (bad / runner.PLAN_FILE).write_text("{}")
    keeper.write_plan(tmp_path, a_plan("finished"))
    (session_files.session_dir(tmp_path, "finished") / keeper.DONE_FILE).write_text("done\n")
    session_files.session_dir(tmp_path, "planless").mkdir()
    logs: list[str] = []

    def unexpected(request: object) -> object:
        raise AssertionError(f"the keeper acted for a session it must not host: {request}")

    made = keeper.SessionKeeper(tmp_path, {"create": unexpected}, log=logs.append, period=0.05)
    logged_at_pass: list[int] = []  # the keeper's passes, each as how many lines were logged when it began
    every_session = session_files.sessions

    def counted(home: Path) -> Iterator[str]:
        logged_at_pass.append(len(logs))
        return every_session(home)

    monkeypatch.setattr(session_files, "sessions", counted)

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(made.run)
                while sum(1 for logged in logged_at_pass if logged) < 5:  # passes that could have retried
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert len(logs) == 1 and logs[0].startswith("session bad: PlanError: bad_request:"), logs
    failure = json.loads((bad / keeper.FAILED_FILE).read_text())
    assert failure["error"] == "bad_request" and "session bad could not run" in failure["detail"], failure
    assert [keeper.hosted(tmp_path, sid) for sid in ("bad", "finished", "planless")] == [False, False, False]
