# Engine profiles against real captures (versioned fixtures with their expected observation in a manifest)
# and against the traps the engines are known to set: placeholders that differ from drafts only by colour,
# spinners that stay over a draft, alternating spinner glyphs, configurable footers, queued messages, folded
# pastes, dialogs and quit engines. The one unforgivable answer is a false `idle`.
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.terminal_text import LINE_JOIN, ONE_LINE_EXCERPT, is_terminal_safe, one_line, terminal_safe
from harness.io.profiles import (
    ENGINES,
    PROFILES,
    NoticeInput,
    PaneInfo,
    Profile,
    classify,
    draft_is,
    is_plain_shell,
    notice_as_typed,
    parse_capture,
    profile_for,
    squash,
    turn_shows,
)
from harness.io.terminal_port import ScreenState

SCREENS = Path(__file__).parent / "fixtures" / "screens"
MANIFEST = json.loads((SCREENS / "manifest.json").read_text())
# Engines whose real captures are read straight from tests/engines/captures (the manifest there names the
# state of each colour capture; its plain twin reads the same, except that without colours an empty prompt
# cannot be told from a placeholder-like draft, so it is `starting`).
ENGINE_CAPTURES = Path(__file__).parent / "engines" / "captures"
GROK = json.loads(next(ENGINE_CAPTURES.glob("grok-*/manifest.json")).read_text())
GROK_DIR = ENGINE_CAPTURES / f"grok-{GROK['version']}"
IDLE, BUSY, DRAFT, DIALOG, OFFLINE, STARTING = (
    ScreenState.IDLE,
    ScreenState.BUSY,
    ScreenState.DRAFT,
    ScreenState.DIALOG,
    ScreenState.OFFLINE,
    ScreenState.STARTING,
)
NBSP = "\xa0"
CLAUDE_SIGN, CODEX_SIGN, GROK_SIGN = "\u276f", "\u203a", "\u276f"


def _screen(name: str) -> str:
    return (SCREENS / name).read_text(encoding="utf-8")


def _pane(data: dict[str, Any] | None) -> PaneInfo | None:
    if data is None:
        return None
    return PaneInfo(dead=data["dead"], command=data["command"], cursor_y=data["cursorY"])


# --- conformance: every capture we keep ---------------------------------------------------------------------


def test_every_fixture_is_in_the_manifest() -> None:
    files = {str(p.relative_to(SCREENS)) for p in SCREENS.rglob("*.txt")}
    assert files == set(MANIFEST)
    assert {entry["engine"] for entry in MANIFEST.values()} <= set(ENGINES)
    covered = {profile_for(entry["engine"]).name for entry in MANIFEST.values()} | {GROK["engine"]}
    assert covered == {profile.name for profile in PROFILES.values()}  # every profile has real captures


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_classifies_as_expected(name: str) -> None:
    expected = MANIFEST[name]
    seen = classify(expected["engine"], _screen(name), _pane(expected.get("pane")))
    assert (seen.state.value, seen.busy, seen.draft, seen.dialog) == (
        expected["state"],
        expected["busy"],
        expected["draft"],
        expected["dialog"],
    ), seen.evidence
    assert seen.evidence, "every observation says why"
    assert seen.safe_to_write == (expected["state"] == "idle")


GROK_CASES = [(entry, form) for entry in GROK["captures"] for form in ("ansi", "plain")]


@pytest.mark.parametrize(("entry", "form"), GROK_CASES, ids=[f"{e['name']}-{f}" for e, f in GROK_CASES])
def test_grok_capture_classifies_as_captured(entry: dict[str, Any], form: str) -> None:
    pane = PaneInfo(dead=True) if entry["state"] == "offline" else None
    seen = classify("grok", (GROK_DIR / entry[form]).read_text(encoding="utf-8"), pane)
    expected = "starting" if form == "plain" and entry["state"] == "idle" else entry["state"]
    assert seen.state.value == expected, seen.evidence
    assert seen.evidence, "every observation says why"


# --- Claude Code --------------------------------------------------------------------------------------------

RULE = "\x1b[38;5;244m" + "─" * 80 + "\x1b[39m"


