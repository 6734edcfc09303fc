# Engine profiles: what a captured pane means. A coding agent's TUI tells us in pixels, not in an API, whether
# it would take a pasted notice now, and the difference between "empty prompt" and "a person's unsent draft"
# is often only a colour (a dim placeholder vs typed text). So a capture is read *with* its SGR colour codes,
# every engine gets one small profile (adding an engine = adding one entry to PROFILES), and every profile
# follows one rule: say `idle` only on positive evidence of an empty prompt with nothing running and no
# dialog; when unsure, say `starting`. A false idle pastes into someone's draft or approves a dialog; a false
# anything-else only delays a notice.
#
# Pure functions over text (no tmux here): `classify(engine, capture, pane)` is what the daemon, the CLI
# (`harness agent classify`) and the conformance fixtures all call.
from __future__ import annotations

import enum
import functools
import os
import re
import unicodedata
from collections.abc import Callable, Sequence

import attrs

from harness.core.terminal_text import LINE_SIGN, one_line
from harness.io.terminal_port import ScreenState

# --- reading a capture with colours -------------------------------------------------------------------------

Colour = int | tuple[int, int, int] | None  # a 256-colour index, an RGB triple, or the terminal default


@attrs.frozen
class Style:
    bold: bool = False
    dim: bool = False
    reverse: bool = False
    fg: Colour = None
    bg: Colour = None


PLAIN = Style()
_ESCAPE = re.compile(r"\x1b(?:\[([0-9;:?]*)([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


@functools.lru_cache(maxsize=4096)  # a screen repeats a handful of (style, sequence) pairs many times
def _sgr(style: Style, params: str) -> Style:
    """Apply one SGR sequence (`ESC [ params m`) to `style`."""
    codes = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")] if params else [0]
    bold, dim, reverse, fg, bg = style.bold, style.dim, style.reverse, style.fg, style.bg
    i = 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            bold, dim, reverse, fg, bg = False, False, False, None, None
        elif code == 1:
            bold = True
        elif code == 2:
            dim = True
        elif code == 22:
            bold = dim = False
        elif code == 7:
            reverse = True
        elif code == 27:
            reverse = False
        elif code in (38, 48):
            colour: Colour = None
            if i + 2 < len(codes) and codes[i + 1] == 5:
                colour, i = codes[i + 2], i + 2
            elif i + 1 < len(codes) and codes[i + 1] == 2 and i + 4 < len(codes):
                colour, i = (codes[i + 2], codes[i + 3], codes[i + 4]), i + 4
            if code == 38:
                fg = colour
            else:
                bg = colour
        elif code == 39:
            fg = None
        elif code == 49:
            bg = None
        elif 30 <= code <= 37 or 90 <= code <= 97:
            fg = code - 30 if code < 90 else code - 82
        elif 40 <= code <= 47 or 100 <= code <= 107:
            bg = code - 40 if code < 100 else code - 92
        i += 1
    return Style(bold, dim, reverse, fg, bg)


@attrs.frozen
class Line:
    text: str  # the characters, colour codes removed
    styles: tuple[Style, ...]  # one per character of `text`

    def visible_styles(self, start: int = 0) -> list[Style]:
        """The styles of the non-blank characters from `start` on."""
        return [s for ch, s in zip(self.text[start:], self.styles[start:], strict=True) if not ch.isspace()]


@attrs.frozen
class Capture:
    lines: tuple[Line, ...]
    coloured: bool  # whether the capture carried any colour codes (a plain capture cannot tell placeholders)

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines]


def parse_capture(raw: str) -> Capture:
    """Split a `capture-pane -p -e` text into lines of characters with their styles. tmux emits only style
    *changes*, carried across line ends, so one style runs through the whole capture."""
    style = PLAIN
    lines: list[Line] = []
    chars: list[str] = []
    styles: list[Style] = []
    coloured = False
    position = 0
    raw = raw.replace("\r\n", "\n")
    for match in _ESCAPE.finditer(raw):
        _take(raw[position : match.start()], style, chars, styles, lines)
        position = match.end()
        coloured = True
        if match.group(2) == "m":
            style = _sgr(style, match.group(1) or "")
    _take(raw[position:], style, chars, styles, lines)
    lines.append(Line("".join(chars), tuple(styles)))
    while lines and not lines[-1].text.strip():
        lines.pop()
    return Capture(tuple(lines), coloured)


def _take(segment: str, style: Style, chars: list[str], styles: list[Style], lines: list[Line]) -> None:
    parts = segment.split("\n")
    for index, part in enumerate(parts):
        if index:
            lines.append(Line("".join(chars), tuple(styles)))
            chars.clear()
            styles.clear()
        chars.extend(part)
        styles.extend([style] * len(part))


# --- observations -------------------------------------------------------------------------------------------


