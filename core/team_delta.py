# What changed in a team between two revisions, as the views a watcher needs (issue 18: a delivery report on a
# full team pushed a 383 KB snapshot to every watcher; the change itself is one exchange's view). The ledger's
# records are immutable and a step shares every record it did not change, so "changed" is an identity test,
# never a deep comparison: a record that is the same object is the same value. A record rebuilt with equal
# content is sent again, which costs bytes, never correctness.
# Orders only grow (members and exchanges are appended, never reordered or dropped); a pair of teams whose
# orders do not extend each other has no delta, and the caller sends the whole view instead.
from __future__ import annotations

from typing import Any, TypeGuard

from harness.core.codec import exchange_view, member_view, team_header
from harness.core.records import Team

# The team's own fields a delta always carries (they are a few bytes, and a watcher's header shows them).
HEADER_FIELDS = ("id", "name", "state", "revision", "createdAt")


def team_delta(old: Team, new: Team) -> dict[str, Any] | None:
    """The delta from `old` to `new`, or None when `new`'s orders do not extend `old`'s."""
    if new.member_order[: len(old.member_order)] != old.member_order:
        return None
    if new.exchange_order[: len(old.exchange_order)] != old.exchange_order:
        return None
    return {
        **team_header(new),
        "baseRevision": old.revision,
        "members": [
            member_view(new.members[member_id])
            for member_id in new.member_order
            if old.members.get(member_id) is not new.members[member_id]
        ],
        "exchanges": [
            exchange_view(new.exchanges[exchange_id])
            for exchange_id in new.exchange_order
            if old.exchanges.get(exchange_id) is not new.exchanges[exchange_id]
        ],
    }


def apply_team_delta(view: dict[str, Any], delta: object) -> dict[str, Any] | None:
    """The view `delta` leads to from `view` (a watcher's copy at the delta's base revision): changed records
    replace theirs in place, new ones are appended in order. None when `view` is not the delta's base, or
    `delta` is not the shape `team_delta` makes (a frame is input: it never ends the watcher)."""
    if not _well_formed(delta) or view.get("revision") != delta.get("baseRevision"):
        return None
    result = {key: delta[key] for key in HEADER_FIELDS}
    for field in ("members", "exchanges"):
        records: list[dict[str, Any]] = list(view[field])
        where = {record["id"]: index for index, record in enumerate(records)}
        for record in delta[field]:
            if record["id"] in where:
                records[where[record["id"]]] = record
            else:
                records.append(record)
        result[field] = records
    return result


def _well_formed(delta: object) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(delta, dict)
        and all(key in delta for key in HEADER_FIELDS)
        and all(_records(delta.get(field)) for field in ("members", "exchanges"))
    )


def _records(records: object) -> bool:
    return isinstance(records, list) and all(isinstance(r, dict) and "id" in r for r in records)
