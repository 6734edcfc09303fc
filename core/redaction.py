# Secrets must not reach what the harness writes for others to read (traces, logs, exports, a session's
# output), and the writer cannot know which strings are secrets by looking. Two layers decide: the values of
# an allowlist of environment variables (passed in as a mapping: core reads no environment) and the shapes of
# the credentials this harness handles. Every occurrence of a detected secret is replaced whole, even where
# two detections overlap, so no character of a detected secret survives beside a marker. The rules are
# spec/trace-v1.md's tables.
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

DEFAULT_ENV_VARS: Final = ("ANTHROPIC_API_KEY", "GH_TOKEN", "GITHUB_TOKEN")
ENV_VARS_VARIABLE: Final = "HARNESS_REDACTION_ENV_VARS"  # NAME1,NAME2: replaces the default list
DISABLED_VARIABLE: Final = "HARNESS_REDACTION_DISABLED"  # "1": no redaction (io warns once per run)

# A value this short would also match ordinary text (GH_TOKEN=x in a test would blank every "x"); real
# credentials are tens of characters, so shorter values are not treated as secrets.
MIN_SECRET_CHARS: Final = 8

# The project's own secrets (io/home.py owner_token: token_hex(32); io/team_actions.py KEY_BYTES = 24).
OWNER_TOKEN_HEX: Final = 64
MEMBER_KEY_HEX: Final = 48

_BODY = r"[A-Za-z0-9_-]*"
_NOT_WORD_BEFORE = r"(?<![A-Za-z0-9_])"
_NOT_WORD_AFTER = r"(?![A-Za-z0-9_])"

# Credential shapes: kind -> pattern; the match (or its group "secret" when there is one) is replaced.
# Provider prefixes are matched anywhere (a token glued to other text is still a token) with every token
# character after them. A member key is 48 lowercase hex digits standing alone: no id this project draws has
# that length (team, exchange, member and machine ids are 32, agent ids 16, request ids 16 or 24, the owner
# token 64) nor do the common digests (MD5 32, SHA-1 and git 40, SHA-256 64, SHA-512 128), and standing
# alone keeps a longer hex run (a digest) from being cut. An owner token has a SHA-256 digest's shape, so by
# shape it is redacted only where it is labelled as one (`ownerToken`, `owner_token`, `owner-token`, any case,
# then `:`/`=`, quotes or blanks); its value, when known, is redacted everywhere (see `redactor`).
PATTERNS: Final[Mapping[str, str]] = {
    "sk-ant": r"sk-ant-" + _BODY,
    "ghp": r"ghp_" + _BODY,
    "ghs": r"ghs_" + _BODY,
    "gho": r"gho_" + _BODY,
    "ghu": r"ghu_" + _BODY,
    "ghr": r"ghr_" + _BODY,
    "github_pat": r"github_pat_" + _BODY,
    "member_key": _NOT_WORD_BEFORE + f"[0-9a-f]{{{MEMBER_KEY_HEX}}}" + _NOT_WORD_AFTER,
    "owner_token": r"(?i:owner[-_]?token)[\"'\s]*(?:[:=][\"'\s]*)?"
    + f"(?P<secret>[0-9a-f]{{{OWNER_TOKEN_HEX}}})"
    + _NOT_WORD_AFTER,
}
_GROUP_KINDS: Final = {f"k{index}": kind for index, kind in enumerate(PATTERNS)}
_PATTERN_RE: Final = re.compile(
    "|".join(f"(?P<{group}>{PATTERNS[kind]})" for group, kind in _GROUP_KINDS.items())
)

# JSON fields whose string value is a credential of this project whatever it looks like.
CREDENTIAL_FIELDS: Final[Mapping[str, str]] = {
    "ownerToken": "owner_token",
    "owner_token": "owner_token",
    "memberKey": "member_key",
    "member_key": "member_key",
}


def marker(layer: str, name: str) -> str:
    return f"[REDACTED:{layer}:{name}]"