@attrs.frozen
class PaneInfo:
    """What tmux says about the pane besides its pixels."""

    dead: bool = False
    pid: int | None = None  # #{pane_pid}
    tty: str = ""  # #{pane_tty}
    command: str = ""  # #{pane_current_command}
    cursor_y: int | None = None  # #{cursor_y}, 0 = top row of the capture
    width: int | None = None  # #{pane_width}: wrapped lines are joined in a capture, the cursor row is not


@attrs.frozen
class Observation:
    state: ScreenState
    busy: bool
    draft: bool
    dialog: bool
    evidence: tuple[str, ...]
    prompt: str | None = None  # the composer's content when one was found ("" = empty)

    @property
    def safe_to_write(self) -> bool:
        return self.state is ScreenState.IDLE

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "busy": self.busy,
            "draft": self.draft,
            "dialog": self.dialog,
            "safeToWrite": self.safe_to_write,
            "evidence": list(self.evidence),
        }


@attrs.frozen
class Composer:
    """The prompt an engine types into: where it is and what it holds."""

    top: int  # first line index of the composer (its top rule, or the prompt line)
    bottom: int  # last line index of it (its bottom rule, or the last draft line)
    text: str  # the draft, whitespace-joined; "" when empty or showing a placeholder
    evidence: tuple[str, ...]
    ambiguous: bool = False  # cannot tell placeholder from draft (a capture without colours)


# Long pastes fold into one marker: Claude, Codex, Gemini (over 5 lines it counts them, else over 500
# characters it counts those; ` #2` tells a second paste of the same count).
FOLDED = re.compile(
    r"\[Pasted text #\d+(?: \+\d+ lines?)?\]|\[Pasted Content \d+ chars\]"
    r"|\[Pasted Text: \d+ (?:lines?|chars)(?: #\d+)?\]"
)
SHELL_PROMPT = re.compile(r"^\S*[$#%] ?$|^\S*[$#%] \S")
# Exit summaries the engines print when they quit (the shell prompt usually follows).
EXIT_MARKERS = re.compile(
    r"claude --resume|Resume this session with|Total cost:|To continue this session, run codex resume|"
    r"Token usage: total=|Agent powering down|Interaction Summary|gemini --resume|^Pane is dead|"
    r"^Gracefully shutting down\.\.\.$"
)
QUEUED = re.compile(r"Press up to edit queued messages|queued messages?")
SELECTOR = re.compile(r"^[\s│]*[\u276f\u203a●>] *1\. +\S")  # a preselected first option
# Dialog wordings that are the same across engines (trust, API key, generic choices).
COMMON_DIALOGS = (
    "Do you want to proceed?",
    "Do you trust the files in this folder?",
    "Trust this folder?",
    "Yes, I trust this folder",
    "Do you want to use this API key?",
    "Detected a custom API key",
    "Bypass Permissions mode",
    "Yes, I accept",
    "Would you like to run the following command?",
    "Would you like to make the following edits?",
    "Allow execution of",
    "Apply this change?",
    "Press enter to confirm or esc to cancel",
)
# Ordinary terminal shells, and the programs that hand a shell out of sight their input: remote logins, and
# the clients of terminal multiplexers, whose shells run in panes of their own, not below this pane. Matched
# against tmux's name for a pane's foreground program (#{pane_current_command}: argv[0]'s base name, a login
# shell's leading '-' removed) and against each process's real executable (io/pane_processes.py).
# team.v1: "Ordinary terminal shells cannot be automatic answering members", so nothing is ever pasted into
# a pane while one of these would read it: pasted text would run as commands.
SHELLS = frozenset(
    {"bash", "sh", "zsh", "fish", "dash", "ksh", "tcsh", "csh", "ash", "mksh", "oksh", "rbash", "yash"}
    | {"busybox", "elvish", "nu", "pwsh", "xonsh", "ssh", "mosh-client", "telnet"}
    | {"tmux", "screen", "zellij"}
)


def is_plain_shell(command: str) -> bool:
    """Whether a program name (a pane's foreground program, or an executable's base name) is an ordinary
    terminal shell: one of SHELLS, or whatever this user's login shell ($SHELL) is called."""
    login = os.path.basename(os.environ.get("SHELL", "")).lstrip("-")
    return command in SHELLS or (bool(login) and command == login)


def _clip(text: str, width: int = 160) -> str:
    flat = re.sub(r"\s{3,}", "  ", text.strip())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def squash(text: str) -> str:
    """Text with all whitespace and line signs removed: how a draft is compared with what was pasted (wrapping
    differs, and an engine that takes a notice on one line shows its line breaks as LINE_SIGN), so a desk
    knows its own notice in a composer or a turn whichever way the engine took it."""
    return "".join(text.replace(LINE_SIGN, " ").split())


def is_grey(colour: Colour) -> bool:
    if isinstance(colour, tuple):
        r, g, b = colour
        return r == g == b and 90 <= r <= 200
    return colour is not None and (colour in (7, 8) or 240 <= colour <= 250)


