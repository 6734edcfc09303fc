# Every listener of harness (the RPC socket, the web page, the remote gateway, the relay, pairing boxes,
# sealed frames) parses JSON that anyone on the other end wrote. The standard parser recurses once per
# nesting level and accepts NaN, Infinity (also spelled 1e999) and lone surrogates, so 100,000 `[` end a
# process with RecursionError, and an infinity or a surrogate breaks the next write of the value (a journal
# entry, a reply that then never comes). This module bounds a document's size and
# depth before it is parsed, then parses it strictly; every refusal is a value, never an exception.
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

# The deepest any harness frame is nested (a sealed request carrying a restated desk command is about 6);
# 32 leaves room and keeps every parser far from the interpreter's recursion limit.
MAX_DEPTH: Final = 32

# One token at a time, left to right: a string (its closing quote optional, so an unterminated one is
# consumed once, not rescanned from every later quote) or a bracket. Linear in the input.
_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


# A dataclass, not attrs: the CLI's fast path imports the RPC frames, and through them this module.
@dataclass(frozen=True, slots=True)
class JsonRefused:
    """Why a document was not parsed: `too_large`, `not_utf8`, `too_deep` or `not_json`."""

    reason: str
    detail: str


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for a float (1e999) is refused, not made infinite."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (an unterminated string runs to the end)."""
    deepest = level = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            level += 1
            deepest = max(deepest, level)
        elif token in ("]", "}"):
            level -= 1
    return deepest


def parse_json(data: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> object:
    """The JSON value of `data`, or a JsonRefused. Bounds come first: nothing larger than `max_bytes`
    (counted in UTF-8) or nested deeper than `max_depth` reaches the parser."""
    if len(data) > max_bytes:
        return JsonRefused("too_large", f"larger than {max_bytes} bytes")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return JsonRefused("not_utf8", "not valid UTF-8")
    else:
        text = data
        try:
            if len(text.encode("utf-8")) > max_bytes:
                return JsonRefused("too_large", f"larger than {max_bytes} bytes")
        except UnicodeEncodeError:
            return JsonRefused("not_utf8", "holds an unpaired surrogate")
    if depth(text) > max_depth:
        return JsonRefused("too_deep", f"nested deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
    except (ValueError, RecursionError) as error:
        return JsonRefused("not_json", f"not JSON: {error}"[:200])
    if "\\u" in text:
        # An escaped lone surrogate parses but can never be written out again as UTF-8 (journal, replies).
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return JsonRefused("not_utf8", "holds an unpaired surrogate escape")
    return value


def parse_own(data: str | bytes) -> Any:  # json.loads's own type: readers check the shape
    """`json.loads` for a file of the data directory (a registry, a state, a status, an export): harness wrote
    it, so its size needs no bound, but damage to it must stay the ValueError every reader turns into a
    one-line error, never a RecursionError that ends the command with a traceback."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested deeper than any document harness writes") from None


__all__ = ["MAX_DEPTH", "JsonRefused", "depth", "parse_json", "parse_own"]
