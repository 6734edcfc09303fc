# core.glob_match against minimatch's own cases: the file lists and expected matches below are those of
# minimatch's test/patterns.js (github.com/isaacs/minimatch), restated as Python, for the options Edit()
# rules can use (`dot`, default false there) and the features the matcher implements; the cases of that
# file that use a refused feature (extglobs, negation, comments, POSIX classes, braces without a comma or
# with escapes) are checked to be refused.
from __future__ import annotations

import pytest

from harness.core.glob_match import Unsupported, braces, compile_glob

BASH = ["a", "b", "c", "d", "abc", "abd", "abe", "bb", "bcd", "ca", "cb", "dd", "de", "bdir/", "bdir/cfile"]
PUSHED = [*BASH, "a-b", "aXb", ".x", ".y", "a*b/", "a*b/ooo"]
MAN = [*PUSHED, "man/", "man/man1/", "man/man1/bash.1"]
ISSUE5 = [
    "a/b/.x/c",
    "a/b/.x/c/d",
    "a/b/.x/c/d/e",
    "a/b/.x",
    "a/b/.x/",
    "a/.x/b",
    ".x",
    ".x/",
    ".x/a/",
    ".x/a/b",
    "a/.x/b/.x/c",
    ".x/.x/",
    ".x/.y",
]
DOTS = ["a/./b", "a/../b", "a/c/b", "a/.d/b"]
ISSUE387 = [".a", ".a.js", ".js", "a", "a.js", "js"]
OPTIMIZED = [".a", ".a.js", ".js", "a", "a.js", "js", "JS", "a.JS", ".a.JS", ".JS", ".", ".."]
PARENTS = ["x/y/z/a/b/c", "x/y/a/b/c", "x/z/a/b/c", "x/a/b/c", "a/b/c"]
WORDS = ["åéîøü", "aeiou", "fffff", "0f7fa", "99999"]
EXTS = ["x.y", "a.y", "x.z", "a.z", "xy", "ay", "x", "a", ".y", ".z"]

