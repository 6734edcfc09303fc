# The delivery desk to the letter of team.v1 (issue 16, items 2, 5 and 15): what the last look before a paste
# decides, and when an idle-looking prompt is not yet a licence to write. Three kinds of parts: the daemon's
# desk runner over scripted terminals (the desk's view, deterministic), TmuxTerminals over a scripted tmux
# with a jumping clock (screen sequences no fake TUI produces, like a turn that starts late), and real tmux
# with the fake Claude-like TUI (a person clearing a draft, a fresh attach through a real daemon).
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from harness.io.agents import AgentRegistry
from harness.io.desk_runner import RunnerTiming
from harness.io.profiles import CLAUDE, CLAUDE_PROMPT, PaneInfo, classify
from harness.io.terminal_port import Screen, ScreenState, WriteOutcome
from harness.io.tmux import AgentTerminal, ProcessRunner, TmuxTerminals, WriteTiming, capture, new_session
from tests.test_daemon import Api, running, team_with_keys
from tests.test_desk_runner import DEADLINE, FakeTerminals, desk_daemon, intro, is_, local_team, until
from tests.test_tmux import FAKE_TUI, Pane, server, tui  # noqa: F401  (fixtures)

S = ScreenState
RULE = "─" * 60
DRAFT = "note to self: re-read the release checklist"


# --- item 2: a refused last look waits ---------------------------------------------------------------------


async def test_a_write_refused_at_its_last_look_waits_queued_with_what_it_saw(tmp_path: Path) -> None:
    """team.v1: "Wait while a member is working, presenting a permission/question dialog, has a draft, or is
    unavailable. Recheck at the actual write boundary." The terminal's own last look before the paste shows a
    person's draft: no byte is sent, and the notice goes on waiting (`queued`, reason `draft`) instead of
    ending `rejected`; once the draft is gone it is written, exactly once."""
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.DRAFT})
    async with desk_daemon(tmp_path, fake) as daemon:
        await local_team(daemon)
        await until(lambda: is_(intro(daemon, "bob"), "queued", "draft"))
        reports: list[tuple[str, str | None]] = []
        fake.boundary["agent-bob"] = S.DRAFT  # idle to every look but the write's own, which sees a draft
        fake.screens["agent-bob"] = S.IDLE
        with trio.fail_after(DEADLINE):
            while not fake.written_to("agent-bob") and ("rejected", "failed") not in reports:
                view = intro(daemon, "bob")
                if view is not None and (not reports or reports[-1] != (view.state, view.reason)):
                    reports.append((view.state, view.reason))
                await trio.sleep(0.002)
        assert ("rejected", "failed") not in reports, reports
        assert "agent-bob" not in fake.boundary, "the write never looked at the pane itself"
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        assert len(fake.written_to("agent-bob")) == 1
        assert daemon.desk is not None
        notice = next(n for n in daemon.desk.desk.notices.values() if n.agent_id == "agent-bob")
        assert notice.state.value == "delivered" and daemon.desk.writes == 1


def claude_screen(prompt: str = "", transcript: tuple[str, ...] = (), busy: bool = False) -> str:
    """A Claude Code screen as `capture-pane -p -e -J` gives it (the real `claude` profile reads it)."""
    lines = [" ▐▛███▜▌   Claude Code", "", *transcript, ""]
    if busy:
        lines += ["✻ Working… (esc to interrupt)", ""]
    lines += [RULE, f"{CLAUDE_PROMPT} {prompt}", RULE, "  ? for shortcuts"]
    return "\n".join(lines)


class ScriptedTmux:
    """A tmux whose one pane shows `screen` (a live `claude` process in front); every other command (a paste,
    a key) is recorded and changes nothing."""

    def __init__(self) -> None:
        self.screen = claude_screen()
        self.sent: list[tuple[str, ...]] = []

    async def run(self, *args: str) -> list[str]:
        if args[0] == "capture-pane":
            return self.screen.split("\n")
        if args[0] == "display-message":
            return ["%1 0 4242 20 100 /dev/pts/99 claude"]
        self.sent.append(args)
        return []

    async def aclose(self) -> None:
        return None


async def no_shell_in_a_scripted_pane(pane: PaneInfo) -> None:
    """The scripted pane's `claude` is no process: there is nothing below it to look at."""
    return None


