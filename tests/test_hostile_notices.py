# Issue 14, findings 2 and 3, against a real tmux pane: the fake TUI of tests/fake_tui.py turns bracketed
# paste on, takes CR as submit and records every paste, key and submitted turn, as a raw-input recorder. A
# notice whose question carries a hostile payload must arrive as one paste, inside the desk's framing, and
# submit exactly one user turn; nothing in it may act as ESC[201~, Ctrl-C, Ctrl-U or Enter.
from __future__ import annotations

import pytest
import trio

from harness.core import effects as fx
from harness.core.records import NoticeKind
from harness.core.system import render_notice
from harness.io.terminal_port import ScreenState, WriteOutcome
from tests.team_helpers import TEAM, Driver
from tests.test_terminal_text import PAYLOADS
from tests.test_tmux import Pane, server, tui

__all__ = ["server", "tui"]  # the fixtures of tests/test_tmux.py: a private tmux server, a fake TUI in it
DEADLINE = 60.0  # generous: tmux and the fake TUI share a loaded two-core machine


def _question_notice(driver: Driver, question_id: str) -> str:
    notice = fx.SubmitNotice(
        TEAM,
        fx.notice_id(TEAM, question_id, NoticeKind.QUESTION),
        NoticeKind.QUESTION,
        question_id,
        "mem1",
        "m-one",
        "agent1",
        10**9,
    )
    return render_notice(driver.ledger, notice)


def _submitted(pane: Pane) -> list[object]:
    return [event["submitted"] for event in pane.events() if "submitted" in event]


async def _until_submitted(pane: Pane, count: int) -> None:
    with trio.fail_after(DEADLINE):
        while len(_submitted(pane)) < count:
            await trio.sleep(0.02)


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_finding_2_a_hostile_question_is_one_framed_turn(tui: Pane, payload: str) -> None:
    """Finding 2: ESC[201~ inside a question ended tmux's bracketed paste, and the text after it, with its CR,
    was submitted as a user turn outside the `[team …]` framing; ^C arrived as a real Ctrl-C and ^U erased the
    framing. Now the recorder sees one paste (the whole notice), Enter as its own key, one submitted turn that
    is exactly the notice, and no Escape, Ctrl-C or Ctrl-U from the text."""
    driver = Driver().create()
    driver.ask("q1", 2, 1, payload, context=payload)
    text = _question_notice(driver, "q1")
    assert await tui.terminals.write("a", text) is WriteOutcome.OK
    await _until_submitted(tui, 1)
    pastes = [event["paste"] for event in tui.inputs() if "paste" in event]
    keys = [event["key"] for event in tui.inputs() if "key" in event]
    assert pastes == [text.replace("\n", "\r")]  # paste-buffer sends each line break as CR, inside the paste
    assert keys and set(keys) == {"Enter"}
    assert _submitted(tui) == [text]
    assert text.startswith("[team Build Harness] Question q1 from agent-2:\n")


async def test_finding_3_a_nul_laden_notice_does_not_wedge_the_desk(tui: Pane) -> None:
    """Finding 3: a NUL (or another control byte) made the composer show the text differently, the submit
    check failed, the notice stayed as a "draft" and every later notice waited behind it. Now it is shown as
    ^@, the check succeeds, and a plain notice after it is delivered."""
    driver = Driver().create()
    driver.ask("q1", 2, 1, "first\x00second\x01third\x7f")
    driver.ask("q2", 2, 1, "a plain question")
    first, second = _question_notice(driver, "q1"), _question_notice(driver, "q2")
    assert "first^@second^Athird^?" in first
    assert await tui.terminals.write("a", first) is WriteOutcome.OK
    await _until_submitted(tui, 1)
    await tui.until(ScreenState.IDLE)
    assert await tui.terminals.write("a", second) is WriteOutcome.OK
    await _until_submitted(tui, 2)
    assert _submitted(tui) == [first, second]


@pytest.mark.parametrize("raw", ["hi\x1b[201~touch FILE\r", "stop\x03", "nul\x00", "c1\x9b2J", "rlo\u202e"])
async def test_the_tmux_adapter_refuses_an_unsafe_buffer_before_any_byte(tui: Pane, raw: str) -> None:
    """Defence in depth: a buffer that is not terminal-safe (a notice a paired machine rendered itself, or a
    bug) is refused as FAILED, and the pane receives nothing at all."""
    assert await tui.terminals.write("a", raw) is WriteOutcome.FAILED
    await trio.sleep(0.3)  # give a wrongly sent paste time to show in the recorder's log
    assert tui.inputs() == []
