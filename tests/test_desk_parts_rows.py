# A desk's recovery at its bound cost three JSON parses of its checkpoint, most of it on the 17 field names
# of each of its 10,000 notices. The parts of a desk checkpoint now hold each notice as a row (core/codec.py
# `notice_row`), decoded by position. What must hold: a desk the reducer built comes back from its parts
# exactly as from its object form; parts of objects (what the desk wrote before rows) still recover, mixed
# with parts of rows, and the first checkpoint after a start writes them again as rows; a row that is no
# notice, under a good checksum, stops the desk as a checkpoint that is no desk always did.
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import delivery as d
from harness.core.codec import NOTICE_COLUMNS, desk_from_json, from_json, notice_row, to_json
from harness.core.errors import ErrorCode
from harness.core.limits import DEFAULT_LIMITS
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from harness.io import desk_parts
from harness.io.daemon import now_ms
from harness.io.desk_parts import GROUP, DeskParts
from harness.io.desk_runner import DeskRunner, replay_desk
from harness.io.fileops import FileOps
from harness.io.journal import JournalStore
from harness.io.journal_files import PARTS_KEY, delivery_store_dir, encode_record, scan_store
from harness.io.journaled import ReplayError
from harness.io.team_delivery import DeliveryReport
from tests.journal_support import lone_desk

MACHINE = "m1"
AGENTS = ("a1", "a2", "a3")
DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine


def wire(value: Any) -> Any:
    return json.loads(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _stepped(desk: d.Desk, *commands: d.DeskCommand) -> d.Desk:
    for command in commands:
        outcome = d.step(desk, command, DEFAULT_LIMITS)
        assert isinstance(outcome, Accepted), (command, outcome)
        desk = outcome.state
    return desk


def _submit(
    n: int, agent: str = "a1", kind: NoticeKind = NoticeKind.QUESTION, at: int | None = None
) -> d.Submit:
    team, notice = f"t{n % 2}", f"t{n % 2}/q{n}/{kind.value}"
    text = f"[team] q{n}: ünïcode \u2028 and a \"quote\"\n" * (1 + n % 3)
    return d.Submit(n if at is None else at, team, notice, kind, f"q{n}", "m1", MACHINE, agent, 10**15, text)


def _desk(notices: int) -> d.Desk:
    """A desk of `notices` records in the states a desk at its bound holds: most read, some written and
    unconfirmed, some declared lost and written again, the newest queued, one withdrawn."""
    desk = d.empty_desk(MACHINE)
    now = 1_000
    for n in range(1, notices + 1):
        agent = AGENTS[n % 3]
        desk = _stepped(desk, _submit(n, agent, at=now))
        now += 1
        if len(desk.sessions[agent].queue) < 4:
            continue
        head = desk.sessions[agent].queue[0]
        now += DEFAULT_LIMITS.write_settle_ms
        uncertain = n % 5 == 0 and desk.notices[head].lost_at is None
        desk = _stepped(
            desk,
            d.Observe(now, agent, d.Observed.IDLE),
            d.WriteStarted(now + 1, head, d.Observed.IDLE, now),
            d.WriteFinished(now + 2, head, d.WriteResult.UNCERTAIN if uncertain else d.WriteResult.OK),
        )
        if not uncertain:
            desk = _stepped(desk, d.InboxRead(now + 3, (head,)))
        elif n % 10 == 0:
            desk = _stepped(desk, d.Inspect(now + 3, head, landed=False))  # queued again, its loss recorded
        now += 4
    newest = max(desk.notices.values(), key=lambda notice: notice.seq)
    return _stepped(desk, d.Withdraw(now, newest.id))


async def _checkpoint(store: JournalStore, parts: DeskParts, desk: d.Desk) -> None:
    seq = await store.append({"n": store.journaled_seq + 1})
    await store.checkpoint(seq, lambda: parts.payload(store, seq, desk))


def _part_files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("part-*.json")}


def _part(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_bytes())
    members: dict[str, Any] = record["part"]
    return members