class NoticeInput(enum.Enum):
    """How an engine's prompt takes a notice."""

    # As it is, line breaks and all, in one bracketed paste: the engine reads a paste as text, never as keys.
    BRACKETED_PASTE = "bracketed-paste"
    # On one line (core/terminal_text.py `one_line`), pasted without brackets: an engine that knows no
    # bracketed paste reads a line end in a paste as a carriage return, or alone as Enter; a line of printable
    # characters is text whatever it does with a paste.
    ONE_LINE = "one-line"


Patterns = Sequence[str | re.Pattern[str]]
Quoting = Callable[[Capture, Composer | None], frozenset[int]]
NO_ROWS: frozenset[int] = frozenset()


def _no_rows(capture: Capture, composer: Composer | None) -> frozenset[int]:
    return NO_ROWS


@attrs.frozen
class Profile:
    """How one engine's screen reads. The functions get the parsed capture and return evidence lines."""

    name: str
    composer: Callable[[Capture, PaneInfo | None], Composer | None]
    busy: Callable[[Capture, Composer | None], list[str]]
    dialog: Callable[[Capture, Composer | None], list[str]]
    finished: re.Pattern[str]  # a line that shows a turn ended (for turn_matches)
    needs_shell_check: bool = True  # a shell prompt where the composer should be means the engine quit
    loading: re.Pattern[str] | None = None  # a header line that says the engine is still starting
    # After a person's draft left the composer, the empty prompt is no licence until it held still: for
    # `human_pause` seconds when the draft vanished (cleared: its author may be retyping), for `turn_quiet`
    # seconds when it shows above the composer (submitted: its turn may not have started yet). A turn seen
    # meanwhile ends the wait; the prompt after that turn is idle as usual.
    human_pause: float = 1.5
    turn_quiet: float = 3.0
    notice_input: NoticeInput = NoticeInput.BRACKETED_PASTE
    # A one-line notice longer than this is excerpted: the engine draws the whole line in its prompt box, and
    # a box taller than the pane cannot be read back to confirm the paste.
    one_line_chars: int = 2_000
    # Rows of the engine's own chrome that repeat a person's words (Codex's footer shows the thread's title:
    # its first message, as often as not a peer's notice): never searched for exit summaries (nor, by the
    # engine's own functions, for status or dialogs), or one message would read as a state for good.
    quoting: Quoting = _no_rows


def _nonblank(capture: Capture) -> list[int]:
    return [i for i, line in enumerate(capture.lines) if line.text.strip()]


def _rule(text: str, char: str, minimum: int = 20) -> bool:
    stripped = text.strip()
    return len(stripped) >= minimum and set(stripped) == {char}


def _edge(text: str, char: str) -> bool:
    """A composer's edge as Claude and Gemini draw it: a rule from column 0. Each row of a draft is indented
    (Claude: 2 columns, Gemini: 3), so a run of rule characters in a person's text, wrapped onto a row of
    its own, is never taken for an edge (that made the composer's top edge a row inside the draft, and the
    screen read `starting` for good, with the draft unseen)."""
    return text.startswith(char) and _rule(text, char)


def _search(capture: Capture, indexes: Sequence[int], patterns: Patterns) -> list[str]:
    found: list[str] = []
    for i in indexes:
        text = capture.lines[i].text
        for pattern in patterns:
            hit = pattern.search(text) if isinstance(pattern, re.Pattern) else pattern in text
            if hit:
                found.append(_clip(text))
                break
    return found


def _around(
    capture: Capture, composer: Composer | None, above: int, tail: int = 30, skip: frozenset[int] = NO_ROWS
) -> list[int]:
    """Line indexes worth looking at for status and dialogs: a few lines above the composer and everything
    below it but `skip`; without a composer, the last `tail` non-blank lines."""
    if composer is None:
        return _nonblank(capture)[-tail:]
    before = range(max(0, composer.top - above), composer.top)
    return [*before, *(i for i in range(composer.bottom + 1, len(capture.lines)) if i not in skip)]


def _status(
    capture: Capture,
    composer: Composer | None,
    above: int,
    anchored: Patterns,
    loose: Patterns,
    *,
    skip: frozenset[int] = NO_ROWS,
) -> list[str]:
    """Evidence of a running turn. The lines above the composer are the end of the transcript, where a peer's
    words are shown as they were written ("it shows queued messages for a minute"), so there only `anchored`
    patterns count: the engine's own status rows, whole. Below the composer (its footer, `skip` aside) and on
    a screen without a composer (the last 12 non-blank lines), the `loose` ones as well: a screen that may be
    busy is never idle."""
    if composer is None:
        return _search(capture, _around(capture, None, above, 12), loose)
    before = range(max(0, composer.top - above), composer.top)
    below = _around(capture, composer, 0, skip=skip)
    return [*_search(capture, before, anchored), *_search(capture, below, loose)]


