# Redaction (core/redaction.py, io/redaction_env.py) as the trace writes it: whatever the event, the written
# bytes hold no secret of the listed shapes and no value of an allowlisted variable; the allowlist is
# replaced, never extended; the disable switch warns exactly once per run.
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import trio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.core import redaction
from harness.core.redaction import Redactor, marker, redactor
from harness.io import trace, trace_files
from harness.io.redaction_env import WARNING

TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
HEX = "0123456789abcdef"
PREFIXES = ("sk-ant-", "ghp_", "ghs_", "gho_", "ghu_", "ghr_", "github_pat_")

shaped = st.builds(
    lambda prefix, body: prefix + body,
    st.sampled_from(PREFIXES),
    st.text(TOKEN_CHARS, min_size=1, max_size=60),
)
member_keys = st.text(HEX, min_size=48, max_size=48)
owner_tokens = st.text(HEX, min_size=64, max_size=64)
# Environment values as credentials are spelled, with the characters JSON must escape and some beyond ASCII;
# never brackets, so no value can be read across a marker's edge (see spec/trace-v1.md).
env_values = st.text(
    st.sampled_from(TOKEN_CHARS + './+=~!@#$%^&*() "\\\n\té€𝄞:'),
    min_size=redaction.MIN_SECRET_CHARS,
    max_size=40,
).filter(lambda value: value.strip() == value)
filler = st.text(max_size=12)


@st.composite
def carried(draw: st.DrawFn, secret: str) -> dict[str, object]:
    """`secret` somewhere in an event: in a value, a key, an evidence list, a JSON document held in a string,
    deep in nesting, or split across two fields."""
    left, right = draw(filler), draw(filler)
    where = draw(st.sampled_from(["value", "key", "evidence", "json", "nested", "split"]))
    if where == "value":
        return {"text": left + secret + right}
    if where == "key":
        return {left + secret + right: draw(filler)}
    if where == "evidence":
        return {"evidence": [draw(filler), left + secret + right, draw(filler)]}
    if where == "json":
        return {"context": json.dumps({"token": secret, "note": left}, ensure_ascii=draw(st.booleans()))}
    if where == "nested":
        depth = draw(st.integers(1, 5))
        value: object = left + secret + right
        for _ in range(depth):
            value = {draw(filler): [value]}
        return {"nested": value}
    cut = draw(st.integers(1, len(secret) - 1))
    return {"question": left + secret[:cut], "answer": secret[cut:] + right}


def _written(redact: Redactor, events: list[dict[str, object]]) -> bytes:
    async def write(directory: Path) -> None:
        async with await trace.TraceWriter.open(directory, redact) as writer:
            for index, event in enumerate(events):
                writer.emit(f"member{index}", {"type": "answer", **event})

    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp) / "t"
        trio.run(write, directory)
        return b"".join(f.read_bytes() for f in trace_files.trace_files(directory))


def _spellings(secret: str) -> list[str]:
    return [secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]]


def _strings(value: object) -> list[str]:
    """Every string of a decoded JSON value, object keys included: the text a reader of the trace sees."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (key, *_strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_secret_reaches_the_trace_bytes(data: st.DataObject) -> None:
    """ "any secret of the listed shapes or env values, anywhere in any event (split across fields, inside
    JSON strings, in evidence), never appears in the trace bytes"."""
    gh_token, api_key = data.draw(env_values), data.draw(env_values)
    member_key, owner_token = data.draw(member_keys), data.draw(owner_tokens)
    shapes = data.draw(st.lists(shaped, min_size=1, max_size=3))
    env = {"GH_TOKEN": gh_token, "ANTHROPIC_API_KEY": api_key, "PATH": "/usr/bin"}
    redact = redactor(env, member_keys=[member_key], owner_tokens=[owner_token])
    markers = "".join(
        marker(layer, name)
        for layer, name in (
            ("env", "GH_TOKEN"),
            ("env", "ANTHROPIC_API_KEY"),
            *(("pattern", kind) for kind in redaction.PATTERNS),
        )
    )
    secrets = [gh_token, api_key, member_key, owner_token, *shapes]
    assume(not any(secret in markers for secret in secrets))
    events = [data.draw(carried(secret)) for secret in secrets]
    written = _written(redact, data.draw(st.permutations(events)))
    seen = [s for line in written.split(b"\n") if line for s in _strings(json.loads(line))]  # U+2028 is text
    for secret in secrets:
        for spelling in _spellings(secret):
            assert spelling.encode() not in written, (secret, written)
            assert not any(spelling in text for text in seen), (secret, seen)