def _old_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts as the desk wrote them before rows: `{n.id: to_json(n) for n in notices}`."""
    monkeypatch.setattr(desk_parts, "notice_row", to_json)


async def test_a_part_holds_its_notices_as_rows(tmp_path: Path) -> None:
    desk = _desk(GROUP + 20)
    store, _ = await JournalStore.open(tmp_path)
    await _checkpoint(store, DeskParts(), desk)
    await store.aclose()
    held = {}
    for name in _part_files(tmp_path):
        held.update(_part(tmp_path / name))
    assert held == {key: wire(notice_row(notice)) for key, notice in desk.notices.items()}
    assert {len(row) for row in held.values()} == {len(NOTICE_COLUMNS)}
    recovery = scan_store(tmp_path, FileOps()).recovery
    assert replay_desk(MACHINE, recovery, DEFAULT_LIMITS) == desk


async def test_parts_of_objects_recover_beside_parts_of_rows_and_are_written_again_as_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = _desk(3 * GROUP - 2)  # three groups (seq 1 on), the newest with room for one more
    store, _ = await JournalStore.open(tmp_path)
    with monkeypatch.context() as old:
        _old_parts(old)
        await _checkpoint(store, parts := DeskParts(), desk)
    objects = _part_files(tmp_path)
    assert all(type(m) is dict for name in objects for m in _part(tmp_path / name).values())
    changed = _stepped(desk, _submit(10**6, "a9", at=10**7))  # joins the newest group, written as rows
    await _checkpoint(store, parts, changed)
    await store.aclose()
    rows = _part_files(tmp_path) - objects
    assert len(rows) == 1 and len(objects & _part_files(tmp_path)) == 2
    assert all(type(m) is list for m in _part(tmp_path / next(iter(rows))).values())

    reopened, recovery = await JournalStore.open(tmp_path)
    seeded = DeskParts()
    replayed = replay_desk(MACHINE, recovery, DEFAULT_LIMITS, seeded)
    assert replayed == changed
    assert replayed == from_json(wire(to_json(changed)), d.Desk)
    kept = (tmp_path / next(iter(rows))).stat().st_ino
    await _checkpoint(reopened, seeded, replayed)  # nothing changed: only the parts of objects are written
    await reopened.aclose()
    now = _part_files(tmp_path)
    assert not objects & now and rows <= now and (tmp_path / next(iter(rows))).stat().st_ino == kept
    assert all(type(m) is list for name in now for m in _part(tmp_path / name).values())
    assert replay_desk(MACHINE, scan_store(tmp_path, FileOps()).recovery, DEFAULT_LIMITS) == changed


async def test_a_whole_checkpoint_of_objects_still_recovers(tmp_path: Path) -> None:
    """`daemon prune` checkpoints the whole desk, its notices objects."""
    desk = _desk(40)
    store, _ = await JournalStore.open(tmp_path)
    seq = await store.append({"n": 1})
    await store.checkpoint(seq, to_json(desk))
    await store.aclose()
    recovery = scan_store(tmp_path, FileOps()).recovery
    assert _part_files(tmp_path) == set() and replay_desk(MACHINE, recovery, DEFAULT_LIMITS) == desk


def _rewrite_part(path: Path, change: Any) -> None:
    """The part at `path` with `change` applied to its members, under a checksum that vouches for it."""
    record = json.loads(path.read_bytes())
    members = record["part"]
    change(members)
    path.write_bytes(encode_record("part", record["seq"], members) + b"\n")


def _first_row(members: dict[str, Any]) -> list[Any]:
    row: list[Any] = members[min(members)]
    return row


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda members: _first_row(members).__setitem__(NOTICE_COLUMNS.index("seq"), True), ".seq"),
        (lambda members: _first_row(members).__setitem__(NOTICE_COLUMNS.index("state"), "sent"), ".state"),
        (lambda members: _first_row(members).pop(), "is a row of 16 values, not 17"),
        (lambda members: _first_row(members).append(None), "is a row of 18 values, not 17"),
        (lambda members: members.__setitem__(min(members), "a notice"), "notices"),
    ],
)
async def test_a_row_that_is_no_notice_is_damage(tmp_path: Path, change: Any, detail: str) -> None:
    """Under a good checksum the store opens; the checkpoint is no desk, as a damaged object always made
    it, and the store is left as it is."""
    store, _ = await JournalStore.open(tmp_path)
    await _checkpoint(store, DeskParts(), _desk(GROUP + 1))
    await store.aclose()
    _rewrite_part(tmp_path / sorted(_part_files(tmp_path))[0], change)
    recovery = scan_store(tmp_path, FileOps()).recovery
    with pytest.raises(ReplayError, match=f"checkpoint {recovery.checkpoint_seq} is not a desk: ") as refused:
        replay_desk(MACHINE, recovery, DEFAULT_LIMITS)
    assert detail in str(refused.value)
    assert recovery.checkpoint is not None and PARTS_KEY not in recovery.checkpoint


async def test_the_daemons_desk_stops_on_a_damaged_row(tmp_path: Path) -> None:
    runner = lone_desk(tmp_path, MACHINE, every=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        with trio.fail_after(DEADLINE):
            for n in range(1, 12):
                await runner.apply(_submit(n))
        runner.stop()
    directory = delivery_store_dir(tmp_path / "home")
    part = directory / sorted(_part_files(directory))[0]
    _rewrite_part(part, lambda members: _first_row(members).__setitem__(NOTICE_COLUMNS.index("kind"), "memo"))

    async def report(one: DeliveryReport) -> None:
        pass

    again = DeskRunner(tmp_path / "home", MACHINE, report, None, clock=now_ms)  # the next start
    async with trio.open_nursery() as nursery:
        await nursery.start(again.run)
        again.stop()
    assert again.unavailable is not None
    assert again.unavailable.startswith(f"{ErrorCode.CORRUPT_STATE}: ")
    assert "is not a desk" in again.unavailable


class MemoryParts:
    """A store's `write_parts` without files: what a part holds is what its JSON parses to."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, Any]] = {}

    @property
    def parts(self) -> frozenset[str]:
        return frozenset(self.held)

    def write_parts(self, seq: int, parts: list[Mapping[str, object]]) -> list[str]:
        names = []
        for members in parts:
            name = f"part-{len(self.held):032x}.json"
            self.held[name] = wire(members)
            names.append(name)
        return names

    def joined(self, payload: dict[str, object]) -> dict[str, Any]:
        """The payload as a scan gives it back: parsed, the members of its parts in its fields."""
        data: dict[str, Any] = wire(payload)
        for field, names in data.pop(PARTS_KEY).items():
            for name in names:
                data[field].update(self.held[name])
        return data


