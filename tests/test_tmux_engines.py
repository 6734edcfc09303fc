# TmuxTerminals against the real engines (Claude Code, Codex, Gemini CLI, pinned in tests/engines), offline
# against the scripted fake model: a notice written into an idle engine is submitted whole (the model's log
# shows every line of it), a long notice folds and is still confirmed, the turn on it is recognised, and a
# person's draft is never touched. Select with `-m engines`; skipped, saying why, where the engines cannot
# be installed or run.
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import trio

from harness.io.terminal_port import ScreenState, WriteOutcome
from harness.io.tmux import AgentTerminal, TmuxTerminals, WriteTiming
from tests.engines.launch import DESK_ENGINES, EngineRun, install_problem, launch

pytestmark = pytest.mark.engines

QUESTION = (
    "[team t] Question QE1 from b:\nWhich port does the daemon use?\nAnswer with: reply QE1 'your answer'"
)
LONG = "\n".join(
    f"Line {i} of a long notice: the daemon waits for a safe moment to write." for i in range(12)
)
SCRIPT = {
    "rules": [
        {"when": "Question QE1", "text": "Noted the question.", "delay": 1.5},
        {"when": "Line 0 of a long notice", "text": "Read the long notice."},
    ]
}


@pytest.fixture(scope="module")
def engines_installed() -> None:
    problem = install_problem()
    if problem is not None:
        pytest.skip(f"engines not available: {problem}")


@pytest.fixture
def engine_run(request: pytest.FixtureRequest, engines_installed: None) -> Iterator[EngineRun]:
    run = launch(request.param, script=SCRIPT, idle_timeout=60)
    try:
        yield run
    finally:
        run.stop()  # every process of its private namespace, by PID


async def _until(terminals: TmuxTerminals, state: ScreenState, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        while (await terminals.observe("e")).state is not state:
            await trio.sleep(0.1)


@pytest.mark.parametrize("engine_run", DESK_ENGINES, indirect=True)
async def test_write_into_a_real_engine(engine_run: EngineRun) -> None:
    run = engine_run
    terminals = TmuxTerminals(
        lambda: [AgentTerminal("e", run.engine, str(run.socket), run.target)], timing=WriteTiming(settle=1.0)
    )
    try:
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", QUESTION) is WriteOutcome.OK
        with trio.fail_after(20):
            while not await terminals.turn_matches("e", QUESTION):
                await trio.sleep(0.1)
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", LONG) is WriteOutcome.OK  # folded by the engine, still confirmed
        wanted = [json.dumps(line)[1:-1] for line in (*QUESTION.splitlines(), *LONG.splitlines())]
        with trio.fail_after(20):  # the engine may show its empty prompt a moment before it sends the turn
            while not all(line in json.dumps(run.fake.log(bodies=True)) for line in wanted):
                await trio.sleep(0.1)
        await _until(terminals, ScreenState.IDLE)
        # A person's draft: the write is refused and the screen stays exactly as it was.
        run.type_text("a draft the human has not sent yet")
        await _until(terminals, ScreenState.DRAFT)
        before = run.capture(ansi=True)
        requests = len(await trio.to_thread.run_sync(run.fake.log))
        assert await terminals.write("e", QUESTION) is WriteOutcome.FAILED
        assert run.capture(ansi=True) == before
        assert len(await trio.to_thread.run_sync(run.fake.log)) == requests
    finally:
        await terminals.aclose()
