# Issue 19: core/terminal_text.py at the core: `one_line`, the form a notice takes for a prompt without
# bracketed paste, had no test of its own, and the defaults of `terminal_safe` and `is_terminal_safe` (line
# breaks admitted, tabs not) were only exercised through callers that pass them explicitly.
from __future__ import annotations

import pytest

from harness.core.terminal_text import (
    LINE_JOIN,
    ONE_LINE_EXCERPT,
    is_terminal_safe,
    one_line,
    terminal_safe,
)

MARK = LINE_JOIN + ONE_LINE_EXCERPT


def test_by_default_line_breaks_pass_and_tabs_are_shown() -> None:
    assert terminal_safe("a\nb\tc") == "a\nb^Ic"
    assert terminal_safe("a\r\nb") == "a\nb"
    assert terminal_safe("a\r\nb", line_breaks=False) == "a^M^Jb"
    assert is_terminal_safe("a\nb") and not is_terminal_safe("a\tb")


def test_a_text_that_fits_is_its_lines_joined_visibly() -> None:
    assert one_line("ask\nreply", 100) == "ask \u2424 reply"
    assert one_line("ask\nreply", len("ask \u2424 reply")) == "ask \u2424 reply"  # exactly at the limit
    assert one_line("a\x1b[31mb", 100) == "a\u241b[31mb"  # terminal-safe first


def test_a_long_text_keeps_its_short_last_line_and_says_where_it_cut() -> None:
    """The last line says how to answer: kept whole when it takes at most half the limit."""
    last = "x" * 100
    out = one_line("a" * 300 + "\n" + last, 200)
    room = 200 - len(MARK) - len(LINE_JOIN + last)
    assert out == "a" * room + MARK + LINE_JOIN + last and len(out) == 200


def test_a_last_line_over_half_the_limit_is_cut_with_the_rest() -> None:
    last = "x" * 101
    out = one_line("a" * 300 + "\n" + last, 200)
    assert out == ("a" * 300 + LINE_JOIN + last)[: 200 - len(MARK)] + MARK


def test_the_middle_lines_are_kept_in_the_head() -> None:
    out = one_line("first\nsecond\n" + "m" * 300 + "\nlast", 120)
    tail = LINE_JOIN + "last"
    head = LINE_JOIN.join(["first", "second", "m" * 300])
    assert out == head[: 120 - len(MARK) - len(tail)] + MARK + tail
    assert out.startswith("first \u2424 second \u2424 m")


def test_a_cut_at_a_line_join_leaves_no_dangling_sign() -> None:
    text = "a" * 10 + "\n" + "b" * 300
    limit = len(MARK) + 12  # room for the first line and two characters of the join
    assert one_line(text, limit) == "a" * 10 + MARK


@pytest.mark.parametrize("limit", [1, 10, len(MARK)])
def test_no_room_beside_the_mark_is_the_mark_alone_cut_to_the_limit(limit: int) -> None:
    assert one_line("z" * 500, limit) == ONE_LINE_EXCERPT[:limit]


def test_one_character_of_room_is_kept() -> None:
    assert one_line("z" * 500, len(MARK) + 1) == "z" + MARK


@pytest.mark.parametrize("control", ["\u061c", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069"])
def test_a_bidirectional_control_in_otherwise_printable_text_is_shown_as_its_code_point(control: str) -> None:
    """They reorder or hide what follows (a reader would see another text than the one sent)."""
    assert terminal_safe(f"pay{control}me") == f"pay\\u{ord(control):04x}me"
    assert not is_terminal_safe(f"pay{control}me")
