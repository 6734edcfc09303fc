# Issue 19: behaviours of core/redaction.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import json

import pytest

from harness.core.redaction import DISABLED, Redactor, disabled, env_var_names, marker, redactor


@pytest.mark.parametrize(
    ("field", "kind"),
    [
        ("ownerToken", "owner_token"),
        ("owner_token", "owner_token"),
        ("memberKey", "member_key"),
        ("member_key", "member_key"),
    ],
)
def test_each_credential_field_is_replaced_whole_whatever_its_value_looks_like(field: str, kind: str) -> None:
    """A credential field's string is a secret even when no shape rule knows it (here: not hex at all)."""
    redacted = Redactor().value({field: "plainly-not-a-key", "note": "plainly-not-a-key"})
    assert redacted == {field: marker("pattern", kind), "note": "plainly-not-a-key"}


def test_the_marker_is_spelled_as_the_spec_shows_it() -> None:
    """spec/trace-v1.md: a detected secret becomes `[REDACTED:LAYER:NAME]`, brackets included."""
    assert Redactor().text("token ghp_abc123 end") == "token [REDACTED:pattern:ghp] end"


def test_the_disabled_redactor_leaves_text_alone() -> None:
    """HARNESS_REDACTION_DISABLED=1: nothing is redacted, text or JSON."""
    assert DISABLED.text("token ghp_abc123 end") == "token ghp_abc123 end"
    assert DISABLED.value({"ownerToken": "ghp_abc123"}) == {"ownerToken": "ghp_abc123"}


# --- each layer and each rule at the core (spec/trace-v1.md's tables) ------------------------------------

KEY = "0123456789abcdef" * 3  # 48 lowercase hex digits: a member key's shape
TOKEN = "fedcba9876543210" * 4  # 64: an owner token's


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("sk-ant-api03-Ab_9", "sk-ant"),
        ("ghp_Ab-9_z", "ghp"),
        ("ghs_Ab-9_z", "ghs"),
        ("gho_Ab-9_z", "gho"),
        ("ghu_Ab-9_z", "ghu"),
        ("ghr_Ab-9_z", "ghr"),
        ("github_pat_Ab-9_z", "github_pat"),
    ],
)
def test_each_provider_token_is_replaced_with_every_token_character_after_its_prefix(
    token: str, kind: str
) -> None:
    mark = marker("pattern", kind)
    assert Redactor().text(f"use {token}. then") == f"use {mark}. then"
    assert Redactor().text(f"glued{token}") == f"glued{mark}"  # a token glued to other text is still one


def test_a_member_key_is_48_hex_digits_standing_alone() -> None:
    mark = marker("pattern", "member_key")
    assert Redactor().text(f"key {KEY}.") == f"key {mark}."
    for not_a_key in (KEY[:-1], KEY + "0", "x" + KEY, KEY + "_", KEY.upper()):
        assert Redactor().text(f"key {not_a_key}.") == f"key {not_a_key}.", not_a_key


def test_an_owner_token_is_redacted_by_shape_only_where_it_is_labelled() -> None:
    mark = marker("pattern", "owner_token")
    for label in ('"ownerToken": "', "owner_token=", "OWNER-TOKEN: ", "ownertoken "):
        assert Redactor().text(f"{label}{TOKEN}") == f"{label}{mark}", label
    assert Redactor().text(f"digest {TOKEN}") == f"digest {TOKEN}"  # a SHA-256 digest is no token
    assert Redactor().text(f"owner_token={TOKEN}0") == f"owner_token={TOKEN}0"  # a longer hex run


def test_the_allowlist_is_the_default_or_replaced_whole() -> None:
    assert env_var_names({}) == ("ANTHROPIC_API_KEY", "GH_TOKEN", "GITHUB_TOKEN")
    assert env_var_names({"HARNESS_REDACTION_ENV_VARS": " A, B,,A "}) == ("A", "B")
    assert env_var_names({"HARNESS_REDACTION_ENV_VARS": ""}) == ()


