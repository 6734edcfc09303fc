# A desk at its bound holds 10,000 delivery records (about 7 MB of JSON), and few of them change between two
# checkpoints: most are finished and stay as they are. Rewriting all of them every 256 journal entries cost
# ~90 ms of CPU and 7 MB of writes each time. The desk's checkpoint is therefore cut into parts (the store's
# `write_parts`), its notices grouped by their seq, so a checkpoint encodes and writes again only the groups
# with a notice that changed, came or went since the last one, and names the others as they are. A part holds
# its notices as rows (core/codec.py `notice_row`): a desk's recovery parses and structures them in half the
# time the named fields of the object form took, which parts written before rows still hold.
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import attrs
from immutables import Map

from harness.core import delivery as d
from harness.core.codec import notice_row, to_json
from harness.io.journal_files import PARTS_KEY

GROUP: Final = 256  # notices per part: a part is ~140 KB at the bound, and the newest parts are the live ones


class PartWriter(Protocol):
    @property
    def parts(self) -> frozenset[str]: ...

    def write_parts(self, seq: int, parts: list[Mapping[str, object]]) -> list[str]: ...


class DeskParts:
    """What the last checkpoint wrote: each group's notices (the immutable records themselves, compared by
    identity: a record that changed is a new object) and the part that holds them. Used by one checkpoint at
    a time, in its worker thread."""

    def __init__(self) -> None:
        self._written: dict[int, tuple[tuple[d.Notice, ...], str]] = {}

    def seed(
        self, desk: d.Desk, parts: Sequence[tuple[str, Sequence[str]]], stored: Mapping[str, object]
    ) -> None:
        """Know the parts of the checkpoint `desk` was decoded from (before any journal entry is replayed
        onto it), so the first checkpoint after a start writes again only the groups that changed since.
        `stored` are the checkpoint's notices as it holds them. A part that is not one whole group of this
        desk, or that holds a notice not as a row (written before rows), is not known, and its group is
        written again: once, as rows."""
        groups: dict[int, int] = {}
        for notice in desk.notices.values():
            groups[notice.seq // GROUP] = groups.get(notice.seq // GROUP, 0) + 1
        for name, keys in parts:
            notices = [desk.notices.get(key) for key in keys]
            if not notices or None in notices or any(type(stored.get(key)) is not list for key in keys):
                continue
            members = tuple(sorted((n for n in notices if n is not None), key=_seq))
            index = members[0].seq // GROUP
            if members[-1].seq // GROUP == index and groups[index] == len(members):
                self._written[index] = (members, name)

    def payload(self, store: PartWriter, seq: int, desk: d.Desk) -> dict[str, object]:
        """The checkpoint payload of `desk` (the state after entry `seq`): the desk without its notices, which
        are in the parts it names; the groups that changed are written as new parts first."""
        groups: dict[int, list[d.Notice]] = {}
        for notice in desk.notices.values():
            groups.setdefault(notice.seq // GROUP, []).append(notice)
        current: dict[int, tuple[tuple[d.Notice, ...], str]] = {}
        changed: list[tuple[int, tuple[d.Notice, ...]]] = []
        for index, members in groups.items():
            notices = tuple(sorted(members, key=_seq))
            last = self._written.get(index)
            if last is not None and last[1] in store.parts and _same(last[0], notices):
                current[index] = last
            else:
                changed.append((index, notices))
        names = store.write_parts(seq, [{n.id: notice_row(n) for n in notices} for _, notices in changed])
        for (index, notices), name in zip(changed, names, strict=True):
            current[index] = (notices, name)
        self._written = current
        body = to_json(attrs.evolve(desk, notices=Map()))
        assert isinstance(body, dict)
        body[PARTS_KEY] = {"notices": [current[index][1] for index in sorted(current)]}
        return body


def _seq(notice: d.Notice) -> int:
    return notice.seq


def _same(before: tuple[d.Notice, ...], now: tuple[d.Notice, ...]) -> bool:
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))


__all__ = ["GROUP", "DeskParts", "PartWriter"]