@given(st.lists(member_keys, min_size=1, max_size=4), filler, filler)
def test_an_unknown_member_key_standing_alone_is_redacted_by_its_shape(
    keys: list[str], left: str, right: str
) -> None:
    text = f"{left} --key {' '.join(keys)}\n{right}"
    assume(not any(key in left + right for key in keys))
    out = redactor({}).text(text)
    assert not any(key in out for key in keys)
    assert out.count(marker("pattern", "member_key")) >= len(keys)


def _found_one_literal_at_a_time(redactor_: Redactor, text: str) -> list[tuple[int, int, str]]:
    """Every occurrence of every literal, overlapping ones included: what the per-literal search found."""
    spans = []
    for literal, mark in redactor_.literals:
        start = text.find(literal)
        while start >= 0:
            spans.append((start, start + len(literal), mark))
            start = text.find(literal, start + 1)
    return spans


def _redact_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    if not spans:
        return text
    spans.sort(key=lambda span: (span[0], -span[1]))
    out, position, (start, end, mark) = [], 0, spans[0]
    for next_start, next_end, next_mark in spans[1:]:
        if next_start < end:
            end = max(end, next_end)
            continue
        out += (text[position:start], mark)
        position, (start, end, mark) = end, (next_start, next_end, next_mark)
    return "".join([*out, text[position:start], mark, text[end:]])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(HEX, min_size=8, max_size=64), min_size=1, max_size=6),
    st.lists(st.text(HEX + "xyz-_ ", max_size=30), max_size=6),
    st.data(),
)
def test_hex_literals_found_by_runs_are_every_occurrence_a_search_finds(
    keys: list[str], fillers: list[str], data: st.DataObject
) -> None:
    """The one-pass search of hex runs (a big team's hundreds of keys) finds exactly what searching the text
    for each key found: overlapping occurrences, keys inside longer hex runs, keys glued to words. Shapes off
    (no pattern can match: the pieces hold no 48-hex run standing alone), so the literals alone decide."""
    made = redactor({}, member_keys=keys)
    pieces = data.draw(
        st.lists(st.sampled_from([*keys, *fillers, *(k[: len(k) // 2] for k in keys)]), max_size=12)
    )
    text = "".join(pieces)
    assume(not redaction._PATTERN_RE.search(text))
    assert made.text(text) == _redact_spans(text, _found_one_literal_at_a_time(made, text))


def test_a_redactors_repr_shows_no_secret() -> None:
    """A repr reaches logs and tracebacks: the redactor that holds the secrets must not print them."""
    key, token = "ab" * 24, "cd" * 32
    made = redactor({"GH_TOKEN": "env-secret-value"}, member_keys=[key], owner_tokens=[token])
    shown = repr(made)
    assert made.text(f"{key} {token} env-secret-value").count("[REDACTED:") == 3
    assert not any(secret in shown for secret in (key, token, "env-secret-value", "[0-9a-f]"))


def test_other_hex_ids_and_digests_are_left_alone() -> None:
    """Member keys are 48 hex digits: the project's 32-hex ids, git's 40, a SHA-256 digest's 64 and a longer
    run that merely contains 48 are not keys; an unlabelled 64-hex run is a digest, not the owner token."""
    texts = ["a" * 32, "b" * 40, "c" * 64, "d" * 96, "e" * 47, "f" * 49, "x" + "0" * 48, "0" * 48 + "_tail"]
    redact = redactor({})
    assert [redact.text(text) for text in texts] == texts
    token = "9" * 64
    for labelled in (f'"ownerToken": "{token}"', f"owner-token={token}", f"OWNER_TOKEN {token}"):
        assert redact.text(labelled) == labelled.replace(token, marker("pattern", "owner_token"))


def test_credential_fields_and_keys_are_redacted_in_json_values() -> None:
    redact = redactor({"GH_TOKEN": "gh-value-123456"})
    value = redact.value(
        {
            "memberKey": "short",
            "ownerToken": "x",
            "gh-value-123456": 1,
            "ghp_a": ["ghp_b", {"ghp_c": True}],
        }
    )
    assert value == {
        "memberKey": marker("pattern", "member_key"),
        "ownerToken": marker("pattern", "owner_token"),
        marker("env", "GH_TOKEN"): 1,
        marker("pattern", "ghp"): [marker("pattern", "ghp"), {marker("pattern", "ghp"): True}],
    }
    ghp = marker("pattern", "ghp")
    assert redact.value({"ghp_a": 1, "ghp_b": 2}) == {ghp: 1, ghp + "'": 2}  # keys that redact alike stay two


def test_the_allowlist_variable_replaces_the_default_list() -> None:
    """ "The variable replaces the default list. It does not extend the list.\""""
    env = {"GH_TOKEN": "gh-secret-value", "MY_TOKEN": "my-secret-value", "OTHER": "other-secret-value"}
    default = redactor(env).text("gh-secret-value my-secret-value")
    assert default == f"{marker('env', 'GH_TOKEN')} my-secret-value"
    replaced = {**env, redaction.ENV_VARS_VARIABLE: "MY_TOKEN, OTHER"}
    assert redaction.env_var_names(replaced) == ("MY_TOKEN", "OTHER")
    assert redactor(replaced).text("gh-secret-value my-secret-value other-secret-value") == (
        f"gh-secret-value {marker('env', 'MY_TOKEN')} {marker('env', 'OTHER')}"
    )
    assert redactor({"GH_TOKEN": "short"}).text("a short b") == "a short b"  # under MIN_SECRET_CHARS


def test_overlapping_secrets_leave_no_character_behind() -> None:
    redact = redactor({"GH_TOKEN": "tail-of-it!"})
    assert redact.text("xghp_abctail-of-it!-end") == f"x{marker('pattern', 'ghp')}-end"


# The run: a trace written twice with redaction off, reading the environment as the daemon will.
DISABLED_RUN = """
import sys, trio
from pathlib import Path
from harness.io import trace
from harness.io.redaction_env import from_environment

async def main() -> None:
    for name in ("a", "b"):
        async with await trace.TraceWriter.open(Path(sys.argv[1]) / name, from_environment()) as writer:
            await writer.append("lead", {"type": "note", "text": "ghp_secretvalue"})

trio.run(main)
"""


def _run(directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", DISABLED_RUN, str(directory)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_disable_switch_warns_exactly_once_per_run(tmp_path: Path) -> None:
    """ "Set ..._REDACTION_DISABLED=1 to disable it (one stderr warning per run).\""""
    env = {"PATH": "/usr/bin:/bin", redaction.DISABLED_VARIABLE: "1"}
    done = _run(tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == WARNING
    first_files = [tmp_path / name / trace_files.file_name(1) for name in "ab"]
    assert all(b"ghp_secretvalue" in path.read_bytes() for path in first_files)
    env.pop(redaction.DISABLED_VARIABLE)
    done = _run(tmp_path / "on", env)
    assert done.returncode == 0 and done.stderr == ""
    assert b"ghp_secretvalue" not in (tmp_path / "on" / "a").joinpath(trace_files.file_name(1)).read_bytes()


# The owner-token shape as it was before an adversarial review: its two runs of blanks around an optional
# separator backtracked quadratically (32,000 blanks after a label: 9.8 s), and the session runner redacts on
# the daemon's event loop, so one participant froze the daemon for 15.7 s a round.
QUADRATIC_OWNER_TOKEN = (
    r"(?i:owner[-_]?token)[\"'\s]*[:=]?[\"'\s]*(?P<secret>[0-9a-f]{64})(?![A-Za-z0-9_])"
)


OWNER_TOKEN_PIECES = ["ownerToken", "owner-token", "OWNER_TOKEN", " ", "\t", '"', "'", ":", "=", "x", "f"]
HEX_PIECES = ["a" * 64, "0123456789abcdef" * 4]


@given(st.lists(st.sampled_from(OWNER_TOKEN_PIECES + HEX_PIECES), max_size=12).map("".join))
def test_the_owner_token_shape_matches_what_it_matched_before(text: str) -> None:
    """The linear pattern (one run of blanks, then optionally a separator and another run) finds exactly the
    secrets the quadratic one found."""
    before = [m.span("secret") for m in re.finditer(QUADRATIC_OWNER_TOKEN, text)]
    now = [m.span("secret") for m in re.finditer(redaction.PATTERNS["owner_token"], text)]
    assert now == before


def test_a_label_before_a_long_run_of_blanks_is_scanned_in_linear_time() -> None:
    """200,000 blanks after each of several labels, no token after them: the quadratic pattern took minutes
    (32,000 took 9.8 s); in linear time it is milliseconds. A generous deadline, not a timing assertion: the
    scan runs in a process of its own, and only a scan still running after 120 s fails."""
    script = (
        "from harness.core.redaction import redactor\n"
        "text = ('ownerToken' + ' ' * 200_000 + ': x') * 4\n"
        "assert redactor({}).text(text) == text\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
