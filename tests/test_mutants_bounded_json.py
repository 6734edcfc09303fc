# Issue 19: behaviours of core/bounded_json.py that scripts/mutate_core.py found no test pinned. The
# strict float hook must still hand back ordinary floats, and a refused number is echoed only in part:
# a peer's document is hostile input and its refusal goes back out (logs, error replies).
from __future__ import annotations

from harness.core.bounded_json import JsonRefused, parse_json

LIMIT = 4096


def test_finite_numbers_with_a_fraction_or_exponent_are_floats() -> None:
    """The hook that refuses 1e999 parses every finite number as itself (a mutant returned None)."""
    assert parse_json('{"seconds": 1.5, "n": [-2e3, 0.1, 7]}', max_bytes=LIMIT) == {
        "seconds": 1.5,
        "n": [-2000.0, 0.1, 7],
    }


def test_an_out_of_range_number_is_quoted_only_by_its_first_20_characters() -> None:
    number = "1" + "0" * 400 + ".5"
    refused = parse_json(f"[{number}]", max_bytes=LIMIT)
    assert refused == JsonRefused("not_json", f"not JSON: the number {number[:20]} is out of range")
