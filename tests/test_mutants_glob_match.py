# Issue 19: behaviours of core/glob_match.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import re

import pytest

from harness.core.glob_match import Unsupported, compile_glob


def test_a_backslash_ending_an_unclosed_class_is_a_literal() -> None:
    """`[a\\` never closes: the `[` is a literal, and a backslash with nothing after it escapes nothing."""
    glob = compile_glob("[a\\")
    assert glob.matches("[a\\")
    assert not glob.matches("[a")


def test_adjacent_globstars_compile_as_one() -> None:
    """minimatch's optimisation: `**/**` is one `**`, so a run of them cannot multiply the walk's branches."""
    assert compile_glob("a/**/**/**/b").alternatives == compile_glob("a/**/b").alternatives


def test_dot_dot_after_a_dot_segment_is_kept() -> None:
    """`p/..` goes away only for a `p` that is not `.`, `..`, `**` or empty: `./..` stays two segments."""
    glob = compile_glob("./..")
    assert glob.matches("./..")
    assert not glob.matches("")
    assert compile_glob("x/../y").matches("y")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("a}/{b,c}", "an unbalanced brace"),  # a `}` before the first `{`
        ("\\*{a,b}", "a backslash escape in a pattern with braces"),
    ],
)
def test_brace_patterns_this_matcher_cannot_read_are_refused(pattern: str, reason: str) -> None:
    with pytest.raises(Unsupported, match=re.escape(reason)):
        compile_glob(pattern)