def claude(
    prompt: str = f"{CLAUDE_SIGN}{NBSP}", above: tuple[str, ...] = (), footer: str = "  ? for shortcuts"
) -> str:
    return "\n".join([" ▐▛███▜▌   Claude Code v2.1.197", "", *above, "", RULE, prompt, RULE, footer])


def test_claude_empty_prompt_is_idle_and_typed_text_is_a_draft() -> None:
    assert classify("claude", claude()).state is IDLE
    assert classify("claude", claude(f"{CLAUDE_SIGN} ")).state is IDLE  # a plain space works as well
    assert classify("claude", claude(f"{CLAUDE_SIGN}{NBSP}x")).state is DRAFT


def test_claude_placeholder_suggestion_only_when_dim() -> None:
    dim = f'{CLAUDE_SIGN}{NBSP}\x1b[2mTry "how does foo.py work?"\x1b[0m'
    typed = f'{CLAUDE_SIGN}{NBSP}Try "how does foo.py work?"'
    assert classify("claude", claude(dim)).state is IDLE
    assert classify("claude", claude(typed)).state is DRAFT


@pytest.mark.parametrize("glyph", list("·✢✳✶✻✽*"))
def test_claude_spinner_over_a_draft_is_busy_and_draft(glyph: str) -> None:
    screen = claude(f"{CLAUDE_SIGN}{NBSP}typed while it works", above=(f"{glyph} Gitifying…",), footer="")
    seen = classify("claude", screen)
    assert (seen.state, seen.busy, seen.draft) == (BUSY, True, True)


def test_claude_finished_line_is_not_a_spinner() -> None:
    assert classify("claude", claude(above=("✻ Cogitated for 6s",))).state is IDLE


def test_claude_queued_messages_mean_busy() -> None:
    screen = claude(above=("✻ Working…", "  Press up to edit queued messages"), footer="")
    assert classify("claude", screen).state is BUSY
    assert classify("claude", claude(footer="  Press up to edit queued messages")).state is BUSY


def test_claude_folded_paste_is_a_draft() -> None:
    seen = classify("claude", claude(f"{CLAUDE_SIGN}{NBSP}[Pasted text #1 +5 lines]"))
    assert seen.state is DRAFT
    assert draft_is(seen, "any\ntext\nof\nsix\nlines\n!")


@pytest.mark.parametrize(
    "dialog",
    [
        ("Do you trust the files in this folder?", f" {CLAUDE_SIGN} 1. Yes, proceed", "   2. No, exit"),
        (
            "Detected a custom API key in your environment",
            "Do you want to use this API key?",
            f" {CLAUDE_SIGN} 1. Yes",
        ),
        (
            "WARNING: Claude Code running in Bypass Permissions mode",
            "   1. No, exit",
            f" {CLAUDE_SIGN} 2. Yes, I accept",
        ),
        ("Bash command", "   rm -rf build", "Do you want to proceed?", f" {CLAUDE_SIGN} 1. Yes", "   2. No"),
    ],
)
def test_claude_dialogs(dialog: tuple[str, ...]) -> None:
    screen = "\n".join([" ▐▛███▜▌   Claude Code v2.1.197", "", RULE, *dialog, "", " Esc to cancel"])
    assert classify("claude", screen).state is DIALOG


def test_claude_dialog_wording_in_old_transcript_does_not_block_forever() -> None:
    screen = claude(above=("● I asked: Do you want to proceed? (answered)", "", "● done", "", "", ""))
    assert classify("claude", screen).state is IDLE


def test_claude_quit_is_offline() -> None:
    screen = "\n".join(
        ["● done", "", "Resume this session with:", "claude --resume 1b2c3d", "root@box:~/project# "]
    )
    assert classify("claude", screen).state is OFFLINE
    assert classify("claude", "root@box:~# ").state is OFFLINE  # a shell prompt where the engine was
    assert classify("claude", claude(), PaneInfo(dead=True)).state is OFFLINE


def test_claude_unknown_or_empty_screen_is_starting() -> None:
    assert classify("claude", "").state is STARTING
    assert classify("claude", " ▐▛███▜▌   Claude Code v2.1.197\n\n  Loading…").state is STARTING


# --- Codex --------------------------------------------------------------------------------------------------