def _dialog(
    extra: Sequence[str], above: int, anchored: Patterns | None = None, skip: Quoting = _no_rows
) -> Callable[[Capture, Composer | None], list[str]]:
    """Dialog evidence: the wordings of COMMON_DIALOGS and `extra` and a preselected first option, in the
    lines around the composer (`skip` aside) or, without one, at the end of the screen. With `anchored`, those
    replace `extra` next to a composer (an engine whose dialogs take the composer's place: its `extra` words
    can show there only in a peer's text)."""
    patterns: list[str | re.Pattern[str]] = [*COMMON_DIALOGS, *extra, SELECTOR]
    near = patterns if anchored is None else [*COMMON_DIALOGS, *anchored, SELECTOR]

    def find(capture: Capture, composer: Composer | None) -> list[str]:
        rows = _around(capture, composer, above, skip=skip(capture, composer))
        return _search(capture, rows, patterns if composer is None else near)

    return find


# --- Claude Code --------------------------------------------------------------------------------------------

CLAUDE_PROMPT = "\u276f"  # heavy right-pointing angle quotation mark
_CLAUDE_SPINNER = re.compile(r"^\s*[·✢✳✶✻✽*\u2217] \S.*…")
# Its own status rows above the composer: the spinner line from column 0 (`✢ Hyperspacing…`, older versions
# add `(3s · esc to interrupt)`), where the transcript indents every row but a message's first (which starts
# with the prompt sign, `●` or `✻ Cooked for 3s`); and its queued-message wording, whole.
_CLAUDE_STATUS = (
    re.compile(r"^[·✢✳✶✻✽*\u2217] \S.*…"),
    re.compile(r"^\s*(?:\u276f\s*)?Press up to edit queued messages\s*$"),
)
_CLAUDE_PLACEHOLDER = re.compile(r'^Try "')


def _boxed(
    capture: Capture, bottom_edge: Callable[[str], bool], top_edge: Callable[[str], bool], below: int | None
) -> tuple[int, int] | None:
    """The rows (top edge, bottom edge) of the lowest box on screen with at least one row inside, the way the
    boxed composers (Claude's rules, Gemini's half blocks, Grok's rounded box) are drawn. With `below`, a box
    with more than that many non-blank rows under it is a transcript message, so there is no composer."""
    lines = capture.lines
    for bottom in range(len(lines) - 1, 0, -1):
        if not bottom_edge(lines[bottom].text):
            continue
        if below is not None and sum(1 for i in _nonblank(capture) if i > bottom) > below:
            return None
        top = bottom - 1
        while top >= 0 and not top_edge(lines[top].text):
            top -= 1
        return None if top < 0 or top == bottom - 1 else (top, bottom)
    return None


def _shows_placeholder(capture: Capture, line: Line, start: int, length: int | None = None) -> bool | None:
    """Whether the text from `start` on `line` is drawn as a placeholder (dim or grey), not typed; None when
    the capture has no colours to tell by."""
    if not capture.coloured:
        return None
    styles = line.visible_styles(start)[:length]
    return bool(styles) and all(s.dim or is_grey(s.fg) for s in styles)


def _claude_composer(capture: Capture, pane: PaneInfo | None) -> Composer | None:
    box = _boxed(capture, functools.partial(_edge, char="─"), functools.partial(_edge, char="─"), None)
    if box is None:
        return None
    top, bottom = box
    lines = capture.lines
    first = lines[top + 1]
    if not first.text.startswith(CLAUDE_PROMPT):
        return None
    body = [first.text[1:], *(line.text for line in lines[top + 2 : bottom])]
    text = " ".join(part.strip(" \xa0") for part in body).strip()
    if text and _CLAUDE_PLACEHOLDER.match(text) and _shows_placeholder(capture, first, 1):
        text = ""
    evidence = (_clip(first.text) if text else f"{CLAUDE_PROMPT} (empty prompt between rules)",)
    return Composer(top, bottom, text, evidence)


def _claude_busy(capture: Capture, composer: Composer | None) -> list[str]:
    return _status(capture, composer, 12, _CLAUDE_STATUS, [_CLAUDE_SPINNER, "esc to interrupt", QUEUED])


CLAUDE = Profile(
    name="claude",
    composer=_claude_composer,
    busy=_claude_busy,
    dialog=_dialog(("Quick safety check", "Yes, and always allow", "Enter to confirm"), 2),
    finished=re.compile(r"^\s*[·✢✳✶✻✽*\u2217] \S+ for \d+[smh]|^●"),
)

# --- Codex --------------------------------------------------------------------------------------------------