# (pattern, dot, files, the files minimatch matches). A `nonull` case of patterns.js is listed with the
# files it really matches (none): nonull only echoes the pattern back when nothing matched.
CASES: list[tuple[str, bool, list[str], list[str]]] = [
    ("a*", False, BASH, ["a", "abc", "abd", "abe"]),
    ("X*", False, BASH, []),
    ("\\*", False, BASH, []),
    ("\\**", False, BASH, []),
    ("\\*\\*", False, BASH, []),
    ("b*/", False, BASH, ["bdir/"]),
    ("c*", False, BASH, ["c", "ca", "cb"]),
    ("{c*,./c*}", False, BASH, ["c", "ca", "cb"]),
    ("**", False, BASH, BASH),
    ("**/**/**", False, BASH, BASH),
    ("\\.\\./*/", False, BASH, []),
    ("s/\\..*//", False, BASH, []),
    ("/^root:/{s/^[^:]*:[^:]*:([^:]*).*$/\\1/", False, BASH, []),  # a `{` never closed is a literal
    ("/^root:/{s/^[^:]*:[^:]*:([^:]*).*$/\u0001/", False, BASH, []),
    ("[a-c]b*", False, BASH, ["abc", "abd", "abe", "bb", "cb"]),
    ("[a-y]*[^c]", False, BASH, ["abd", "abe", "bb", "bcd", "bdir/", "ca", "cb", "dd", "de"]),
    ("a*[^c]", False, BASH, ["abd", "abe"]),
    ("a[X-]b", False, [*BASH, "a-b", "aXb"], ["a-b", "aXb"]),
    ("[^a-c]*", False, [*BASH, "a-b", "aXb", ".x", ".y"], ["d", "dd", "de"]),
    ("a\\*b/*", False, PUSHED, ["a*b/ooo"]),
    ("a\\*?/*", False, PUSHED, ["a*b/ooo"]),
    ("*\\\\!*", False, ["echo !7"], []),
    ("*\\!*", False, ["echo !7"], ["echo !7"]),
    ("*.\\*", False, ["r.*"], ["r.*"]),
    ("a[b]c", False, PUSHED, ["abc"]),
    ("a[\\b]c", False, PUSHED, ["abc"]),
    ("a?c", False, PUSHED, ["abc"]),
    ("a\\*c", False, ["abc"], []),
    ("", False, [""], [""]),
    ("*/man*/bash.*", False, MAN, ["man/man1/bash.1"]),
    ("man/man1/bash.1", False, MAN, ["man/man1/bash.1"]),
    ("a***c", False, ["abc"], ["abc"]),
    ("a*****?c", False, ["abc"], ["abc"]),
    ("?*****??", False, ["abc"], ["abc"]),
    ("*****??", False, ["abc"], ["abc"]),
    ("?*****?c", False, ["abc"], ["abc"]),
    ("?***?****c", False, ["abc"], ["abc"]),
    ("?***?****?", False, ["abc"], ["abc"]),
    ("?***?****", False, ["abc"], ["abc"]),
    ("*******c", False, ["abc"], ["abc"]),
    ("*******?", False, ["abc"], ["abc"]),
    ("a*cd**?**??k", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("a**?**cd**?**??k", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("a**?**cd**?**??k***", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("a**?**cd**?**??***k", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("a**?**cd**?**??***k**", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("a****c**?**??*****", False, ["abcdecdhjk"], ["abcdecdhjk"]),
    ("[-abc]", False, ["-"], ["-"]),
    ("[abc-]", False, ["-"], ["-"]),
    ("\\", False, ["\\"], ["\\"]),
    ("[\\\\]", False, ["\\"], ["\\"]),
    ("[[]", False, ["["], ["["]),
    ("[", False, ["["], ["["]),
    ("[*", False, ["[abc"], ["[abc"]),
    ("[]]", False, ["]"], ["]"]),
    ("[]-]", False, ["]"], ["]"]),
    ("[a-z]", False, ["p"], ["p"]),
    ("??**********?****?", False, ["abc"], []),
    ("??**********?****c", False, ["abc"], []),
    ("?************c****?****", False, ["abc"], []),
    ("*c*?**", False, ["abc"], []),
    ("a*****c*?**", False, ["abc"], []),
    ("a********???*******", False, ["abc"], []),
    ("[]", False, ["a"], []),
    ("[abc", False, ["["], []),
    ("{/*,*}", False, ["/asdf/asdf/asdf"], []),
    ("{/?,*}", False, ["/a", "/b/b", "/a/b/c", "bb"], ["/a", "bb"]),
    ("**", False, ["a/b", "a/.d", ".a/.d"], ["a/b"]),
    ("a/*/b", True, DOTS, ["a/c/b", "a/.d/b"]),
    ("a/.*/b", True, DOTS, ["a/.d/b"]),
    ("a/*/b", False, DOTS, ["a/c/b"]),
    ("a/.*/b", False, DOTS, ["a/.d/b"]),
    ("**", True, [".a/.d", "a/.d", "a/b"], [".a/.d", "a/.d", "a/b"]),
    ("[!a*", False, ["[!ab", "[ab"], ["[!ab"]),
    ("[#a*", False, ["[#ab", "[ab"], ["[#ab"]),
    (
        "**/.x/**",
        False,
        ISSUE5,
        [".x/", ".x/a/", ".x/a/b", "a/.x/b", "a/b/.x/", "a/b/.x/c", "a/b/.x/c/d", "a/b/.x/c/d/e"],
    ),
    (".x/**/*", False, ISSUE5, [".x/a/", ".x/a/b"]),
    (".x/*/**", False, ISSUE5, [".x/a/", ".x/a/b"]),
    (".x/**/**/*", False, ISSUE5, [".x/a/", ".x/a/b"]),
    (".x/**/*/**", False, ISSUE5, [".x/a/", ".x/a/b"]),
    (".x/*/**/**", False, ISSUE5, [".x/a/", ".x/a/b"]),
    (".x/**/*", True, ISSUE5, [".x/a/", ".x/a/b", ".x/.x/", ".x/.y"]),
    (".x/*/**", True, ISSUE5, [".x/a/", ".x/a/b", ".x/.x/"]),
    (".x/**/**/*", True, ISSUE5, [".x/a/", ".x/a/b", ".x/.x/", ".x/.y"]),
    (".x/**/*/**", True, ISSUE5, [".x/a/", ".x/a/b", ".x/.x/"]),
    (".x/*/**/**", True, ISSUE5, [".x/a/", ".x/a/b", ".x/.x/"]),
    ("[z-a]", False, ISSUE5, []),
    ("a/[2015-03-10T00:23:08.647Z]/z", False, ISSUE5, []),
    ("a/[2015-03-10T00:23:08.647Z\\]/z", False, ISSUE5, []),
    ("[a-0][a-\u0100]", False, ISSUE5, []),
    ("[\\z-a]", False, ISSUE5, []),
    ("[\\b-a]", False, ISSUE5, []),
    ("[]+*]", False, ISSUE5, []),
    ("[z\\-a]", False, ISSUE5, []),
    ("[\\-\\]]", False, ISSUE5, []),
    ("[a-b-c]", False, ISSUE5, []),
    ("å", False, ["å"], ["å"]),
    ("Å", False, ["å"], []),
    ("Å", False, ["Å"], ["Å"]),
    ("å", False, ["Å"], []),
    (".*", False, ISSUE387, [".a", ".a.js", ".js"]),
    ("*", True, ISSUE387, ISSUE387),
    ("?", False, OPTIMIZED, ["a"]),
    ("??", False, OPTIMIZED, ["js", "JS"]),
    ("??", True, OPTIMIZED, ["js", "JS", ".a"]),
    ("???", False, OPTIMIZED, []),
    ("???", True, OPTIMIZED, [".js", ".JS"]),
    ("?.js", False, OPTIMIZED, ["a.js"]),
    ("?js", False, OPTIMIZED, []),
    ("?.js", True, OPTIMIZED, ["a.js"]),
    ("?js", True, OPTIMIZED, [".js"]),
    ("*.js", False, OPTIMIZED, ["a.js"]),
    ("*js", False, OPTIMIZED, ["a.js", "js"]),
    ("*.js", True, OPTIMIZED, ["a.js", ".a.js", ".js"]),
    ("*.*", False, OPTIMIZED, ["a.js", "a.JS"]),
    ("*.*", True, OPTIMIZED, [".a", ".a.js", ".js", "a.js", "a.JS", ".a.JS", ".JS"]),
    (".*", False, OPTIMIZED, [".a", ".a.js", ".js", ".a.JS", ".JS"]),
    ("*", False, OPTIMIZED, ["a", "a.js", "js", "a.JS", "JS"]),
    ("*", True, OPTIMIZED, [".a", ".a.js", ".js", "a", "a.js", "js", "a.JS", ".a.JS", ".JS", "JS"]),
    ("x/*/../a/b/c", False, PARENTS, ["x/a/b/c"]),
    ("x/z/../*/a/b/c", False, PARENTS, ["x/y/a/b/c", "x/z/a/b/c"]),
    ("x/*/../../a/b/c", False, PARENTS, ["a/b/c"]),
    ("[z-a]*", False, WORDS, []),
    ("[z-af]*", False, WORDS, ["fffff"]),
    ("[fz-a]*", False, WORDS, ["fffff"]),
    ("[f-gz-a]*", False, WORDS, ["fffff"]),
    ("[f-fz-a]*", False, WORDS, ["fffff"]),
    ("*.y", False, EXTS, ["x.y", "a.y"]),
    ("*.z", True, EXTS, ["x.z", "a.z", ".z"]),
]

# Cases of patterns.js (with default options) that use a feature the matcher refuses.
REFUSED = [
    "*(a/b)",
    "*(a|{b),c)}",
    "+(a|*\\|c\\\\|d\\\\\\|e\\\\\\\\|f\\\\\\\\\\|g",
    "*(a|{b,c})",
    "{a,*(b|c,d)}",
    "{a,*(b|{c,d})}",
    "*(a|{b|c,c})",
    "!a*",
    "!!a*",
    "!\\!a*",
    "*.!(js)",
    "# ignore this",
    "+(a)!(b)+(c)",
    "@(*|.*)",
    "@(.*|*)",
    "@(.*)",
    "@(js|.*)",
    "@(a|a[(])b",
    "[[:alpha:]][[:alpha:]][[:alpha:]][[:alpha:]][[:alpha:]]",
    "[[:ascii:]][[:ascii:]][[:ascii:]][[:ascii:]][[:ascii:]]",
    "[a-[:alpha:]*]",
    "[[:xdigit:]][[:xdigit:]]???",
    "[[:graph:][:digit:]]f*",
    "+()",
    "+()*(x|a)",
    "+(x|a[^)]y)",
    "?(x-!(y)|z)",
    "*(?)",
    "+(a|!(b))",
    "+(a|.)",
]


@pytest.mark.parametrize(("pattern", "dot", "files", "expected"), CASES)
def test_minimatch_cases(pattern: str, dot: bool, files: list[str], expected: list[str]) -> None:
    glob = compile_glob(pattern, dot=dot)
    assert sorted(f for f in files if glob.matches(f)) == sorted(expected)


@pytest.mark.parametrize("pattern", REFUSED)
def test_refused_features_are_refusals_not_guesses(pattern: str) -> None:
    with pytest.raises(Unsupported):
        compile_glob(pattern)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("a/{1..3}", "brace sequence"),
        ("a/{b}", "without a comma"),
        ("a/{b,{c}", "unbalanced"),
        ("a/{b,c}}", "unbalanced"),
        ("a/${b,c}", "${"),
    ],
)
def test_refused_brace_forms_name_the_feature(pattern: str, reason: str) -> None:
    with pytest.raises(Unsupported, match=reason.replace("$", r"\$").replace("{", r"\{")):
        compile_glob(pattern)


def test_braces_expand_nested_groups_in_order_and_drop_empty_top_alternatives() -> None:
    assert braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert braces("{,x}") == ["x"]
    assert braces("a/{b,}/c") == ["a/b/c", "a//c"]
    # minimatch expands only a `{` closed by a `}` with no `{` between: otherwise the braces are literal.
    assert braces("a/{b,c") == ["a/{b,c"]
    assert compile_glob("a/b,c}").matches("a/b,c}")


# The shapes Edit() rules take, with dot: true (the option selfedit uses).
EDIT_RULES = [
    (".claude/**", ".claude/skills/x/SKILL.md", True),
    (".claude/**", ".claude/.hidden", True),
    (".claude/**", ".claude", False),
    (".claude/**", "README.md", False),
    (".claude/**", "src/.claude/a", False),
    ("**/.claude/**", "src/.claude/a", True),
    (".claude/skills/*.md", ".claude/skills/.x.md", True),
    (".claude/skills/*.md", ".claude/skills/sub/x.md", False),
    (".claude/{agents,skills}/**", ".claude/agents/a.md", True),
    (".claude/{agents,skills}/**", ".claude/commands/a.md", False),
    ("docs/?.md", "docs/a.md", True),
    ("docs/?.md", "docs/ab.md", False),
    ("docs/[a-c]*.md", "docs/b1.md", True),
    ("docs/[!a-c]*.md", "docs/b1.md", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), EDIT_RULES)
def test_edit_rule_shapes_with_dot_true(pattern: str, path: str, expected: bool) -> None:
    assert compile_glob(pattern).matches(path) is expected


def test_a_long_path_against_many_stars_stays_linear() -> None:
    """A hostile rule cannot make matching backtrack without end: 30 stars against a 10,000-character
    segment that almost matches finishes (a backtracking regex would not)."""
    glob = compile_glob("*a" * 30 + "b")
    assert not glob.matches("a" * 10_000)