@pytest.fixture
def scripted(autojump_clock: trio.testing.MockClock) -> tuple[ScriptedTmux, TmuxTerminals]:
    tmux = ScriptedTmux()
    terminals = TmuxTerminals(
        lambda: [AgentTerminal("a", "claude", "scripted", "%1")],
        timing=WriteTiming(settle=0.0),
        now_ms=lambda: int(trio.current_time() * 1000),
        runner=lambda socket: tmux,
        plain_shell=no_shell_in_a_scripted_pane,
    )
    return tmux, terminals


async def test_the_licence_is_asked_on_the_last_look_and_nothing_is_sent_without_it(
    scripted: tuple[ScriptedTmux, TmuxTerminals],
) -> None:
    """team.v1: "The final write guard rechecks the receipt and captured terminal state." The look handed to
    the desk's licence is the write's own, taken right before the paste; a draft on it, or a licence that
    says no, sends nothing at all."""
    tmux, terminals = scripted
    asked: list[Screen] = []

    async def refuse(screen: Screen) -> bool:
        asked.append(screen)
        return False

    assert (await terminals.observe("a")).state is S.IDLE
    tmux.screen = claude_screen(DRAFT)
    assert await terminals.write("a", "a notice", refuse) is WriteOutcome.FAILED
    assert [screen.state for screen in asked] == [S.DRAFT] and DRAFT in asked[0].text
    tmux.screen = claude_screen()
    assert await terminals.write("a", "a notice", refuse) is WriteOutcome.FAILED
    assert [screen.state for screen in asked] == [S.DRAFT, S.SETTLING]  # the draft just left
    await trio.sleep(CLAUDE.human_pause)
    assert await terminals.write("a", "a notice", refuse) is WriteOutcome.FAILED
    assert asked[-1].state is S.IDLE and tmux.sent == []


# --- item 5: settling is not busy ---------------------------------------------------------------------------