@st.composite
def reducer_desks(draw: st.DrawFn) -> d.Desk:
    """A desk the reducer built from a drawn stream of commands (those it refuses are left out)."""
    desk = d.empty_desk(MACHINE)
    now = 1_000
    for _ in range(draw(st.integers(1, 60))):
        now += draw(st.sampled_from([1, DEFAULT_LIMITS.write_settle_ms]))
        ids = sorted(desk.notices)
        some = st.sampled_from(ids) if ids else st.just("none")
        agent = draw(st.sampled_from(AGENTS))
        command: d.DeskCommand = draw(
            st.sampled_from(
                [
                    _submit(len(ids) + 1, agent, draw(st.sampled_from(NoticeKind)), now),
                    d.Observe(now, agent, draw(st.sampled_from(d.Observed))),
                    d.WriteStarted(now, draw(some), d.Observed.IDLE, now - 1),
                    d.WriteFinished(now, draw(some), draw(st.sampled_from(d.WriteResult))),
                    d.TurnObserved(now, draw(some)),
                    d.InboxRead(now, (draw(some),)),
                    d.Inspect(now, draw(some), landed=draw(st.booleans())),
                    d.Hold(now, draw(st.sampled_from(["t0", "t1"]))),
                    d.Release(now, draw(st.sampled_from(["t0", "t1"]))),
                    d.Withdraw(now, draw(some)),
                    d.Restart(now),
                    d.Tick(now + draw(st.integers(0, 10**9))),
                ]
            )
        )
        outcome = d.step(desk, command, DEFAULT_LIMITS)
        if isinstance(outcome, Accepted):
            desk = outcome.state
    return desk


@settings(max_examples=60, deadline=None)
@given(reducer_desks(), st.data())
def test_a_reducer_built_desk_comes_back_from_its_parts_as_from_its_object_form(
    desk: d.Desk, data: st.DataObject
) -> None:
    store, parts = MemoryParts(), DeskParts()
    payload = parts.payload(store, 1, desk)
    decoded = desk_from_json(store.joined(payload))
    objects = from_json(wire(to_json(desk)), d.Desk)
    assert decoded == desk == objects and repr(decoded) == repr(objects)
    # A later desk of the same stream, some of its parts kept: the same.
    later = data.draw(reducer_desks())
    merged = d.Desk(MACHINE, desk.notices.update(later.notices), later.sessions, later.held_teams)
    decoded = desk_from_json(store.joined(parts.payload(store, 2, merged)))
    assert decoded == merged and repr(decoded) == repr(from_json(wire(to_json(merged)), d.Desk))
