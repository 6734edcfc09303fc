# Peer text is hostile input: a question, an answer, a name or a role may hold bytes that a terminal reads as
# keys (ESC[201~ ends a bracketed paste, ^C interrupts, CR submits, ^U erases the framing) or as screen
# commands (OSC 52 writes the clipboard, OSC 0 the title). This is the one function through which any ledger
# text reaches a terminal or a viewer: what it returns holds only characters a terminal prints as themselves,
# plus the line breaks (and tabs) the caller admits, and every character it removed is shown visibly in its
# place, so a reader still sees that it was there. Pure and total: any `str` in, a safe `str` out.
from __future__ import annotations

from typing import Final

ESCAPE_SIGN: Final = "\u241b"  # ␛, SYMBOL FOR ESCAPE: the byte that starts every control sequence

# Characters that print but reorder or hide what follows (bidirectional overrides, embeddings and isolates,
# the marks): a reader must see that they are there, so they are shown as their code point.
BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


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


def _admitted(char: str, line_breaks: bool, tabs: bool) -> bool:
    if char == "\n":
        return line_breaks
    if char == "\t":
        return tabs
    # isprintable() is False exactly for the categories a terminal does not print as themselves: Cc, Cf,
    # Cs, Co, Cn, Zl, Zp and every space but U+0020.
    return char.isprintable() and char not in BIDI_CONTROLS


def terminal_safe(text: str, *, line_breaks: bool = True, tabs: bool = False) -> str:
    """`text` as a terminal may receive it. A CR LF pair is one line break; any other CR is shown (^M).

    Idempotent, and the identity on text that is already safe (what a desk expects on screen is what it
    pasted)."""
    if text.isprintable() and not BIDI_CONTROLS.intersection(text):
        return text  # the common case, at C speed
    if "\r\n" in text and line_breaks:
        text = text.replace("\r\n", "\n")
    return "".join(char if _admitted(char, line_breaks, tabs) else _visible(char) for char in text)


def is_terminal_safe(text: str, *, line_breaks: bool = True, tabs: bool = False) -> bool:
    """What the terminal adapter checks before any write (defence in depth): nothing to remove."""
    return all(_admitted(char, line_breaks, tabs) for char in text)


__all__ = ["BIDI_CONTROLS", "ESCAPE_SIGN", "is_terminal_safe", "terminal_safe"]