async def test_a_fresh_attach_reads_settling_not_busy_through_a_real_daemon(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """team.v1: "Queued can mean busy, offline, draft, permission dialog, or temporary input queue pressure."
    An idle pane that has not held still yet after an attach is none of those: the owner sees its
    introduction wait as `settling`, never `busy`, and then go in."""
    os.mkfifo(tmp_path / "control")
    log = tmp_path / "log.jsonl"
    command = [sys.executable, str(FAKE_TUI), "--control", str(tmp_path / "control"), "--log", str(log)]
    pane = await new_session(server, "bob", command, width=100, height=30, config="/dev/null")
    # Attached once its idle prompt is drawn (before, the profile reads `starting`).
    with trio.fail_after(DEADLINE):
        while classify("claude", await capture(ProcessRunner(server), pane)).state is not S.IDLE:
            await trio.sleep(0.02)
    made: list[TmuxTerminals] = []

    def terminals(registry: AgentRegistry) -> TmuxTerminals:
        made.append(TmuxTerminals.from_registry(registry))
        return made[-1]

    home = tmp_path / "home"
    try:
        async with running(home, terminals=terminals, runner_timing=RunnerTiming(poll_ms=50)) as daemon:
            owner = await Api.open(daemon)
            tmux = {"socket": server, "target": pane}
            await owner("agent_register", agentId="agent-bob", name="bob", engine="claude", tmux=tmux)
            await team_with_keys(owner, people=("bob",), machine=daemon.machine_id)
            reasons: list[str | None] = []
            with trio.fail_after(30):
                while (view := intro(daemon, "bob")) is None or view.state not in ("delivered", "accepted"):
                    if view is not None and view.state == "queued" and view.reason not in reasons:
                        reasons.append(view.reason)
                    await trio.sleep(0.005)
            assert "settling" in reasons and "busy" not in reasons, reasons
    finally:
        for made_terminals in made:
            await made_terminals.aclose()


async def test_a_cleared_draft_waits_for_a_human_pause_before_any_write(tui: Pane) -> None:  # noqa: F811
    """team.v1: "Never send interrupt/cancel keys or overwrite a human draft." A person who erases their
    draft may be retyping: the empty prompt reads `settling`, and no write goes in, until it stayed empty
    and unchanged for the profile's human pause."""
    await tui.say("type half a thought")
    await tui.until(S.DRAFT)
    erase = ["BSpace"] * len("half a thought")  # one burst, as a held key or a select-and-delete
    await tui.terminals._runner(tui.socket).run("send-keys", "-t", tui.target, *erase)
    with trio.fail_after(DEADLINE):
        while (screen := await tui.terminals.observe("a")).state is S.DRAFT:
            await trio.sleep(0.02)
    cleared = trio.current_time()
    assert screen.state is S.SETTLING and "retyping" in screen.evidence[-1]
    assert await tui.terminals.write("a", "a notice") is WriteOutcome.FAILED
    assert [e for e in tui.inputs() if "paste" in e] == []
    while (await tui.terminals.observe("a")).state is S.SETTLING:
        await trio.sleep(0.05)
    assert trio.current_time() - cleared >= CLAUDE.human_pause * 0.9
    assert await tui.terminals.write("a", "a notice") is WriteOutcome.OK


async def test_retyping_during_the_pause_is_a_draft_again_and_never_written_over(
    scripted: tuple[ScriptedTmux, TmuxTerminals],
) -> None:
    """A person who clears the prompt and starts again within the pause keeps their prompt: the new draft is
    a draft, and the pause starts over once it is gone."""
    tmux, terminals = scripted
    tmux.screen = claude_screen(DRAFT)
    assert (await terminals.observe("a")).state is S.DRAFT
    tmux.screen = claude_screen()
    assert (await terminals.observe("a")).state is S.SETTLING
    await trio.sleep(CLAUDE.human_pause / 2)
    tmux.screen = claude_screen("no wait")
    assert (await terminals.observe("a")).state is S.DRAFT
    assert await terminals.write("a", "a notice") is WriteOutcome.FAILED
    tmux.screen = claude_screen()
    await trio.sleep(CLAUDE.human_pause / 2)
    assert (await terminals.observe("a")).state is S.SETTLING
    await trio.sleep(CLAUDE.human_pause)
    assert (await terminals.observe("a")).state is S.IDLE and tmux.sent == []


# --- item 15: a person's Enter starts a turn ---------------------------------------------------------------


async def test_a_submitted_draft_waits_for_its_turn_to_start_and_end(
    scripted: tuple[ScriptedTmux, TmuxTerminals],
) -> None:
    """team.v1: "Wait while a member is working." A person submits their draft; the engine empties the
    prompt and shows the message before its turn visibly starts (Gemini CLI does, for hundreds of ms on a
    loaded machine). That empty prompt is no licence: it reads `settling` past the human pause, then busy
    while the person's turn runs, and idle only once that turn ended."""
    tmux, terminals = scripted
    tmux.screen = claude_screen(DRAFT)
    assert (await terminals.observe("a")).state is S.DRAFT
    submitted = (f"> {DRAFT}",)
    tmux.screen = claude_screen(transcript=submitted)
    assert (screen := await terminals.observe("a")).state is S.SETTLING
    assert "waiting for its turn" in screen.evidence[-1]
    await trio.sleep(CLAUDE.human_pause + 0.2)
    assert (await terminals.observe("a")).state is S.SETTLING
    tmux.screen = claude_screen(transcript=submitted, busy=True)
    assert (await terminals.observe("a")).state is S.BUSY
    tmux.screen = claude_screen(transcript=(*submitted, "● done"))
    assert (await terminals.observe("a")).state is S.IDLE  # the turn was seen and ended


async def test_a_submitted_draft_with_no_turn_waits_the_profiles_quiet_period(
    scripted: tuple[ScriptedTmux, TmuxTerminals],
) -> None:
    """The other way out: no turn shows, and the prompt has been idle and unchanged for the profile's quiet
    period; a change on the screen meanwhile (the engine drawing the message late) starts it over."""
    tmux, terminals = scripted
    tmux.screen = claude_screen(DRAFT)
    assert (await terminals.observe("a")).state is S.DRAFT
    tmux.screen = claude_screen()
    assert (await terminals.observe("a")).state is S.SETTLING
    await trio.sleep(CLAUDE.human_pause - 0.5)
    tmux.screen = claude_screen(transcript=(f"> {DRAFT}",))  # drawn late: a submit after all
    assert (await terminals.observe("a")).state is S.SETTLING
    await trio.sleep(CLAUDE.turn_quiet - 0.1)
    assert (await terminals.observe("a")).state is S.SETTLING
    await trio.sleep(0.2)
    assert (await terminals.observe("a")).state is S.IDLE