_CODEX_PLACEHOLDERS = (
    "Ask Codex to do anything",
    "Explain this codebase",
    "Summarize recent commits",
    "Implement {feature}",
    "Find and fix a bug in @filename",
    "Write tests for @filename",
    "Improve documentation in @filename",
    "Run /review on my current changes",
    "Use /skills to list available skills",
)
CODEX_PROMPT = "\u203a"  # single right-pointing angle quotation mark
_CODEX_WORKING = re.compile(r"^\s*[•◦·] .*\(.*esc to interrupt\)")
# Its own status rows above the composer: the working line from column 0 with its timer (`• Working (3s • esc
# to interrupt)`; the header changes with the model's plan), and the queued follow-ups under it.
_CODEX_STATUS = (
    re.compile(r"^[•◦·] \S.*\(\d[^()]*esc to interrupt"),
    re.compile(r"^[•◦·] Queued follow-up|^\s+\S+ edit last queued message\s*$"),
)
# Next to a composer, `Approve` counts only where a dialog puts it: first on its row (or an option's).
_CODEX_DIALOGS = ("Allow Codex to work in this folder", "Approve", "Press enter to continue")
_CODEX_NEAR = (
    "Allow Codex to work in this folder",
    re.compile(r"^\s*(?:[\u203a\u276f]\s*)?(?:\d+\.\s+)?Approve\b"),
    "Press enter to continue",
)


def _codex_composer(capture: Capture, pane: PaneInfo | None) -> Composer | None:
    lines = capture.lines
    nonblank = _nonblank(capture)
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if not line.text.startswith(CODEX_PROMPT) or re.match(r"\u203a\s*\d+\.", line.text):
            continue
        if line.styles and (line.styles[0].bg is not None or line.styles[0].reverse):
            return None  # a transcript message (shaded) or a selection: no composer on screen
        end = index
        while end + 1 < len(lines) and lines[end + 1].text.strip():
            end += 1
        if sum(1 for i in nonblank if i > end) > 4:
            return None  # that prompt sign belongs to a transcript message, not the composer
        body = [line.text[1:], *(extra.text for extra in lines[index + 1 : end + 1])]
        text = " ".join(part.strip() for part in body).strip()
        ambiguous = False
        if text and capture.coloured:
            styles = line.visible_styles(1)
            if styles and all(s.dim for s in styles) and end == index:
                text = ""
        elif text and text in _CODEX_PLACEHOLDERS:
            ambiguous = True
        evidence = (_clip(line.text) if text else f"{CODEX_PROMPT} (placeholder, dim)",)
        return Composer(index, end, text, evidence, ambiguous)
    return None


def _codex_footer(capture: Capture, composer: Composer | None) -> frozenset[int]:
    """Codex's footer, whose status line shows the thread's title (its first message, flattened and
    cut: `fake-model default · ~/project · [team Build] Question q1 from alice: Approve the v2 release…`)
    for the rest of the session. Only the footer's own layout is taken: one blank row under the composer,
    then the last non-blank rows of the screen, at most 4 (a narrow pane wraps the status line), contiguous
    and indented: the status line and the key hints, which say nothing this profile reads. Any other rows
    under the composer (an exit summary, a shell prompt) are read as before."""
    if composer is None:
        return NO_ROWS
    lines = capture.lines
    rows = [i for i in range(composer.bottom + 1, len(lines)) if lines[i].text.strip()]
    if not 1 <= len(rows) <= 4 or rows != list(range(composer.bottom + 2, composer.bottom + 2 + len(rows))):
        return NO_ROWS
    if not all(lines[i].text.startswith("  ") for i in rows):
        return NO_ROWS
    return frozenset(rows)


def _codex_busy(capture: Capture, composer: Composer | None) -> list[str]:
    loose: Patterns = [_CODEX_WORKING, "esc to interrupt", QUEUED]
    return _status(capture, composer, 10, _CODEX_STATUS, loose, skip=_codex_footer(capture, composer))


CODEX = Profile(
    name="codex",
    composer=_codex_composer,
    busy=_codex_busy,
    dialog=_dialog(_CODEX_DIALOGS, 2, _CODEX_NEAR, _codex_footer),
    finished=re.compile(r"Worked for \d|^•"),
    loading=re.compile(r"^\s+loading\s*$"),  # the header shows `loading` where the directory will be
    quoting=_codex_footer,
)

# --- Gemini CLI ---------------------------------------------------------------------------------------------

_GEMINI_PLACEHOLDERS = ("Type your message or @path/to/file", "Type your shell command")
_GEMINI_SPINNER = re.compile(r"^\s*[\u2800-\u28ff] .*\(esc to cancel")
# Its own status rows above the composer: the spinner line (` ⠹ Thinking... (esc to cancel, 1s)`), where the
# transcript indents a reply's rows by 2 and a message's by 3, and its queued-message heading, whole.
_GEMINI_STATUS = (
    re.compile(r"^ ?[\u2800-\u28ff] \S.*\(esc to cancel"),
    re.compile(r"^ {0,2}Queued \(press ↑ to edit\):?\s*$"),
)