def codex(prompt: str, above: tuple[str, ...] = (), status: str = "  fake-model default · ~/project") -> str:
    lines = ["", "  >_ OpenAI Codex (v0.171.0)", "", *above, "", prompt, "", status, "  ? for shortcuts"]
    return "\n".join(lines)


PLACEHOLDER = f"\x1b[1m{CODEX_SIGN}\x1b[0m \x1b[2mAsk Codex to do anything\x1b[0m"


def test_codex_dim_placeholder_is_idle_and_the_same_text_undimmed_is_a_draft() -> None:
    assert classify("codex", codex(PLACEHOLDER)).state is IDLE
    assert classify("codex", codex(f"\x1b[1m{CODEX_SIGN}\x1b[0m Ask Codex to do anything")).state is DRAFT
    plain = codex(f"{CODEX_SIGN} Ask Codex to do anything")  # no colours at all: cannot tell
    assert classify("codex", plain).state is STARTING


@pytest.mark.parametrize("glyph", ["•", "◦"])
def test_codex_working_line_is_busy_with_either_glyph(glyph: str) -> None:
    screen = codex(PLACEHOLDER, above=(f"{glyph} Working (3s • esc to interrupt)",))
    assert classify("codex", screen).state is BUSY
    with_draft = codex(
        f"{CODEX_SIGN} typed meanwhile", above=(f"{glyph} Planning the fix (9s • esc to interrupt)",)
    )
    seen = classify("codex", with_draft)
    assert (seen.state, seen.draft) == (BUSY, True)


def test_codex_configurable_footer_is_not_a_draft() -> None:
    status = "  gpt-5 high · ~/project · main · please @slow @tool @escalate · 73% context left"
    assert classify("codex", codex(PLACEHOLDER, status=status)).state is IDLE


def test_codex_folded_paste_and_multi_line_draft() -> None:
    assert classify("codex", codex(f"{CODEX_SIGN} [Pasted Content 1960 chars]")).state is DRAFT
    seen = classify("codex", codex(f"{CODEX_SIGN} first line\n  second line"))
    assert seen.state is DRAFT and draft_is(seen, "first line\nsecond line")


def test_codex_transcript_message_without_composer_is_not_idle() -> None:
    shaded = f"\x1b[48;5;238m{CODEX_SIGN} earlier question\x1b[49m"
    assert classify("codex", "\n".join(["", shaded, "", "• Running echo hi"])).state is not IDLE


def test_codex_trust_dialog_and_exit() -> None:
    trust = "\n".join(
        [
            "> You are in /root/project",
            "",
            "  Do you trust the contents of this directory?",
            f"{CODEX_SIGN} 1. Yes, continue",
            "  2. No, quit",
        ]
    )
    assert classify("codex", trust).state is DIALOG
    quit_ = "\n".join(
        ["Token usage: total=10 input=5 output=5", "To continue this session, run codex resume 019a", "$ "]
    )
    assert classify("codex", quit_).state is OFFLINE


# --- Gemini CLI ---------------------------------------------------------------------------------------------

TOP, BOTTOM = "\x1b[38;2;95;95;95m" + "▄" * 80, "▀" * 80 + "\x1b[39m"
GREY_PLACEHOLDER = "\x1b[38;2;175;175;175m  Type your message or @path/to/file\x1b[39m"


def gemini(body: str, above: tuple[str, ...] = ()) -> str:
    box = [TOP, "\x1b[39m\x1b[48;2;95;95;95m \x1b[38;2;215;175;255m> " + body + "\x1b[49m", BOTTOM]
    footer = [" workspace (/directory)    sandbox    /model", " ~/project   no sandbox   Auto"]
    return "\n".join(["", " Gemini CLI v0.61.0", "", *above, "", *box, *footer])


def test_gemini_grey_placeholder_is_idle_white_or_black_text_is_a_draft() -> None:
    assert classify("gemini", gemini(GREY_PLACEHOLDER)).state is IDLE
    white = "\x1b[38;2;255;255;255mType your message or @path/to/file"
    black = "\x1b[38;2;0;0;0mType your message or @path/to/file"  # a light theme: never a placeholder
    assert classify("gemini", gemini(white)).state is DRAFT
    assert classify("gemini", gemini(black)).state is DRAFT
    assert classify("gemini", gemini("\x1b[38;2;175;175;175mgrey but not the placeholder")).state is DRAFT


