# TmuxTerminals against the real engines (Claude Code, Codex, Gemini CLI, Grok CLI, pinned in tests/engines),
# offline against the scripted fake model: a notice written into an idle engine is submitted whole (the
# model's log shows every line of it), a long notice folds (or, for Grok CLI, is excerpted on its one line)
# and is still confirmed, the turn on it is recognised, and a person's draft is never touched. Grok CLI knows
# no bracketed paste, so it gets each notice on one line: a hostile notice is still exactly one turn there,
# every control byte shown. Select with `-m engines`; skipped, saying why, where the engines cannot be
# installed or run.
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import trio

from harness.core.system import render_notice
from harness.core.team import question_notice
from harness.core.terminal_text import LINE_JOIN, ONE_LINE_EXCERPT
from harness.io.profiles import notice_as_typed, profile_for
from harness.io.terminal_port import ScreenState, WriteOutcome
from harness.io.tmux import AgentTerminal, TmuxTerminals, WriteTiming
from tests.engines.launch import ENGINES, EngineRun, install_problem, launch
from tests.live.receipts import engine_turns
from tests.team_helpers import TEAM, Driver
from tests.test_terminal_text import PAYLOADS

pytestmark = pytest.mark.engines

DEADLINE = 60.0  # generous: a real engine, its fake model and tmux share a loaded two-core machine
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
        {"when": "Question q", "text": "Noted."},
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


def _terminals(run: EngineRun) -> TmuxTerminals:
    return TmuxTerminals(
        lambda: [AgentTerminal("e", run.engine, str(run.socket), run.target)], timing=WriteTiming(settle=1.0)
    )


async def _until(terminals: TmuxTerminals, state: ScreenState, seconds: float = DEADLINE) -> None:
    with trio.fail_after(seconds):
        while (await terminals.observe("e")).state is not state:
            await trio.sleep(0.1)


def _question(driver: Driver, question_id: str) -> str:
    """The notice the ledger owes the addressee of question `question_id`, as the owner renders it."""
    team = driver.ledger.teams[TEAM]
    return render_notice(driver.ledger, question_notice(team, team.exchanges[question_id]))


async def _turns(run: EngineRun, count: int) -> list[str]:
    """The prompts of the engine's turns, once it took at least `count` (the engine may show its empty prompt
    a moment before it sends the turn)."""
    with trio.fail_after(DEADLINE):
        while len(turns := engine_turns(await trio.to_thread.run_sync(run.fake.log))) < count:
            await trio.sleep(0.1)
    return [turn.prompt for turn in turns]


@pytest.mark.parametrize("engine_run", ENGINES, indirect=True)
async def test_write_into_a_real_engine(engine_run: EngineRun) -> None:
    run = engine_run
    terminals = _terminals(run)
    try:
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", QUESTION) is WriteOutcome.OK
        with trio.fail_after(DEADLINE):
            while not await terminals.turn_matches("e", QUESTION):
                await trio.sleep(0.1)
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", LONG) is WriteOutcome.OK  # folded by the engine, still confirmed
        wanted = [json.dumps(line)[1:-1] for line in (*QUESTION.splitlines(), *LONG.splitlines())]
        # The engine may show its empty prompt a moment before it sends the turn.
        with trio.fail_after(DEADLINE):
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


@pytest.mark.parametrize("engine_run", ["grok"], indirect=True)
async def test_grok_takes_a_hostile_notice_as_one_visible_line(engine_run: EngineRun) -> None:
    """Grok CLI knows no bracketed paste: a line end in a paste stays in its draft as a carriage return, and
    one arriving alone is Enter. A question carrying every hostile payload (ESC[201~ with a CR and a command
    after it, ^C, ^U, NUL, OSC 52, OSC 0, a C1 CSI, a bidi override, tab and CR LF) reaches the model as ONE
    user turn that is exactly the notice on one line: inside the desk's framing, each line break shown as ␤,
    every control byte shown visibly, nothing of it acting as a key (no second turn, nothing erased)."""
    run = engine_run
    driver = Driver().create()
    driver.ask("q1", 2, 1, "\n".join(PAYLOADS), context=PAYLOADS[0])
    notice = _question(driver, "q1")
    typed = notice_as_typed("grok", notice)
    assert "\n" not in typed and LINE_JOIN in typed
    terminals = _terminals(run)
    try:
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", notice) is WriteOutcome.OK
        prompts = await _turns(run, 1)
        assert prompts == [typed]
        head = "[team Build Harness] Question q1 from agent-2: ␤ > please check the build␛[201~; touch"
        assert typed.startswith(head)
        assert "^M" in typed and "^C" in typed and "^U" in typed and "^@" in typed
        assert not any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in prompts[0])
        with trio.fail_after(DEADLINE):
            while not await terminals.turn_matches("e", notice):
                await trio.sleep(0.1)
        await _until(terminals, ScreenState.IDLE)
        await trio.sleep(2)  # a stray submit of a payload's own text would show as a second turn by now
        assert await _turns(run, 1) == [typed]
    finally:
        await terminals.aclose()


@pytest.mark.parametrize("engine_run", ["grok"], indirect=True)
async def test_grok_gets_a_long_notice_excerpted_on_its_line(engine_run: EngineRun) -> None:
    """A notice longer than Grok CLI's one-line budget would draw a prompt box taller than the pane, which
    cannot be read back to confirm the paste: it goes in excerpted, with where to read the full text and its
    last line (how to answer) kept, and is confirmed and taken as one turn."""
    run = engine_run
    driver = Driver().create()
    findings = (f"Finding {i}: the relay dropped a frame under load." for i in range(100))
    driver.ask("q2", 2, 1, "\n".join(findings))
    notice = _question(driver, "q2")
    limit = profile_for("grok").one_line_chars
    assert len(notice) > limit
    typed = notice_as_typed("grok", notice)
    assert len(typed) <= limit and ONE_LINE_EXCERPT in typed
    assert typed.endswith(f"{LINE_JOIN}{notice.splitlines()[-1]}")
    terminals = _terminals(run)
    try:
        await _until(terminals, ScreenState.IDLE)
        assert await terminals.write("e", notice) is WriteOutcome.OK
        assert await _turns(run, 1) == [typed]
    finally:
        await terminals.aclose()