def _gemini_composer(capture: Capture, pane: PaneInfo | None) -> Composer | None:
    box = _boxed(capture, functools.partial(_edge, char="▀"), functools.partial(_edge, char="▄"), 4)
    if box is None:
        return None
    top, bottom = box
    lines = capture.lines
    first = lines[top + 1]
    match = re.match(r"^ ([>!*]) ", first.text)
    if match is None:
        return None
    body = [first.text[3:], *(line.text for line in lines[top + 2 : bottom])]
    text = " ".join(part.strip() for part in body).strip()
    ambiguous = False
    if text in _GEMINI_PLACEHOLDERS:
        placeholder = _shows_placeholder(capture, first, 3)
        ambiguous = placeholder is None
        text = "" if placeholder else text
    evidence = (_clip(first.text) if text else "> (placeholder, grey)",)
    return Composer(top, bottom, text, evidence, ambiguous)


def _gemini_busy(capture: Capture, composer: Composer | None) -> list[str]:
    return _status(capture, composer, 10, _GEMINI_STATUS, [_GEMINI_SPINNER, QUEUED])


GEMINI = Profile(
    name="gemini",
    composer=_gemini_composer,
    busy=_gemini_busy,
    dialog=_dialog(("Waiting for user confirmation", "Allow once"), 2),
    finished=re.compile(r"^✦ "),
)

# --- Grok CLI -----------------------------------------------------------------------------------------------
# Its composer is a rounded box (`╭─╮`, the U+276F prompt sign, `╰─╯`) with a grey placeholder; while a turn
# runs a spinner line (`/ Thinking... (3s · ↑ 1.2k tokens · esc to interrupt)`, glyphs `/ - \\ |`) stands
# above the box, which keeps taking keys. Its permission dialog replaces the box. It knows no bracketed paste:
# a pasted line end arrives as CR, which it keeps in the draft and prints as a carriage return, so the box row
# of a multi-line paste shows only its last line, from the left edge, over the box's border and prompt sign.
# So a notice reaches it on one line (NoticeInput.ONE_LINE), which its box shows whole, wrapped.

GROK_PROMPT = "\u276f"
_GROK_PLACEHOLDER = "Ask me anything..."
_GROK_SPINNER = re.compile(r"^\s*[/\-\\|] \S+\.\.\. \(\d+s · .*esc to interrupt\)")


# A narrow pane: Ink wraps the spinner's two parts (`/ Thinking... ` and `(3s · ↑ 798 tokens · esc to
# interrupt)`) each in a column of its own, cutting words anywhere (`\ Thinkin(4s · ↑ 801` / `...      tokens
# · esc to` / `interrupt)`). Then the spinner is a block right above the box: its first row starts (at the
# transcript's own indent, where a reply's rows never start) with the glyph, its last ends with `interrupt)`.
_GROK_HEAD = re.compile(r"^ {0,2}[/\-\\|]\s+\S")
_GROK_END = re.compile(r"interrupt\)\s*$")


def _box_edge(text: str, left: str, right: str) -> bool:
    stripped = text.strip()
    return (
        len(stripped) >= 20 and stripped[0] == left and stripped[-1] == right and set(stripped[1:-1]) == {"─"}
    )


def _grok_composer(capture: Capture, pane: PaneInfo | None) -> Composer | None:
    bottom_edge = functools.partial(_box_edge, left="╰", right="╯")
    box = _boxed(capture, bottom_edge, functools.partial(_box_edge, left="╭", right="╮"), 4)
    if box is None:
        return None
    top, bottom = box
    lines = capture.lines
    rows = [line.text.strip().removesuffix("│").rstrip() for line in lines[top + 1 : bottom]]
    first = rows[0].lstrip()
    if not first.startswith("│"):
        # A multi-line paste (CR line ends): its last line overwrote the prompt sign. A draft for sure,
        # and what shows is only its end.
        evidence = (f"a multi-line draft shows its last line: {_clip(first)}",)
        return Composer(top, bottom, first, evidence, ambiguous=not first)
    rows[0] = first[1:].lstrip()
    if not rows[0].startswith(GROK_PROMPT):
        return None
    body = [rows[0][1:], *(row.lstrip().removeprefix("│") for row in rows[1:])]
    text = " ".join(part.strip() for part in body).strip()
    ambiguous = False
    if text == _GROK_PLACEHOLDER:
        prompt_line = lines[top + 1]
        start = prompt_line.text.find(_GROK_PLACEHOLDER)
        placeholder = _shows_placeholder(capture, prompt_line, start, len(_GROK_PLACEHOLDER.replace(" ", "")))
        ambiguous = placeholder is None
        text = "" if placeholder else text
    evidence = (_clip(lines[top + 1].text) if text else f"{GROK_PROMPT} (placeholder, grey)",)
    return Composer(top, bottom, text, evidence, ambiguous)