def test_only_one_disables_redaction() -> None:
    assert disabled({"HARNESS_REDACTION_DISABLED": "1"})
    for value in ("0", "true", "yes", ""):
        assert not disabled({"HARNESS_REDACTION_DISABLED": value})
    assert not disabled({})


def test_an_allowlisted_value_of_eight_characters_or_more_is_redacted_wherever_it_is() -> None:
    environ = {"GH_TOKEN": "  abcdefgh  ", "ANTHROPIC_API_KEY": "abcdefg"}  # 8 after stripping; 7
    mark = marker("env", "GH_TOKEN")
    assert redactor(environ).text("abcdefgh at 0 and abcdefgh, abcdefg") == f"{mark} at 0 and {mark}, abcdefg"
    assert redactor(environ).text("bcdefgh abcdefg") == "bcdefgh abcdefg"  # parts of it are no secret


def test_a_value_is_redacted_as_it_appears_inside_a_json_string_too() -> None:
    """A trace line is JSON: a secret with a quote, a backslash or a non-ASCII letter appears there escaped,
    with or without ASCII escapes, and is redacted in each spelling."""
    secret = 'pa"ss\\wörd'
    made = redactor({"GH_TOKEN": secret})
    mark = "[REDACTED:env:GH_TOKEN]"
    for spelling in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        assert made.text(f"<{spelling}>") == f"<{mark}>", spelling
    assert len({secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}) == 3


def test_known_keys_and_tokens_are_redacted_everywhere_and_the_first_name_wins() -> None:
    made = redactor(
        {"GH_TOKEN": "same-secret", "GITHUB_TOKEN": "same-secret"},
        member_keys=[" member-key-1 ", "short"],
        owner_tokens=["owner-token-1"],
    )
    assert made.text("same-secret member-key-1 owner-token-1 short") == (
        "[REDACTED:env:GH_TOKEN] [REDACTED:pattern:member_key] [REDACTED:pattern:owner_token] short"
    )


def test_overlapping_and_nested_detections_are_one_replacement_named_by_the_widest() -> None:
    made = Redactor((("abcabc", "[A]"), ("cab", "[B]")))
    assert made.text("abcabcabc!") == "[A]!"  # occurrences at 0 and 3 overlap: nothing of them survives
    assert made.text("xcab abcabc") == "x[B] [A]"  # the later, longer literal is found first: sorted
    assert Redactor((("abcdef", "[W]"), ("cd", "[N]"))).text("abcdefg") == "[W]g"
    assert Redactor((("cdef", "[W]"), ("abcd", "[N]"))).text("abcdefg") == "[N]g"  # one run, the first's name


def test_a_json_value_is_redacted_at_every_depth_keys_included_and_distinct() -> None:
    made = Redactor((("secret-1", "[S]"),))
    value = {"a": ["x secret-1", ("secret-1",), 5, None], "secret-1": 1, "[S]": 2, "memberKey": 7}
    assert made.value(value) == {"a": ["x [S]", ["[S]"], 5, None], "[S]": 1, "[S]'": 2, "memberKey": 7}
    assert made.value("secret-1") == "[S]"
    assert DISABLED.value(value) is value


# --- S7: the survivors of a full run over the module -------------------------------------------------------


def test_occurrences_one_character_apart_are_all_replaced() -> None:
    """The module's promise: "Every occurrence of a detected secret is replaced whole, even where two
    detections overlap, so no character of a detected secret survives beside a marker". Eight `a`s are found
    twice in nine, at 0 and at 1."""
    made = redactor({"GH_TOKEN": "a" * 8})
    assert made.text("<" + "a" * 9 + ">") == "<[REDACTED:env:GH_TOKEN]>"


