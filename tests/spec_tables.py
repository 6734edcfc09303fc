# The spec's tables are data: this reads a named markdown table out of a spec file so a test can assert it
# equals the code's table. A table is marked `<!-- table: NAME -->` on the line before its header.
from __future__ import annotations

from pathlib import Path

import attrs

SPEC = Path(__file__).resolve().parent.parent / "spec"


def limit_names(machine: str) -> list[str]:
    """The `Limits` fields of one machine, in order: the owner ledger's ("team"), then the delivery desk's
    ("delivery", from `notice_bytes` on). Explicit, so a bound missing from a spec table fails its test."""
    from harness.core.limits import Limits

    names = [field.name for field in attrs.fields(Limits)]
    first_delivery = names.index("notice_bytes")
    return names[:first_delivery] if machine == "team" else names[first_delivery:]


def read_table(spec_file: str, name: str) -> list[dict[str, str]]:
    lines = (SPEC / spec_file).read_text(encoding="utf-8").splitlines()
    marker = f"<!-- table: {name} -->"
    try:
        start = lines.index(marker) + 1
    except ValueError:
        raise AssertionError(f"{spec_file} has no table {name!r}") from None
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
    header, _rule, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]