def _grok_busy(capture: Capture, composer: Composer | None) -> list[str]:
    found = _status(capture, composer, 4, [_GROK_SPINNER], [_GROK_SPINNER, "esc to interrupt)"])
    return found or ([] if composer is None else _grok_wrapped_spinner(capture, composer))


def _grok_wrapped_spinner(capture: Capture, composer: Composer) -> list[str]:
    """The spinner line as a narrow pane wraps it: the last rows above the box, blank rows aside, from a row
    that starts with the glyph to one that ends with `interrupt)`, at most 6 rows."""
    lines = capture.lines
    end = composer.top - 1
    while end >= 0 and not lines[end].text.strip():
        end -= 1
    if end < 0 or not _GROK_END.search(lines[end].text):
        return []
    for start in range(end - 1, max(-1, end - 6), -1):
        if not lines[start].text.strip():
            return []
        if _GROK_HEAD.match(lines[start].text):
            return [_clip(" ".join(line.text.strip() for line in lines[start : end + 1]))]
    return []


GROK = Profile(
    name="grok",
    composer=_grok_composer,
    busy=_grok_busy,
    dialog=_dialog(
        (
            "Do you want to proceed with this operation?",
            "Enter select • Esc cancel",
            "Type your feedback and press Enter",
        ),
        2,
    ),
    finished=re.compile(r"^\s*⏺ "),
    notice_input=NoticeInput.ONE_LINE,
)

# --- a generic prompt: a shell-capable agent program (`shell`) or a scripted line reader (`scripted`) ------
# Both show a `$`/`%`/`#`/`>` prompt on their last line. The same reading also describes a bash pane (the
# captured fixtures are bash), which is how an inbox-only shell member is shown; a plain shell is never
# written to whatever its screen says (io/tmux.py checks the pane before every paste, by name and by process).

_PROMPT = re.compile(r"^(\S*[$#%>\u276f]) ?(.*)$")
_QUESTION = re.compile(r"\[y/N\]|\[Y/n\]|\(y/n\)|\(yes/no\)|[Pp]assword[^:]*:\s*$")


def _prompt_composer(capture: Capture, pane: PaneInfo | None) -> Composer | None:
    """The prompt on the last line; or, while the shell itself is in the foreground (so nothing runs), the
    last prompt with the lines of a multi-line draft under it."""
    nonblank = _nonblank(capture)
    if not nonblank or _QUESTION.search(capture.lines[nonblank[-1]].text):
        return None
    candidates = nonblank[-1:] if pane is None or not is_plain_shell(pane.command) else nonblank[::-1][:30]
    for index in candidates:
        match = _PROMPT.match(capture.lines[index].text)
        if match is None:
            continue
        body = [match.group(2), *(capture.lines[i].text for i in nonblank if i > index)]
        text = " ".join(part.strip() for part in body).strip()
        return Composer(index, nonblank[-1], text, (_clip(capture.lines[index].text),))
    return None


def _prompt_busy(capture: Capture, composer: Composer | None) -> list[str]:
    nonblank = _nonblank(capture)
    if composer is None and nonblank and not _QUESTION.search(capture.lines[nonblank[-1]].text):
        return [f"no prompt on the last line: {_clip(capture.lines[nonblank[-1]].text)}"]
    return []


def _prompt_dialog(capture: Capture, composer: Composer | None) -> list[str]:
    nonblank = _nonblank(capture)
    if nonblank and _QUESTION.search(capture.lines[nonblank[-1]].text):
        return [_clip(capture.lines[nonblank[-1]].text)]
    return []


PROMPT = Profile(
    name="prompt",
    composer=_prompt_composer,
    busy=_prompt_busy,
    dialog=_prompt_dialog,
    finished=_PROMPT,
    needs_shell_check=False,
)

# Engine name -> profile. `shell` is an agent program that runs shell commands and shows a plain prompt;
# `scripted` is a program that takes each submitted line as one message (the demo agent, the test TUIs).
PROFILES: dict[str, Profile] = {
    "claude": CLAUDE,
    "codex": CODEX,
    "gemini": GEMINI,
    "grok": GROK,
    "shell": PROMPT,
    "scripted": PROMPT,
}
ENGINES = tuple(PROFILES)

# --- the decision -------------------------------------------------------------------------------------------


def profile_for(engine: str) -> Profile:
    try:
        return PROFILES[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}") from None


def classify(engine: str, raw: str, pane: PaneInfo | None = None) -> Observation:
    """Classify one capture of `engine`'s pane (colour codes included, as `capture-pane -e` gives them)."""
    return classify_capture(profile_for(engine), parse_capture(raw), pane)


