# `harness selfedit` lets a write through only when the target matches an `Edit(<glob>)` rule of the
# project's .claude/settings.json, and those rules are written for minimatch (with `dot: true`). A rule
# that matched more here than in minimatch would widen the allowlist, so this is a small, pure matcher of
# minimatch's semantics for the features such rules use (`*`, `**`, `?`, `[...]`, `{a,b}`, dot files),
# tested against minimatch's own cases; every other feature (extglobs, negation, comments, POSIX classes,
# brace sequences) is refused with a reason rather than guessed at. Matching is a linear-time wildcard walk
# per path segment, never a regular expression, so no rule can make it backtrack without end.
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# `**` as a whole segment: any number of segments.
GLOBSTAR: Final = "**"
_EXTGLOB: Final = re.compile(r"[?*+@!]\(")
_POSIX_CLASS: Final = re.compile(r"\[:[a-z]+:\]")
# minimatch expands braces only when some `{` is followed by a `}` with no `{` between them.
_BRACE_GATE: Final = re.compile(r"\{[^{\n]*\}")
_SEQUENCE: Final = re.compile(r"-?\d+\.\.-?\d+(\.\.-?\d+)?|[a-zA-Z]\.\.[a-zA-Z](\.\.-?\d+)?")


class Unsupported(ValueError):
    """A pattern uses a glob feature this matcher does not implement; the message names it."""


@dataclass(frozen=True, slots=True)
class CharClass:
    """`[...]`: single characters and inclusive ranges, maybe negated. No member at all (every range
    reversed, like `[z-a]`) matches nothing, negated or not, as in minimatch."""

    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def admits(self, char: str) -> bool:
        if not self.ranges:
            return False
        inside = any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated


# One token of a segment: a literal character, "?" (any one character), "*" (any run) or a CharClass.
ANY: Final = "?"
STAR: Final = "*"
Token = tuple[str, str] | CharClass  # ("lit", char) | ("?", "") | ("*", "")


@dataclass(frozen=True, slots=True)
class Segment:
    """One `/`-separated part of a pattern. `magic` is false for a plain literal."""

    tokens: tuple[Token, ...]
    magic: bool
    starts_with_dot: bool

    def matches(self, part: str, dot: bool) -> bool:
        if self.magic:
            # A wildcard never yields an empty segment, `.` or `..`; and without `dot` a segment that
            # does not itself start with `.` never matches a dot file.
            if part in ("", ".", ".."):
                return False
            if not dot and part.startswith(".") and not self.starts_with_dot:
                return False
        return _match_tokens(self.tokens, part)


def _match_tokens(tokens: tuple[Token, ...], text: str) -> bool:
    """The classic wildcard walk: on a mismatch, let the last `*` take one more character."""
    t = s = 0
    star_t, star_s = -1, 0
    while s < len(text):
        token = tokens[t] if t < len(tokens) else None
        if token is not None and not isinstance(token, CharClass) and token[0] == STAR:
            star_t, star_s = t, s
            t += 1
            continue
        if token is not None and _one(token, text[s]):
            t += 1
            s += 1
            continue
        if star_t < 0:
            return False
        star_s += 1
        s = star_s
        t = star_t + 1
    return all(not isinstance(token, CharClass) and token[0] == STAR for token in tokens[t:])


def _one(token: Token, char: str) -> bool:
    if isinstance(token, CharClass):
        return token.admits(char)
    kind, value = token
    return kind == ANY or (kind == "lit" and value == char)


def _parse_class(text: str, start: int) -> tuple[CharClass, int] | None:
    """The class opening at `text[start]` (a `[`) and the index after it, or None when it never closes
    (then the `[` is a literal). Follows minimatch: `!` or `^` first negates, `]` first is a member, `\\`
    escapes, `a-z` is a range (dropped when reversed), a `-` first or last is a member."""
    i = start + 1
    negated = False
    if i < len(text) and text[i] in "!^":
        negated = True
        i += 1
    ranges: list[tuple[str, str]] = []
    first = True
    range_start: str | None = None
    while i < len(text):
        char = text[i]
        if char == "]" and not first:
            return CharClass(negated, tuple(ranges)), i + 1
        first = False
        if char == "\\" and i + 1 < len(text):
            i += 1
            char = text[i]
        i += 1
        if range_start is not None:
            if char >= range_start:
                ranges.append((range_start, char))
            range_start = None
        elif text.startswith("-]", i):
            ranges.extend(((char, char), ("-", "-")))
            i += 1
        elif text.startswith("-", i):
            range_start = char
            i += 1
        else:
            ranges.append((char, char))
    return None


