# Peer text is hostile input: a question, an answer, a name or a role may hold bytes that a terminal reads as
# keys (ESC[201~ ends a bracketed paste, ^C interrupts, CR submits, ^U erases the framing) or as screen
# commands (OSC 52 writes the clipboard, OSC 0 the title). This is the one function through which any ledger
# text reaches a terminal or a viewer: what it returns holds only characters a terminal prints as themselves,
# plus the line breaks (and tabs) the caller admits, and every character it removed is shown visibly in its
# place, so a reader still sees that it was there (an invisible character too). Pure and total: any `str`
# in, a safe `str` out.
from __future__ import annotations

from typing import Final

ESCAPE_SIGN: Final = "\u241b"  # ␛, SYMBOL FOR ESCAPE: the byte that starts every control sequence

# Characters that print but reorder or hide what follows (bidirectional overrides, embeddings and isolates,
# the marks): a reader must see that they are there, so they are shown as their code point.
BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

# Characters that print as nothing at all: Unicode's default-ignorable code points that are not format
# characters (variation selectors, the combining grapheme joiner, the Mongolian variation selectors, the
# Hangul fillers, the Khmer inherent vowels) and the blank braille pattern. A payload spelled in them, one
# per byte after a harmless word ("emoji smuggling"), reaches an agent that reads it while a human sees the
# word only; so they too are shown as their code point.
INVISIBLE: Final = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u2800\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
SHOWN_AS_CODE_POINTS: Final = BIDI_CONTROLS | INVISIBLE  # printable by isprintable(), removed all the same
# Text (U+FE0E) and emoji (U+FE0F) presentation: admitted once, right after a non-ASCII symbol (`_admitted`).
EMOJI_PRESENTATION: Final = frozenset("\ufe0e\ufe0f")


def _visible(char: str) -> str:
    """How a removed character is shown: ␛ for ESC, caret notation for the other C0 bytes and DEL (^C, ^M,
    ^@, ^?), a code point for the rest (C1 controls, format characters, separators, unassigned, private)."""
    code = ord(char)
    if char == "\x1b":
        return ESCAPE_SIGN
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _admitted(char: str, before: str, line_breaks: bool, tabs: bool) -> bool:
    """Whether `char`, after `before` (the character ahead of it, "" at the start), prints as itself."""
    if char == "\n":
        return line_breaks
    if char == "\t":
        return tabs
    if char in EMOJI_PRESENTATION:
        # One presentation selector right after a symbol draws it as an emoji (⚠️, ❤️): kept. Anywhere
        # else (after a letter, another selector, nothing) it hides, so it is shown like the others.
        return before > "\x7f" and before.isprintable() and before not in SHOWN_AS_CODE_POINTS
    # isprintable() is False exactly for the categories a terminal does not print as themselves: Cc, Cf,
    # Cs, Co, Cn, Zl, Zp and every space but U+0020.
    return char.isprintable() and char not in SHOWN_AS_CODE_POINTS


def _admitted_all(text: str, line_breaks: bool, tabs: bool) -> list[bool]:
    return [_admitted(char, text[i - 1] if i else "", line_breaks, tabs) for i, char in enumerate(text)]


def terminal_safe(text: str, *, line_breaks: bool = True, tabs: bool = False) -> str:
    """`text` as a terminal may receive it. A CR LF pair is one line break; any other CR is shown (^M).

    Idempotent, and the identity on text that is already safe (what a desk expects on screen is what it
    pasted)."""
    if text.isprintable() and SHOWN_AS_CODE_POINTS.isdisjoint(text):
        return text  # the common case, at C speed
    if "\r\n" in text and line_breaks:
        text = text.replace("\r\n", "\n")
    kept = _admitted_all(text, line_breaks, tabs)
    return "".join(char if ok else _visible(char) for char, ok in zip(text, kept, strict=True))


def is_terminal_safe(text: str, *, line_breaks: bool = True, tabs: bool = False) -> bool:
    """What the terminal adapter checks before any write (defence in depth): nothing to remove."""
    return all(_admitted_all(text, line_breaks, tabs))


# A prompt that knows no bracketed paste (Grok CLI) cannot take a line break in a paste: it keeps one as a
# carriage return that hides the draft's start on screen, and one that arrives alone is Enter. So a notice
# reaches it on one line, its line breaks shown as ␤ (SYMBOL FOR NEWLINE, beside ␛) where they were.
LINE_SIGN: Final = "\u2424"
LINE_JOIN: Final = f" {LINE_SIGN} "
ONE_LINE_EXCERPT: Final = "[... excerpt; full text: inbox or status ID (the id above) with your team command]"


# Each line someone else wrote starts with this mark where it is shown inside harness's own framing (a
# notice's `[team …]` head and `Answer with:` tail, the CLI's `note … from …` header), so that no line of it
# can pass for that framing: a reader sees where the other party's words begin and end.
QUOTE: Final = "> "


def quoted(text: str) -> str:
    """`text` as quoted lines: QUOTE before each of them (a CR LF stays one line break)."""
    return QUOTE + text.replace("\n", "\n" + QUOTE)


def without_line_signs(text: str) -> str:
    """`text` with each ␤ shown as its code point: in the one-line form a ␤ stands for a line break, so one
    that a peer typed would pass for one (and for the quoting after it). For peer text, before the framing
    is added: `one_line` itself must stay idempotent over its own ␤."""
    return text.replace(LINE_SIGN, _visible(LINE_SIGN))


def one_line(text: str, limit: int) -> str:
    """`text` terminal-safe on one line of at most `limit` characters: its lines joined by LINE_JOIN. A longer
    one keeps its first lines and its last (a notice's last line says how to answer, or that it is peer
    context), cuts what is between, and says so where it cut. Nothing in the result is a line break."""
    lines = terminal_safe(text).split("\n")
    joined = LINE_JOIN.join(lines)
    if len(joined) <= limit:
        return joined
    tail = LINE_JOIN + lines[-1] if len(lines) > 1 and len(lines[-1]) <= limit // 2 else ""
    head = LINE_JOIN.join(lines[:-1]) if tail else joined
    mark = LINE_JOIN + ONE_LINE_EXCERPT
    room = limit - len(mark) - len(tail)
    if room <= 0:
        return ONE_LINE_EXCERPT[:limit]
    return head[:room].rstrip(f" {LINE_SIGN}") + mark + tail


__all__ = [
    "BIDI_CONTROLS",
    "EMOJI_PRESENTATION",
    "INVISIBLE",
    "SHOWN_AS_CODE_POINTS",
    "ESCAPE_SIGN",
    "LINE_JOIN",
    "LINE_SIGN",
    "ONE_LINE_EXCERPT",
    "is_terminal_safe",
    "one_line",
    "terminal_safe",
    "without_line_signs",
]
