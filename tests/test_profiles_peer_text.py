# A peer's ordinary words on screen must not read as a state of the engine. The desk pastes a notice only on
# an `idle` look; a profile that reads a peer's text as busy, a dialog, a quit engine or "no composer" makes
# the desk wait for that agent for good (denial of service by one message). Three ways it did, found by an
# adversarial review on the real engines (tests/fixtures/peer_screens: real screens, see its manifest):
#   1. Codex shows the thread's title (the session's first message: often a notice) in its footer, under the
#      composer, for the rest of the session: "Approve …" read dialog, "queued messages" busy, "Total cost:"
#      offline.
#   2. Busy words searched as plain substrings over the transcript above the composer: an answer quoting "it
#      shows queued messages" (Claude, Codex, Gemini) or a reply quoting "esc to interrupt)" (Grok) read busy.
#   3. A run of rule characters in a notice wraps onto a row of its own inside the composer (Claude `─`,
#      Gemini `▄`): taken for the composer's top edge, no prompt under it, `starting` for good, the notice
#      left unsubmitted in the box.
# And the other side of each fix, on the same real screens: the engine's own status rows, dialogs and exit
# summaries still read as before, so nothing that was busy, a dialog or a draft reads idle. Checking that
# on the real engines turned up one more (older) false idle, fixed with them: Grok's spinner line, wrapped by
# a narrow pane into a block of rows, read idle while a turn ran.
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.records import NoticeKind
from harness.core.system import NoticeContent, render_content
from harness.io.profiles import classify, draft_is, parse_capture, profile_for
from harness.io.terminal_port import ScreenState

PEER = Path(__file__).parent / "fixtures" / "peer_screens"
MANIFEST: dict[str, Any] = json.loads((PEER / "manifest.json").read_text(encoding="utf-8"))
SCREENS: list[dict[str, Any]] = MANIFEST["screens"]
CLAUDE_SIGN, CODEX_SIGN = "\u276f", "\u203a"
IDLE, BUSY, DRAFT, DIALOG, OFFLINE, STARTING = (
    ScreenState.IDLE,
    ScreenState.BUSY,
    ScreenState.DRAFT,
    ScreenState.DIALOG,
    ScreenState.OFFLINE,
    ScreenState.STARTING,
)


def _screen(name: str) -> str:
    return (PEER / name).read_text(encoding="utf-8")


def _with_rows(engine: str, raw: str, rows: list[str], *, below: bool = False) -> str:
    """The capture with `rows` put right above the composer (or at the end of the screen)."""
    lines = raw.replace("\r\n", "\n").split("\n")
    if below:
        return "\n".join([*lines, *rows])
    composer = profile_for(engine).composer(parse_capture(raw), None)
    assert composer is not None
    return "\n".join([*lines[: composer.top], *rows, *lines[composer.top :]])


def _question(text: str, speaker: str = "alice") -> str:
    content = NoticeContent(
        kind=NoticeKind.QUESTION, team_id="T1", team_name="Build", subject_id="q1", speaker=speaker, text=text
    )
    return render_content(content)


# --- the real screens ---------------------------------------------------------------------------------------


def test_the_manifest_lists_every_screen_in_both_forms() -> None:
    listed = {entry[form] for entry in SCREENS for form in ("ansi", "plain")}
    assert listed == {str(p.relative_to(PEER)) for p in PEER.rglob("*.txt")}
    assert {entry["engine"] for entry in SCREENS} == {"claude", "codex", "gemini", "grok"}


CASES = [(entry, form) for entry in SCREENS for form in ("ansi", "plain")]


@pytest.mark.parametrize(("entry", "form"), CASES, ids=[f"{e[f]}" for e, f in CASES])
def test_peer_text_on_a_real_screen_reads_as_the_screen_is(entry: dict[str, Any], form: str) -> None:
    seen = classify(entry["engine"], _screen(entry[form]))
    expected = entry["state"] if form == "ansi" else entry["plain_state"]
    assert seen.state.value == expected, (entry["note"], seen.evidence)
    assert form == "plain" or seen.state.value != entry["before"]
    assert seen.evidence


# --- 1. Codex's footer title --------------------------------------------------------------------------------

TITLES = ["title-approve", "title-queued", "title-offline", "title-intro", "title-narrow40", "title-narrow80"]


@pytest.mark.parametrize("name", TITLES)
def test_codex_title_in_the_footer_is_not_read(name: str) -> None:
    raw = _screen(f"codex-0.171.0/{name}.ansi.txt")
    seen = classify("codex", raw)
    assert (seen.state, seen.busy, seen.dialog) == (IDLE, False, False)
    assert not any("fake-model default" in line or "the v2 release" in line for line in seen.evidence)