def env_var_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The allowlist: HARNESS_REDACTION_ENV_VARS (comma separated) when set, else the default list."""
    given = environ.get(ENV_VARS_VARIABLE)
    if given is None:
        return DEFAULT_ENV_VARS
    return tuple(dict.fromkeys(name.strip() for name in given.split(",") if name.strip()))


def disabled(environ: Mapping[str, str]) -> bool:
    return environ.get(DISABLED_VARIABLE) == "1"


def _spellings(value: str) -> set[str]:
    """The value as it appears in text, and as it appears inside a JSON string held in text."""
    return {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1]}


_HEX_DIGITS: Final = frozenset("0123456789abcdef")
# A redactor remembers the redaction of texts up to MEMO_CHARS long, at most MEMO_TEXTS of them (then it
# forgets them all and starts again).
MEMO_CHARS: Final = 128
MEMO_TEXTS: Final = 4096


@attrs.frozen
class Redactor:
    """Replaces secrets in text and in JSON values. `literals` pairs each known secret spelling with its
    marker; where detections overlap, the widest names the one replacement.

    A data directory's member keys and owner tokens are lowercase hex, one or two hundred of them in a big
    team: rather than one search of the text per key, every run of hex digits long enough to hold one is
    found in one pass and each of its windows of a key's length is looked up (an occurrence of a hex
    literal lies inside such a run). Other literals (environment values) are searched for one by one."""

    # The secrets themselves: never in a repr, which a log line or a traceback could carry.
    literals: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=False)
    enabled: bool = True
    # Derived from `literals` alone, so equality leaves them out (and the repr: they are the secrets too).
    # `_hex`: a hex literal's length -> the literals of that length -> their markers.
    _plain: tuple[tuple[str, str], ...] = attrs.field(init=False, repr=False, eq=False)
    _hex: dict[int, dict[str, str]] = attrs.field(init=False, repr=False, eq=False)
    _hex_run: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    # Short texts already redacted (ids, states, reasons: a trace event repeats them), bounded. A pure cache:
    # the result depends only on the text and the literals, which never change.
    _seen: dict[str, str] = attrs.field(init=False, repr=False, eq=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        hex_literals: dict[int, dict[str, str]] = {}
        plain = []
        for literal, mark in self.literals:
            if literal and _HEX_DIGITS.issuperset(literal):
                hex_literals.setdefault(len(literal), {})[literal] = mark
            else:
                plain.append((literal, mark))
        run = re.compile(f"[0-9a-f]{{{min(hex_literals)},}}") if hex_literals else None
        object.__setattr__(self, "_plain", tuple(plain))
        object.__setattr__(self, "_hex", hex_literals)
        object.__setattr__(self, "_hex_run", run)

    def text(self, text: str) -> str:
        if not self.enabled:
            return text
        if len(text) > MEMO_CHARS:
            return self._scan(text)
        done = self._seen.get(text)
        if done is None:
            done = self._scan(text)
            if len(self._seen) >= MEMO_TEXTS:
                self._seen.clear()  # a long-running daemon's texts change: keep what recurs now
            self._seen[text] = done
        return done

    def _scan(self, text: str) -> str:
        spans: list[tuple[int, int, str]] = []
        for literal, mark in self._plain:
            start = text.find(literal)
            while start >= 0:
                spans.append((start, start + len(literal), mark))
                start = text.find(literal, start + 1)
        if self._hex_run is not None:
            for run in self._hex_run.finditer(text):
                for length, marks in self._hex.items():
                    for start in range(run.start(), run.end() - length + 1):
                        found = marks.get(text[start : start + length])
                        if found is not None:
                            spans.append((start, start + length, found))
        for match in _PATTERN_RE.finditer(text):
            group = "secret" if match["secret"] is not None else match.lastgroup or ""
            kind = _GROUP_KINDS[match.lastgroup or ""]
            spans.append((match.start(group), match.end(group), marker("pattern", kind)))
        if not spans:
            return text
        spans.sort(key=lambda span: (span[0], -span[1]))
        out: list[str] = []
        position = 0
        start, end, mark = spans[0]
        for next_start, next_end, next_mark in spans[1:]:
            if next_start < end:  # overlapping detections become one replacement
                end = max(end, next_end)
                continue
            out += (text[position:start], mark)
            position, (start, end, mark) = end, (next_start, next_end, next_mark)
        out += (text[position:start], mark, text[end:])
        return "".join(out)

    def value(self, value: object) -> object:
        """A JSON value with every string (object keys included, at any depth) redacted; the string value of
        a credential field (CREDENTIAL_FIELDS) is replaced whole. Keys that redact alike stay distinct."""
        if not self.enabled:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, object] = {}
            for key, item in value.items():
                name = self.text(str(key))
                while name in out:
                    name += "'"
                kind = CREDENTIAL_FIELDS.get(str(key))
                out[name] = marker("pattern", kind) if kind and isinstance(item, str) else self.value(item)
            return out
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def redactor(
    environ: Mapping[str, str],
    *,
    member_keys: Iterable[str] = (),
    owner_tokens: Iterable[str] = (),
) -> Redactor:
    """The redactor of one run: the allowlisted variables' values in `environ`, and the known keys and
    tokens of this data directory (their values are redacted even where their shape rule does not reach)."""
    named: list[tuple[str, str]] = []
    for name in env_var_names(environ):
        value = environ.get(name, "").strip()
        if len(value) >= MIN_SECRET_CHARS:
            named.extend((spelling, marker("env", name)) for spelling in _spellings(value))
    for kind, values in (("member_key", member_keys), ("owner_token", owner_tokens)):
        named.extend(
            (spelling, marker("pattern", kind))
            for value in values
            if len(value.strip()) >= MIN_SECRET_CHARS
            for spelling in _spellings(value.strip())
        )
    unique = dict(reversed(named))  # the first name given for a spelling wins
    return Redactor(tuple(unique.items()))


# What HARNESS_REDACTION_DISABLED=1 gives: nothing is redacted (io warns once per run).
DISABLED: Final = Redactor(enabled=False)