@pytest.mark.parametrize("spinner", ["⠋", "⠙", "⠹", "⠧", "⠏"])
def test_gemini_spinner_is_busy(spinner: str) -> None:
    screen = gemini(GREY_PLACEHOLDER, above=(f" {spinner} Reticulating splines... (esc to cancel, 4s)",))
    assert classify("gemini", screen).state is BUSY


def test_gemini_folded_paste_is_a_draft() -> None:
    assert classify("gemini", gemini("[Pasted Text: 6 lines]")).state is DRAFT


def test_gemini_folds_a_long_two_line_paste_by_characters_and_it_is_ours() -> None:
    """Gemini CLI 0.61 folds a paste of more than 500 characters into `[Pasted Text: N chars]` even when it
    has only two lines (a four-member team's introduction): read as our folded paste, so the desk confirms it
    instead of leaving the introduction `unconfirmed` in the prompt."""
    for marker in ("[Pasted Text: 502 chars]", "[Pasted Text: 502 chars #2]"):
        seen = classify("gemini", gemini(marker))
        assert seen.state is DRAFT and draft_is(seen, "You joined team 'live'\nUse: harness team ...")


def test_gemini_transcript_box_is_not_the_composer() -> None:
    transcript = [TOP, " > please @slow @tool", BOTTOM, "", "✦ working on it", "", "", "", "", "", ""]
    assert classify("gemini", "\n".join(transcript)).state is not IDLE


def test_gemini_trust_dialog() -> None:
    screen = "\n".join(
        ["╭──╮", "│ Do you trust the files in this folder? │", "│ ● 1. Trust folder │", "╰──╯"]
    )
    assert classify("gemini", screen).state is DIALOG


# --- Grok CLI -----------------------------------------------------------------------------------------------

GROK_BOX = "\x1b[34m╭" + "─" * 80 + "╮\x1b[39m"
GROK_END = "\x1b[34m╰" + "─" * 80 + "╯\x1b[39m"
GROK_PLACEHOLDER = "\x1b[2m\x1b[90mAsk me anything...\x1b[0m\x1b[30m\x1b[47m \x1b[39m\x1b[49m"
GROK_FOOTER = (
    "  \x1b[36m⏸ auto-edit: off\x1b[2m\x1b[90m (shift + tab)\x1b[0m  \x1b[33m≋ grok-code-fast-1\x1b[39m"
)


def grok(row: str, above: tuple[str, ...] = ()) -> str:
    box = [f"  {GROK_BOX}", row, f"  {GROK_END}", "", GROK_FOOTER]
    return "\n".join(
        ["  Type your request in natural language. Ctrl+C to clear, 'exit' to quit.", *above, "", *box]
    )


def grok_prompt(body: str) -> str:
    return f"  \x1b[34m│\x1b[39m \x1b[36m{GROK_SIGN} {body}" + " " * 40 + "\x1b[34m│\x1b[39m"


def test_grok_grey_placeholder_is_idle_the_same_text_typed_is_a_draft() -> None:
    assert classify("grok", grok(grok_prompt(GROK_PLACEHOLDER))).state is IDLE
    typed = grok(grok_prompt("\x1b[39mAsk me anything...\x1b[30m\x1b[47m \x1b[39m\x1b[49m"))
    assert classify("grok", typed).state is DRAFT
    seen = classify("grok", grok(grok_prompt("\x1b[39mreply Q1 'yes'\x1b[30m\x1b[47m \x1b[39m\x1b[49m")))
    assert seen.state is DRAFT and draft_is(seen, "reply Q1 'yes'")
    plain = "\n".join(parse_capture(grok(grok_prompt(GROK_PLACEHOLDER))).texts)
    assert classify("grok", plain).state is STARTING  # no colours: placeholder or a draft of those words?


def test_grok_box_with_no_row_inside_is_no_composer() -> None:
    """An empty rounded box (a transcript's frame, or a redraw caught half way) has no prompt: the screen
    reads as starting, not idle, and reading it never fails."""
    screen = "\n".join([f"  {GROK_BOX}", f"  {GROK_END}", "", GROK_FOOTER])
    assert classify("grok", screen).state is STARTING