@pytest.mark.parametrize("name", TITLES)
def test_codex_working_line_over_a_title_footer_is_still_busy(name: str) -> None:
    raw = _screen(f"codex-0.171.0/{name}.ansi.txt")
    for glyph in ("•", "◦"):
        working = _with_rows("codex", raw, [f"{glyph} Working (3s • esc to interrupt)", ""])
        assert classify("codex", working).state is BUSY
    queued = [
        "• Working (1m 05s • esc to interrupt)",
        "",
        "• Queued follow-up inputs",
        "  ↳ queued-note typed while busy",
        "    shift+← edit last queued message",
        "",
    ]
    assert classify("codex", _with_rows("codex", raw, queued)).state is BUSY


def test_codex_rows_under_the_composer_other_than_its_footer_are_read_as_before() -> None:
    """Only the footer's own layout (a blank row, then at most 4 indented rows, last on the screen) is
    skipped: rows after a gap, a fifth row, or an exit summary under it, and everything there is read."""
    queued = _screen("codex-0.171.0/title-queued.ansi.txt")
    for extra in (["", "  ? for shortcuts"], ["  ? for shortcuts"] * 3):
        assert classify("codex", _with_rows("codex", queued, extra, below=True)).state is BUSY, extra
    approve = _screen("codex-0.171.0/title-approve.ansi.txt")
    offline = _screen("codex-0.171.0/title-offline.ansi.txt")
    summary = ["Token usage: total=10 input=5 output=5"]
    assert classify("codex", _with_rows("codex", offline, summary, below=True)).state is OFFLINE
    quit_ = [*summary, "To continue this session, run codex resume 019a", "root@box:~/project# "]
    assert classify("codex", _with_rows("codex", approve, quit_, below=True)).state is OFFLINE


def test_codex_dialog_wording_next_to_the_composer_still_counts() -> None:
    raw = _screen("codex-0.171.0/title-queued.ansi.txt")
    for rows in (
        ["  Would you like to run the following command?", ""],
        ["  Approve this request?", ""],
        [f"{CODEX_SIGN} 1. Approve for me", ""],
    ):
        assert classify("codex", _with_rows("codex", raw, rows)).state is DIALOG, rows


# --- 2. busy words in the transcript ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "name"),
    [
        ("claude", "claude-2.1.197/window-queued.ansi.txt"),
        ("codex", "codex-0.171.0/window-queued.ansi.txt"),
        ("gemini", "gemini-0.61.0/window-queued.ansi.txt"),
        ("grok", "grok-0.0.34/echo.ansi.txt"),
    ],
)
def test_a_peer_quoting_busy_words_in_the_transcript_is_not_busy(engine: str, name: str) -> None:
    seen = classify(engine, _screen(name))
    assert (seen.state, seen.busy) == (IDLE, False), seen.evidence


def test_claude_transcript_rows_are_indented_so_a_quoted_spinner_is_not_one() -> None:
    """The review's other two answer texts: a quoted spinner line wrapped onto a row of its own (indented
    in the transcript, like every row of a message but its first) and a quoted "esc to interrupt)"."""
    raw = _screen("claude-2.1.197/window-queued.ansi.txt")
    quoted = ["  > ✻ Compiling…", "  ✻ Compiling…", "  In the status line, press esc to interrupt) the run."]
    for row in quoted:
        assert classify("claude", _with_rows("claude", raw, [row, ""])).state is IDLE, row


WINDOW = {
    "claude": "claude-2.1.197/window-queued.ansi.txt",
    "codex": "codex-0.171.0/window-queued.ansi.txt",
    "gemini": "gemini-0.61.0/window-queued.ansi.txt",
    "grok": "grok-0.0.34/echo.ansi.txt",
}
GEMINI_SPINNER = " ⠹ Thinking... (esc to cancel, 1s)" + " " * 40 + "? for shortcuts"


@pytest.mark.parametrize(
    ("engine", "rows"),
    [
        ("claude", ["✢ Hyperspacing…", ""]),
        ("claude", ["✶ Hyperspacing… (3s · esc to interrupt)", ""]),
        ("claude", ["· Hyperspacing…", f"  {CLAUDE_SIGN} queued-note", ""]),
        ("codex", ["• Working (1s • esc to interrupt)", ""]),
        ("codex", ["◦ Planning the fix (9s • esc to interrupt)", ""]),
        ("gemini", [GEMINI_SPINNER, "─" * 80, " Shift+Tab to accept edits"]),
        ("gemini", ["  Queued (press ↑ to edit):", "    queued-note typed while busy", GEMINI_SPINNER]),
        ("grok", ["  / Synchronizing... (2s · ↑ 798 tokens · esc to interrupt)", ""]),
        # a narrow pane: Ink wraps the spinner's two parts each in a column of its own
        ("grok", ["  | Thinking... (3s · ↑ 1.2k tokens ·", "                 esc to interrupt)", ""]),
        ("grok", ["  -           (12s · ↑ 798", "  Computing... tokens · esc", "  to interrupt)", ""]),
    ],
)
def test_the_engines_own_status_rows_on_the_same_screens_are_busy(engine: str, rows: list[str]) -> None:
    seen = classify(engine, _with_rows(engine, _screen(WINDOW[engine]), rows))
    assert (seen.state, seen.busy) == (BUSY, True), seen.evidence