def test_detections_that_touch_without_overlapping_keep_a_marker_each() -> None:
    """Only "overlapping detections become one replacement": two secrets side by side are two secrets."""
    made = redactor({"GH_TOKEN": "secret-1"}, member_keys=["member-2"])
    assert made.text("secret-1member-2secret-1") == (
        "[REDACTED:env:GH_TOKEN][REDACTED:pattern:member_key][REDACTED:env:GH_TOKEN]"
    )


def test_a_known_key_or_token_of_exactly_eight_characters_is_a_secret() -> None:
    """MIN_SECRET_CHARS is 8: shorter values are not treated as secrets, values of 8 are, for known keys and
    tokens as for allowlisted variables."""
    made = redactor({}, member_keys=[" 12345678 ", "1234567"], owner_tokens=["abcdefgh"])
    assert made.text("12345678 1234567 abcdefgh") == (
        "[REDACTED:pattern:member_key] 1234567 [REDACTED:pattern:owner_token]"
    )


def test_a_short_text_is_redacted_once_and_remembered_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trace redacts the same ids, states and reasons in every event: a short text's redaction is
    remembered (at most MEMO_TEXTS of them, then it starts again; none over MEMO_CHARS), and the remembered
    answer is the scan's."""
    from harness.core import redaction

    key = "ab" * 24
    subject = Redactor(((key, marker("member_key", "alice")),))
    scans: list[str] = []
    scan = Redactor._scan

    def counted(self: Redactor, text: str) -> str:
        scans.append(text)
        return scan(self, text)

    monkeypatch.setattr(Redactor, "_scan", counted)
    monkeypatch.setattr(redaction, "MEMO_TEXTS", 2)
    short = f"key {key}"
    assert subject.text(short) == subject.text(short) == f"key {marker('member_key', 'alice')}"
    assert scans == [short]
    long = "x" * redaction.MEMO_CHARS + key
    assert subject.text(long) == subject.text(long) and scans.count(long) == 2  # never remembered
    assert subject.text("at the bound") == "at the bound"  # the memo is full
    for text in ("one", "two", "one", "at the bound", short):
        assert subject.text(text) == (text if text != short else f"key {marker('member_key', 'alice')}")
    # "one" emptied the full memo and was remembered; "two" was remembered beside it; the older ones
    # were forgotten and scanned again.
    assert (scans.count("one"), scans.count("at the bound"), scans.count(short)) == (1, 2, 2)
    exactly = "y" * redaction.MEMO_CHARS
    monkeypatch.setattr(redaction, "MEMO_TEXTS", 10)
    assert subject.text(exactly) == subject.text(exactly) and scans.count(exactly) == 1


def test_no_repr_of_a_used_redactor_shows_a_secret_or_a_text_it_redacted() -> None:
    """A repr reaches logs and tracebacks. After use the redactor holds the secrets (literals, their hex
    index, the run pattern) and the texts it redacted (its memo, keyed by the text before redaction)."""
    key, token, env = "ab" * 24, "cd" * 32, "env-secret-value"
    made = redactor({"GH_TOKEN": env}, member_keys=[key], owner_tokens=[token])
    short = f"k={key}"
    assert key not in made.text(short)  # and `short` is remembered, keyed by itself
    shown = repr(made)
    assert not any(secret in shown for secret in (key, token, env, short, "[0-9a-f]")), shown


def test_two_redactors_of_the_same_secrets_are_equal_whatever_each_has_redacted() -> None:
    used, fresh = redactor({}, member_keys=["ab" * 24]), redactor({}, member_keys=["ab" * 24])
    used.text("some text that is remembered")
    assert used == fresh


def test_every_overlapping_occurrence_of_a_literal_is_replaced() -> None:
    """Occurrences one character apart overlap; the search goes on from the next character, so the second
    is found and no character of either survives."""
    made = redactor({"GH_TOKEN": "zzzzzzzz"})  # not hex: searched for one by one
    assert "z" not in made.text("zzzzzzzzz")