@pytest.mark.parametrize("glyph", ["/", "-", "\\", "|"])
def test_grok_spinner_is_busy_with_or_without_a_draft(glyph: str) -> None:
    spinner = f"  \x1b[36m{glyph} Thinking... \x1b[90m(3s · ↑ 1.2k tokens · esc to interrupt)\x1b[39m"
    assert classify("grok", grok(grok_prompt(GROK_PLACEHOLDER), above=("", spinner))).state is BUSY
    seen = classify("grok", grok(grok_prompt("\x1b[39mtyped while busy"), above=("", spinner)))
    assert (seen.state, seen.draft) == (BUSY, True)


def test_grok_multi_line_paste_shows_its_last_line_over_the_box_and_is_a_draft() -> None:
    """Grok CLI keeps a pasted line end as CR and prints it: the box row shows the last line from the left
    edge, with neither the border nor the prompt sign. Never an empty prompt."""
    row = "\x1b[39mAnswer with: reply QE1 'your answer'" + " " * 60 + "\x1b[34m│\x1b[39m"
    seen = classify("grok", grok(row))
    assert seen.state is DRAFT and seen.draft
    assert classify("grok", grok(" " * 60 + "\x1b[34m│\x1b[39m")).state is STARTING  # nothing readable


def test_grok_dialog_replaces_the_box() -> None:
    dialog = [
        "  \x1b[35m⏺\x1b[37m Run bash command(echo hi > out.txt)",
        "    \x1b[90m⎿ Requesting user confirmation",
        "",
        "  Do you want to proceed with this operation?",
        "",
        "   \x1b[30m\x1b[46m1. Yes\x1b[39m\x1b[49m",
        "   \x1b[37m2. Yes, and don't ask again this session",
        "   3. No",
        "   4. No, with feedback",
        "",
        "  \x1b[2m\x1b[90m↑↓ navigate • Enter select • Esc cancel\x1b[0m",
    ]
    assert classify("grok", "\n".join(dialog)).state is DIALOG
    feedback = "\n".join(["  Type your feedback and press Enter, or press Escape to go back.", "", "  ╭─╮"])
    assert classify("grok", feedback).state is DIALOG


def test_grok_quit_is_offline() -> None:
    assert classify("grok", grok(grok_prompt(GROK_PLACEHOLDER)), PaneInfo(dead=True)).state is OFFLINE
    assert classify("grok", "Gracefully shutting down...\nroot@box:~# ").state is OFFLINE
    assert classify("grok", "root@box:~# ").state is OFFLINE


# A notice Grok CLI took on one line (tests/engines/captures/grok-*/notice-one-line, done-notice): the
# question the capture pasted, as the owner renders it, 100 lines, more than the one-line budget.
GROK_NOTICE = "\n".join(
    [
        "[team Build Harness] Question q2 from agent-2:",
        *(f"Finding {i}: the relay dropped a frame under load." for i in range(100)),
        "Answer with: reply q2 'your answer' (full text: inbox)",
    ]
)


def test_only_grok_takes_a_notice_on_one_line() -> None:
    """Grok CLI knows no bracketed paste; the other engines take a notice as it is, in one bracketed paste."""
    one_line_engines = {name for name, p in PROFILES.items() if p.notice_input is NoticeInput.ONE_LINE}
    assert one_line_engines == {"grok"}
    for engine in ENGINES:
        typed = notice_as_typed(engine, GROK_NOTICE)
        assert typed == GROK_NOTICE if engine != "grok" else "\n" not in typed