@pytest.mark.parametrize(
    ("engine", "footer"),
    [
        ("claude", "  esc to interrupt · ← for agents"),
        ("claude", "  Press up to edit queued messages"),
        ("grok", "  esc to interrupt)"),
    ],
)
def test_busy_words_under_the_composer_are_read_as_before(engine: str, footer: str) -> None:
    assert classify(engine, _with_rows(engine, _screen(WINDOW[engine]), [footer], below=True)).state is BUSY


@pytest.mark.parametrize("width", [30, 40, 50])
def test_grok_spinner_wrapped_by_a_narrow_pane_is_busy_and_a_quote_of_its_end_is_not(width: int) -> None:
    raw = _screen(f"grok-0.0.34/busy-narrow{width}.ansi.txt")
    seen = classify("grok", raw)
    assert (seen.state, seen.busy) == (BUSY, True), seen.evidence
    echo = _screen("grok-0.0.34/echo.ansi.txt")
    replies = (  # a reply's rows ending "esc to interrupt)", none of them the glyph's row
        ["  ⏺ Bob says: if it hangs,", "    press esc to interrupt)", ""],
        ["    - a", "    interrupt)", ""],
    )
    for rows in replies:
        assert classify("grok", _with_rows("grok", echo, rows)).state is IDLE, rows


# --- 3. rule characters inside the composer -----------------------------------------------------------------


STUCK = [("claude", "claude-2.1.197", "─"), ("gemini", "gemini-0.61.0", "▄")]


@pytest.mark.parametrize(("engine", "name", "rule"), STUCK)
def test_a_rule_wrapped_into_the_composer_leaves_our_draft(engine: str, name: str, rule: str) -> None:
    notice = _question("x " * 70 + rule * 80)
    for form in ("stuck.ansi.txt", "stuck.txt"):
        seen = classify(engine, _screen(f"{name}/{form}"))
        assert (seen.state, seen.draft) == (DRAFT, True), seen.evidence
        assert draft_is(seen, notice)  # the desk knows its own notice in the composer


@pytest.mark.parametrize(("engine", "name"), [("claude", "claude-2.1.197"), ("gemini", "gemini-0.61.0")])
def test_a_rule_in_a_draft_under_a_running_turn_is_busy_and_a_draft(engine: str, name: str) -> None:
    spinner = {"claude": "✢ Hyperspacing…", "gemini": " ⠹ Thinking... (esc to cancel, 1s)"}[engine]
    raw = _screen(f"{name}/stuck.ansi.txt")
    seen = classify(engine, _with_rows(engine, raw, [spinner, ""]))
    assert (seen.state, seen.busy, seen.draft) == (BUSY, True, True)


RULE = "\x1b[38;5;244m" + "─" * 80 + "\x1b[39m"
TOP, BOTTOM = "\x1b[38;2;95;95;95m" + "▄" * 80, "▀" * 80 + "\x1b[39m"


@pytest.mark.parametrize("row", ["─" * 80, "▀" * 80, "▄" * 80, " " * 20 + "─" * 60])
def test_claude_draft_rows_of_rule_characters_never_end_or_open_the_box(row: str) -> None:
    box = [RULE, f"{CLAUDE_SIGN}\xa0first", f"  {row}", "  last", RULE]
    screen = "\n".join([" ▐▛███▜▌   Claude Code v2.1.197", "", *box, ""])
    seen = classify("claude", screen)
    assert seen.state is DRAFT and draft_is(seen, f"first\n{row}\nlast")


@pytest.mark.parametrize("row", ["▀" * 80, "▄" * 80, "─" * 80])
def test_gemini_draft_rows_of_half_blocks_never_end_or_open_the_box(row: str) -> None:
    body = "\x1b[39m\x1b[48;2;95;95;95m \x1b[38;2;215;175;255m> \x1b[38;2;255;255;255mfirst"
    footer = [" workspace (/directory)    sandbox    /model", " ~/project   no sandbox   Auto"]
    screen = "\n".join(["", " Gemini CLI v0.61.0", "", TOP, body, f"   {row}", "   last", BOTTOM, *footer])
    seen = classify("gemini", screen)
    assert seen.state is DRAFT and draft_is(seen, f"first\n{row}\nlast")
