# Issue 14, finding 5 (and issue 15's relay and pairing findings): 100,000 nested `[` ended a process with
# RecursionError because JSON was parsed before anything bounded it. `parse_json` is the one parser of peer
# input: bounded in size and depth first, strict after, and total (a value or a JsonRefused, never a raise).
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.bounded_json import MAX_DEPTH, JsonRefused, depth, parse_json, parse_own

LIMIT = 256 * 1024


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("[" * 100_000, "too_deep"),
        ('{"a":' * 50_000, "too_deep"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "too_deep"),
        ("x" * (LIMIT + 1), "too_large"),
        ("é" * (LIMIT // 2 + 1), "too_large"),  # counted in UTF-8 bytes, not characters
        (b"\xff\xfe[]", "not_utf8"),
        ('"\\ud800"', "not_utf8"),
        ("\ud800", "not_utf8"),
        ("[NaN]", "not_json"),
        ('{"a": Infinity}', "not_json"),
        ('{"seconds": 1e999}', "not_json"),  # a float too large is infinity: refused, not parsed as one
        ("[-1e400]", "not_json"),
        ('{"a": 1', "not_json"),
        ('"' * 1000, "not_json"),
    ],
)
def test_hostile_documents_are_refused_as_values(document: str | bytes, reason: str) -> None:
    refused = parse_json(document, max_bytes=LIMIT)
    assert isinstance(refused, JsonRefused)
    assert refused.reason == reason


def test_nesting_at_the_bound_parses() -> None:
    document = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert not isinstance(parse_json(document, max_bytes=LIMIT), JsonRefused)


def test_brackets_inside_strings_do_not_count() -> None:
    document = json.dumps({"text": "[" * 10_000 + '\\"{' * 100})
    assert parse_json(document, max_bytes=LIMIT) == json.loads(document)
    assert depth(document) == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=30,
)


def _nesting(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_nesting(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_nesting(item) for item in value.values()), default=0)
    return 0


@given(json_values)
def test_depth_is_the_documents_nesting_and_valid_documents_round_trip(value: object) -> None:
    document = json.dumps(value)
    assert depth(document) == _nesting(value)
    assert parse_json(document, max_bytes=10**7) == value


@given(st.one_of(st.text(), st.binary()))
def test_parse_json_is_total(document: str | bytes) -> None:
    """Any input at all: a value or a refusal, never an exception."""
    parse_json(document, max_bytes=LIMIT)


# --- each refusal exactly, and the bounds at their edge (scripts/mutate_core.py found them unpinned) ------

SMALL = 64


@pytest.mark.parametrize(
    ("document", "refused"),
    [
        ("x" * (SMALL + 1), JsonRefused("too_large", f"larger than {SMALL} bytes")),
        ("é" * (SMALL // 2 + 1), JsonRefused("too_large", f"larger than {SMALL} bytes")),
        (b"[" + b" " * SMALL + b"]", JsonRefused("too_large", f"larger than {SMALL} bytes")),
        (b"\xff[]", JsonRefused("not_utf8", "not valid UTF-8")),
        ("[\ud800]", JsonRefused("not_utf8", "holds an unpaired surrogate")),
        ('["\\ud800"]', JsonRefused("not_utf8", "holds an unpaired surrogate escape")),
        ("[NaN]", JsonRefused("not_json", "not JSON: NaN is not JSON")),
        ('{"a": 1', JsonRefused("not_json", "not JSON: Expecting ',' delimiter: line 1 column 8 (char 7)")),
    ],
)
def test_each_refusal_names_its_reason_and_bound(document: str | bytes, refused: JsonRefused) -> None:
    """The refusal is the one-line error a peer gets back: its reason code and the bound it broke."""
    assert parse_json(document, max_bytes=SMALL) == refused


def test_the_default_depth_bound_is_32_levels() -> None:
    """The bound module comment promises (harness's deepest frame is about 6): 32 levels parse, 33 do not."""
    assert _nesting(parse_json("[" * 32 + "]" * 32, max_bytes=LIMIT)) == 32
    assert parse_json("[" * 33 + "]" * 33, max_bytes=LIMIT) == JsonRefused(
        "too_deep", "nested deeper than 32 levels"
    )


@pytest.mark.parametrize(
    "document",
    [
        "[" + " " * (SMALL - 2) + "]",
        b"[" + b" " * (SMALL - 2) + b"]",
        '"' + "é" * ((SMALL - 2) // 2) + '"',  # 33 characters, exactly SMALL bytes in UTF-8
    ],
)
def test_a_document_of_exactly_max_bytes_parses(document: str | bytes) -> None:
    """The size bound is inclusive, in UTF-8 bytes, for text and for bytes alike."""
    assert len(document if isinstance(document, bytes) else document.encode()) == SMALL
    assert not isinstance(parse_json(document, max_bytes=SMALL), JsonRefused)


def test_a_file_nested_past_the_parser_is_a_value_error_and_any_other_document_is_json_loads() -> None:
    """`parse_own` reads the data directory's files: damage stays the ValueError its readers catch."""
    with pytest.raises(ValueError, match="nested deeper than any document harness writes"):
        parse_own("[" * 100_000)
    with pytest.raises(ValueError):
        parse_own(b"{not json")
    document = '{"a": [1, 2.5, "\u00e9", null, true], "b": {"c": []}}'
    assert parse_own(document) == json.loads(document) == parse_own(document.encode())