def test_grok_one_line_notice_keeps_its_framing_its_answer_line_and_says_where_it_cut() -> None:
    typed = notice_as_typed("grok", GROK_NOTICE)
    assert len(typed) <= profile_for("grok").one_line_chars < len(GROK_NOTICE)
    assert typed.startswith(f"[team Build Harness] Question q2 from agent-2:{LINE_JOIN}Finding 0: ")
    tail = "Answer with: reply q2 'your answer' (full text: inbox)"
    assert typed.endswith(f"{LINE_JOIN}{ONE_LINE_EXCERPT}{LINE_JOIN}{tail}")
    short = "[team t] Question q1 from b:\nWhich port?\nAnswer with: reply q1 'your answer'"
    assert notice_as_typed("grok", short) == short.replace("\n", LINE_JOIN)
    # The desk knows its own notice on one line (a leftover in the composer, an inspected turn) as itself.
    assert squash(notice_as_typed("grok", short)) == squash(short)
    assert squash(notice_as_typed("grok", short)) != squash(short.replace("q1", "q2"))


@settings(max_examples=300)
@given(text=st.text(), limit=st.integers(min_value=1, max_value=400))
def test_one_line_is_one_safe_line_within_its_limit(text: str, limit: int) -> None:
    """Whatever a peer wrote: no line break, no byte a terminal reads as a key, at most `limit` characters,
    and a text that fits is all there (its lines, made safe, between the signs)."""
    line = one_line(text, limit)
    assert is_terminal_safe(line, line_breaks=False) and len(line) <= limit
    if len(terminal_safe(text).replace("\n", LINE_JOIN)) <= limit:
        assert line == terminal_safe(text).replace("\n", LINE_JOIN)
        assert one_line(line, limit) == line


@pytest.mark.parametrize("form", ["ansi", "plain"])
def test_grok_shows_a_one_line_notice_whole_in_its_box(form: str) -> None:
    """The pasted one-line notice wraps over many rows of the box; read back, it is exactly the text pasted
    (what the desk confirms before it presses Enter), and no turn on it shows yet."""
    name = "notice-one-line.ansi.txt" if form == "ansi" else "notice-one-line.txt"
    raw = (GROK_DIR / name).read_text(encoding="utf-8")
    seen = classify("grok", raw)
    typed = notice_as_typed("grok", GROK_NOTICE)
    assert seen.state is DRAFT and draft_is(seen, typed)
    assert not draft_is(seen, GROK_NOTICE)  # the notice's own lines are not what the prompt holds
    assert not turn_shows("grok", raw, typed)


def test_grok_turn_on_a_one_line_notice_shows() -> None:
    done = (GROK_DIR / "done-notice.ansi.txt").read_text(encoding="utf-8")
    assert classify("grok", done).state is IDLE
    assert turn_shows("grok", done, notice_as_typed("grok", GROK_NOTICE))
    assert not turn_shows("grok", done, "[team Build Harness] Question q3 from agent-2:\nanother one")


# --- after a person's draft -------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES.values(), ids=list(PROFILES))
def test_every_profile_gives_a_person_a_pause_and_a_submitted_draft_its_turn(profile: Profile) -> None:
    """team.v1: "Never send interrupt/cancel keys or overwrite a human draft. Wait while a member is working."
    A cleared draft's author may be retyping (a human pause, about 1.5 s), and a submitted draft's turn may
    show late: the quiet period for it is at least as long as the pause (io/tmux.py applies both)."""
    assert 1.0 <= profile.human_pause <= 2.0
    assert profile.turn_quiet >= profile.human_pause


# --- the generic prompt: shell-capable agent programs and scripted agents ----------------------------------


@pytest.mark.parametrize("engine", ["shell", "scripted"])
def test_prompt_states(engine: str) -> None:
    assert classify(engine, "agent$ ls\nfile\nagent$ ").state is IDLE
    assert classify(engine, "bob> ").state is IDLE  # the demo agent's prompt
    assert classify(engine, "agent$ echo typed").state is DRAFT
    assert classify(engine, "agent$ make\ncompiling...").state is BUSY
    assert classify(engine, "Overwrite? [y/N] ").state is DIALOG
    running = PaneInfo(command="sleep", cursor_y=1)
    assert classify(engine, "agent$ sleep 9", running).state is BUSY


