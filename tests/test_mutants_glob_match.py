# Issue 19: behaviours of core/glob_match.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import re

import pytest

from harness.core.glob_match import Unsupported, braces, compile_glob


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


# --- S7: the survivors of a full run over the module. Each expectation below is minimatch 10's own answer
# for the pattern and path (`dot: true`, as Edit() rules use it, unless a case says otherwise).


def test_a_negated_class_with_no_member_matches_nothing() -> None:
    """CharClass: "No member at all (every range reversed, like `[z-a]`) matches nothing, negated or not,
    as in minimatch." Negating an empty set must not turn it into "any character"."""
    glob = compile_glob("[!z-a]")
    for path in ("b", "z", "a", "!"):
        assert not glob.matches(path), path


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("[!a]", "!", True),
    ("[!a]", "a", False),
    ("[^a]", "^", True),
    ("[!]]", "!", True),  # the `]` right after the `!` is the first member, not the end
    ("[!]]", "]", False),
])  # fmt: skip
def test_the_negating_mark_is_not_also_a_member(pattern: str, path: str, expected: bool) -> None:
    """_parse_class: "`!` or `^` first negates, `]` first is a member": the mark itself is consumed."""
    assert compile_glob(pattern).matches(path) is expected


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("[\\]]", "]", True),  # `\]` is a member, the second `]` closes
    ("[\\]]", "\\]", False),
    ("[\\]", "[]", True),  # the escaped `]` cannot close, so the `[` is a literal
    ("[\\]", "\\", False),
])  # fmt: skip
def test_a_backslash_in_a_class_escapes_the_next_character(pattern: str, path: str, expected: bool) -> None:
    """_parse_class: "`\\` escapes": an escaped `]` is a member and never closes the class."""
    assert compile_glob(pattern).matches(path) is expected


def test_a_dash_last_in_a_class_is_the_dash_alone() -> None:
    """_parse_class: "a `-` first or last is a member": that member is `-` and nothing below it."""
    glob = compile_glob("[x-]")
    assert glob.matches("x") and glob.matches("-")
    for path in ("+", "!", " ", "a"):
        assert not glob.matches(path), path


def test_a_segment_made_of_classes_is_a_wildcard_that_never_yields_a_dot_segment() -> None:
    """Segment.matches: "A wildcard never yields an empty segment, `.` or `..`; and without `dot` a segment
    that does not itself start with `.` never matches a dot file." A class of several members is a wildcard:
    `[.a][.a]` must not become a way to write `..` into an Edit() rule."""
    assert not compile_glob("[.a]").matches(".")
    assert not compile_glob("[.a][.a]").matches("..")
    assert not compile_glob("x/[.a][.a]/y").matches("x/../y")
    assert compile_glob("[.a]").matches("a")
    assert compile_glob("[.a]x").matches(".x")
    assert not compile_glob("[.a]x", dot=False).matches(".x")


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("../a", "../a", True),  # a leading `..` has no segment before it to cancel
    ("../..", "../..", True),  # nor does a `..` after a `..`
    ("../../x", "x", False),
    ("/../x", "/../x", True),  # nor a `..` after the empty segment of a leading `/`
    ("/../x", "x", False),
    ("a/..", "", True),  # everything cancelled: the empty path, not some other segment
    ("a/..", "a", False),
])  # fmt: skip
def test_dot_dot_cancels_only_a_segment_that_is_not_dots_globstar_or_empty(
    pattern: str, path: str, expected: bool
) -> None:
    """_level_one: "`p/..` goes away for a `p` that is not `..`, `.`, `**` or empty"."""
    assert compile_glob(pattern).matches(path) is expected


def test_a_brace_group_splits_at_its_commas_after_a_nested_group_too() -> None:
    """_split_top: "`body` split at its commas outside nested braces": a comma after a nested group that has
    closed is outside it again."""
    assert braces("{a{b,c},d}") == ["ab", "ac", "d"]
    glob = compile_glob("{a{b,c},d}")
    assert [path for path in ("ab", "ac", "d", "a{b,c}", "a") if glob.matches(path)] == ["ab", "ac", "d"]