def _segment(text: str) -> Segment:
    tokens: list[Token] = []
    magic = False
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            tokens.append(("lit", text[i + 1] if i + 1 < len(text) else "\\"))
            i += 2
        elif char == "*":
            magic = True
            if not tokens or tokens[-1] != (STAR, ""):
                tokens.append((STAR, ""))
            i += 1
        elif char == "?":
            magic = True
            tokens.append((ANY, ""))
            i += 1
        elif char == "[" and (parsed := _parse_class(text, i)) is not None:
            found, i = parsed
            if not found.negated and len(found.ranges) == 1 and found.ranges[0][0] == found.ranges[0][1]:
                tokens.append(("lit", found.ranges[0][0]))  # `[*]` is how a glob spells a literal `*`
            else:
                magic = True
                tokens.append(found)
        else:
            tokens.append(("lit", char))
            i += 1
    return Segment(tuple(tokens), magic, tokens[:1] == [("lit", ".")])


def _level_one(parts: list[str]) -> list[str]:
    """minimatch's default optimisation: adjacent `**` are one, and `p/..` goes away for a `p` that is not
    `..`, `.`, `**` or empty."""
    kept: list[str] = []
    for part in parts:
        previous = kept[-1] if kept else ""
        if part == GLOBSTAR and previous == GLOBSTAR:
            continue
        if part == ".." and previous not in ("", ".", "..", GLOBSTAR):
            kept.pop()
            continue
        kept.append(part)
    return kept or [""]


def _split_top(body: str) -> list[str]:
    """`body` split at its commas outside nested braces."""
    parts, depth, current = [], 0, ""
    for char in body:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current += char
    return [*parts, current]


def _closing(text: str, start: int) -> int:
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise Unsupported("an unbalanced brace")


def _expand(text: str) -> list[str]:
    """Every alternative of the `{a,b}` groups of `text`, nested ones included, left to right."""
    start = text.find("{")
    if start < 0:
        if "}" in text:
            raise Unsupported("an unbalanced brace")
        return [text]
    if "}" in text[:start]:
        raise Unsupported("an unbalanced brace")
    end = _closing(text, start)
    body = text[start + 1 : end]
    if _SEQUENCE.fullmatch(body):
        raise Unsupported("a brace sequence ({1..3})")
    options = _split_top(body)
    if len(options) < 2:
        raise Unsupported("a brace group without a comma")
    if text[:start].endswith("$"):
        raise Unsupported("a `${` brace group")
    rests = _expand(text[end + 1 :])
    return [
        text[:start] + option + rest for choice in options for option in _expand(choice) for rest in rests
    ]


def braces(pattern: str) -> list[str]:
    """The patterns `pattern` stands for after brace expansion (itself when it has no brace group).
    Like brace-expansion, empty alternatives are dropped at the top level."""
    if not _BRACE_GATE.search(pattern):
        return [pattern]
    if "\\" in pattern:
        raise Unsupported("a backslash escape in a pattern with braces")
    return [alternative for alternative in _expand(pattern) if alternative]


@dataclass(frozen=True, slots=True)
class Glob:
    """A compiled pattern: any of its brace alternatives, each a list of segments or GLOBSTAR."""

    pattern: str
    dot: bool
    alternatives: tuple[tuple[Segment | None, ...], ...]  # None is GLOBSTAR

    def matches(self, path: str) -> bool:
        """Whether `path` (`/`-separated, as minimatch reads it) matches."""
        parts = path.split("/")
        return any(self._match(alternative, parts) for alternative in self.alternatives)

    def _match(self, pattern: tuple[Segment | None, ...], parts: list[str]) -> bool:
        if not pattern:
            # Out of pattern: only a trailing slash of the path may be left (`a/*` matches `a/b/`).
            return not parts or parts == [""]
        if not parts:
            return False
        head, rest = pattern[0], pattern[1:]
        if head is not None:
            return head.matches(parts[0], self.dot) and self._match(rest, parts[1:])
        if not rest:
            # A trailing `**` takes what is left, at least one segment.
            return all(self._swallows(part) for part in parts)
        for index, part in enumerate(parts):
            if self._match(rest, parts[index:]):
                return True
            if not self._swallows(part):
                return False
        return False

    def _swallows(self, part: str) -> bool:
        """Whether `**` may pass over `part`: never `.` or `..`, dot files only with `dot`."""
        return part not in (".", "..") and (self.dot or not part.startswith("."))


def compile_glob(pattern: str, *, dot: bool = True) -> Glob:
    """`pattern` compiled with minimatch's semantics (`dot` as its option of that name; Edit() rules use
    `dot: true`). Raises Unsupported for a feature this matcher refuses."""
    if pattern.startswith("#"):
        raise Unsupported("a comment (a pattern starting with #)")
    if pattern.startswith("!"):
        raise Unsupported("negation (a pattern starting with !)")
    if _EXTGLOB.search(pattern):
        raise Unsupported("an extglob (+(...), *(...), ?(...), @(...), !(...))")
    if _POSIX_CLASS.search(pattern):
        raise Unsupported("a POSIX character class ([:alpha:])")
    alternatives = []
    for alternative in braces(pattern):
        parts = _level_one(alternative.split("/"))
        alternatives.append(tuple(None if part == GLOBSTAR else _segment(part) for part in parts))
    return Glob(pattern, dot, tuple(alternatives))