def test_plain_shells_are_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """team.v1: "Ordinary terminal shells cannot be automatic answering members": which foreground programs
    count as one (tmux's #{pane_current_command}), the user's login shell included whatever it is called, and
    so do the programs that hand a shell out of sight its input (a remote login, a multiplexer's client)."""
    monkeypatch.setenv("SHELL", "/opt/bin/oil")
    for shell in ("bash", "zsh", "sh", "dash", "fish", "ksh", "tcsh", "csh", "oil", "ssh", "tmux", "screen"):
        assert is_plain_shell(shell), shell
    for program in ("claude", "codex", "node", "python3", "gemini", "vim", ""):
        assert not is_plain_shell(program), program
    monkeypatch.delenv("SHELL")
    assert not is_plain_shell("oil") and not is_plain_shell("")


def test_shell_multi_line_draft_while_the_shell_reads() -> None:
    seen = classify("shell", "agent$ echo two\necho lines", PaneInfo(command="bash", cursor_y=1))
    assert seen.state is DRAFT and draft_is(seen, "echo two\necho lines")


# --- never a false idle -------------------------------------------------------------------------------------

TYPED = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"]), min_size=1, max_size=40)


def _with_draft(engine: str, typed: str) -> str:
    if engine == "claude":
        return _screen("claude-2.1.197/idle.ansi.txt").replace(
            f"{CLAUDE_SIGN}{NBSP}", f"{CLAUDE_SIGN}{NBSP}{typed}"
        )
    if engine == "codex":
        return _screen("codex-0.171.0/idle.ansi.txt").replace(
            "\x1b[2mAsk Codex", f"\x1b[0m{typed}\x1b[2mAsk Codex"
        )
    if engine == "grok":
        idle = (GROK_DIR / "idle.ansi.txt").read_text(encoding="utf-8")
        return idle.replace("\x1b[2m\x1b[90mAsk me", f"\x1b[0m{typed}\x1b[2m\x1b[90mAsk me")
    return _screen("gemini-0.61.0/idle.ansi.txt").replace(
        "\x1b[38;2;175;175;175m  Type", f"\x1b[38;2;255;255;255m{typed}\x1b[38;2;175;175;175m  Type"
    )


@settings(max_examples=60, deadline=None)
@given(engine=st.sampled_from(["claude", "codex", "gemini", "grok"]), typed=TYPED)
def test_a_typed_draft_is_never_idle(engine: str, typed: str) -> None:
    seen = classify(engine, _with_draft(engine, typed))
    assert seen.state is not IDLE, seen.evidence


# --- turns --------------------------------------------------------------------------------------------------


def test_turn_shows_our_text_followed_by_work() -> None:
    assert turn_shows("claude", _screen("claude-2.1.197/busy.ansi.txt"), "please @slow @tool")
    assert turn_shows("claude", _screen("claude-2.1.197/idle-done.ansi.txt"), "please @slow @tool")
    assert not turn_shows("claude", _screen("claude-2.1.197/idle.ansi.txt"), "please @slow @tool")
    assert not turn_shows("claude", _screen("claude-2.1.197/busy.ansi.txt"), "another notice")
    assert turn_shows("codex", _screen("codex-0.171.0/busy.ansi.txt"), "please @slow @tool @escalate")
    assert turn_shows("gemini", _screen("gemini-0.61.0/idle-done.ansi.txt"), "please @slow @tool")
    done_tool = (GROK_DIR / "done-tool.ansi.txt").read_text(encoding="utf-8")
    assert turn_shows("grok", done_tool, "now write-token please")
    assert not turn_shows(
        "grok", (GROK_DIR / "idle.ansi.txt").read_text(encoding="utf-8"), "now write-token please"
    )
    draft = _screen("claude-2.1.197/draft.ansi.txt")
    assert not turn_shows("claude", draft, "this is a human draft, not submitted")  # in the prompt, not sent


# --- the command line ---------------------------------------------------------------------------------------


def test_cli_classify_prints_the_contract_fields() -> None:
    path = SCREENS / "claude-2.1.197" / "busy.ansi.txt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "agent",
            "classify",
            "--engine",
            "claude",
            str(path),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    assert set(result) == {"state", "busy", "draft", "dialog", "safeToWrite", "evidence"}
    assert (result["state"], result["safeToWrite"]) == ("busy", False)
    readable = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "agent", "classify", "--engine", "claude", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert readable.stdout.startswith("busy (not safe to write")
    wrong = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "agent", "classify", "--engine", "vim", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert wrong.returncode == 2