def classify_capture(profile: Profile, capture: Capture, pane: PaneInfo | None = None) -> Observation:
    if pane is not None and pane.dead:
        return Observation(ScreenState.OFFLINE, False, False, False, ("the pane is dead",))
    composer = profile.composer(capture, pane)
    cursor = None if pane is None else pane.cursor_y
    if (
        profile is PROMPT
        and composer is not None
        and cursor is not None
        and cursor > _row(capture, composer, pane)
    ):
        evidence = ("the cursor is below the last prompt: a command runs",)
        return Observation(ScreenState.BUSY, True, False, False, evidence)
    below = _around(capture, composer, 0, 20, profile.quoting(capture, composer))
    quit_ = _search(capture, below, [EXIT_MARKERS])
    if quit_:  # an exit summary under the last prompt: the engine is gone even if its prompt still shows
        return Observation(ScreenState.OFFLINE, False, False, False, tuple(quit_))
    if profile.loading is not None:
        loading = _search(capture, range(min(6, len(capture.lines))), [profile.loading])
        if loading:
            return Observation(ScreenState.STARTING, False, False, False, (f"still loading: {loading[0]}",))
    dialog = profile.dialog(capture, composer)
    busy = profile.busy(capture, composer)
    draft = composer is not None and bool(composer.text) and not composer.ambiguous
    prompt = None if composer is None else composer.text
    if composer is None and not dialog and not busy:
        offline = _offline(profile, capture, pane)
        if offline:
            return Observation(ScreenState.OFFLINE, False, False, False, tuple(offline))
    if dialog:
        return Observation(ScreenState.DIALOG, bool(busy), draft, True, tuple(dialog), prompt)
    if busy:
        shown = (*busy, *(composer.evidence if draft and composer else ()))
        return Observation(ScreenState.BUSY, True, draft, False, shown, prompt)
    if composer is None:
        unknown = ("no prompt found: not ready, or a screen this profile does not know",)
        return Observation(ScreenState.STARTING, False, False, False, unknown)
    if composer.ambiguous:
        unsure = (*composer.evidence, "no colours in the capture: placeholder or draft?")
        return Observation(ScreenState.STARTING, False, False, False, unsure, prompt)
    if draft:
        return Observation(ScreenState.DRAFT, False, True, False, composer.evidence, prompt)
    return Observation(ScreenState.IDLE, False, False, False, composer.evidence, prompt)


def _row(capture: Capture, composer: Composer, pane: PaneInfo | None) -> int:
    """The screen row on which the composer ends (a joined line spans several rows of the pane's width)."""
    width = pane.width if pane is not None and pane.width else 0
    if not width:
        return composer.bottom
    rows = 0
    for line in capture.lines[: composer.bottom + 1]:
        columns = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line.text.rstrip())
        rows += max(1, -(-columns // width))
    return rows - 1


def _offline(profile: Profile, capture: Capture, pane: PaneInfo | None) -> list[str]:
    found: list[str] = []
    if profile.needs_shell_check:
        nonblank = _nonblank(capture)
        if nonblank and SHELL_PROMPT.search(capture.lines[nonblank[-1]].text):
            found.append(f"a shell prompt where the engine was: {_clip(capture.lines[nonblank[-1]].text)}")
        if pane is not None and is_plain_shell(pane.command):
            found.append(f"the pane runs {pane.command}")
    return found


# --- recognising our own text -------------------------------------------------------------------------------


def draft_is(observation: Observation, text: str) -> bool:
    """Whether the prompt holds exactly `text` (as typed, wrapped, or folded into one paste marker)."""
    prompt = observation.prompt
    if not prompt:
        return False
    if FOLDED.fullmatch(prompt.strip()):
        return True
    return squash(prompt) == squash(text)


def notice_as_typed(engine: str, text: str) -> str:
    """A notice's text as `engine`'s prompt receives it, and so as its draft and its turn show it."""
    profile = profile_for(engine)
    if profile.notice_input is NoticeInput.ONE_LINE:
        return one_line(text, profile.one_line_chars)
    return text


def needle(text: str) -> str:
    """What identifies a written notice on screen: the start of its first line, whitespace collapsed."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return " ".join(first.split())[:40]


def turn_shows(engine: str, raw: str, text: str) -> bool:
    """Whether the capture shows a turn on `text`: its first line (or a paste marker) in the transcript above
    the composer, followed by a running turn, a dialog, or a finished-turn marker."""
    profile = profile_for(engine)
    capture = parse_capture(raw)
    composer = profile.composer(capture, None)
    limit = composer.top if composer is not None else len(capture.lines)
    key = needle(text)
    if not key:
        return False
    hits = [
        i
        for i in range(limit)
        if key in " ".join(capture.lines[i].text.split()) or FOLDED.search(capture.lines[i].text)
    ]
    if not hits:
        return False
    observation = classify_capture(profile, capture)
    if observation.state in (ScreenState.BUSY, ScreenState.DIALOG):
        return True
    after = capture.texts[hits[-1] + 1 : len(capture.lines)]
    finished = any(profile.finished.search(line) for line in after)
    return finished or (profile is PROMPT and composer is not None)
