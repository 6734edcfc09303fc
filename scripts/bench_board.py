#!/usr/bin/env python3
# Benchmark of the team board (issue 20): board commands per second on a board holding about 8 MiB of state
# (the seed's state limit), in the pure reducer and made durable one at a time as the daemon's board runner
# does, and the recovery of a 12,000-entry board journal (seed 002's scan beyond 10,000 entries). Each figure
# is printed beside the team ledger's same figure measured in this run (a full team's ask/reply mix, its own
# journal), as a ratio: the machine is shared and noisy, so ratios, not seconds, are what to compare.
from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
from bench_core import MEMBERS, TEAM, build_base, cycle_commands  # type: ignore[import-not-found]

from harness.core import board as b
from harness.core.board_recovery import Record, checkpoint_record, delta_record, recover
from harness.core.codec import command_to_json
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import Ledger
from harness.core.team import step as team_step
from harness.io.journal import JournalStore
from harness.io.journal_files import MAX_CHECKPOINT_BYTES, Recovery
from harness.io.ledger_runner import replay as replay_ledger

SESSION = b.Session("bench-board", 1)
LIMITS = b.BoardLimits(operations=20_000)
NOTE = "n" * 8_000
OPERATION_BYTES = 120  # what one retained take/leave role operation adds to the measure, at most


def full_board(headroom: int) -> b.Board:
    """A board near 8 MiB: two members and notes of 8,000 characters until the measure is `headroom` bytes
    under the limit (room for the operations the benchmark then retains)."""
    board = _board_step(b.empty_board(SESSION), b.SetMembers("members", SESSION, None, 1, ("alice", "bob")))
    board = _board_step(board, b.DefineRole("role", SESSION, None, 2, "qa", "tests"))
    n = 0
    while board.bytes + 2 * len(NOTE) + headroom < LIMITS.state_bytes:
        to = b.Addressee(b.AddresseeKind.MEMBER, "bob")
        board = _board_step(board, b.SendNote(f"note-{n}", SESSION, "alice", 3 + n, to, NOTE))
        n += 1
    return board


def role_commands(board: b.Board, count: int) -> list[b.BoardCommand]:
    """`count` commands that each change the board: alice takes and leaves role qa in turn."""
    at = board.revision + 10
    return [
        (b.LeaveRole if n % 2 else b.TakeRole)(f"role-{board.revision}-{n}", SESSION, "alice", at + n, "qa")
        for n in range(count)
    ]


def _board_step(board: b.Board, command: b.BoardCommand) -> b.Board:
    outcome = b.step(board, command, LIMITS)
    if isinstance(outcome, Rejected) or not outcome.changed:
        raise SystemExit(f"benchmark board command not applied: {outcome}")
    return outcome.state


def _team_step(ledger: Ledger, command: object) -> Ledger:
    outcome = team_step(ledger, command, DEFAULT_LIMITS)  # type: ignore[arg-type]
    if isinstance(outcome, Rejected):
        raise SystemExit(f"benchmark team command rejected: {outcome}")
    return outcome.state


def rate(count: int, body: Callable[[], None]) -> float:
    started = time.perf_counter()
    body()
    return count / (time.perf_counter() - started)


Stepped = tuple[Callable[[], object], dict[str, object]]


async def durable_rate(directory: Path, entries: Sequence[Stepped]) -> float:
    """Step then append, one command at a time, each durable before the next (the board runner's order)."""
    store, _ = await JournalStore.open(directory)
    async with store:
        started = time.perf_counter()
        for stepped, body in entries:
            stepped()
            await store.append(body)
        return len(entries) / (time.perf_counter() - started)


async def stored(directory: Path, bodies: Sequence[dict[str, object]]) -> None:
    store, _ = await JournalStore.open(directory)
    async with store:
        for body in bodies:
            await store.append(body, max_bytes=MAX_CHECKPOINT_BYTES)


async def reopen(directory: Path) -> tuple[float, Recovery]:
    started = time.perf_counter()
    store, recovery = await JournalStore.open(directory)
    await store.aclose()
    return time.perf_counter() - started, recovery


def records_of(recovery: Recovery) -> list[Record]:
    return [(entry.seq, entry.body) for entry in recovery.entries]


async def main(commands: int, journal: int) -> None:
    print(f"building a board near {LIMITS.state_bytes / 2**20:.0f} MiB and a full team ...", flush=True)
    board = full_board(headroom=OPERATION_BYTES * max(commands, journal))
    questions = commands // 8 + 1
    prefill = max(0, 490 - questions)  # the team ends the mix near its 500 retained exchanges
    ledger, now = build_base(prefill)
    print(f"board: {board.bytes / 2**20:.2f} MiB measure, {len(board.notes)} notes; "
          f"team: {prefill} exchanges, then {questions} more")

    mix = cycle_commands(now, questions)[:commands]
    board_cmds = role_commands(board, commands)

    def run_board() -> None:
        state = board
        for command in board_cmds:
            state = _board_step(state, command)

    def run_team() -> None:
        state = ledger
        for command in mix:
            state = _team_step(state, command)

    board_rate = max(rate(len(board_cmds), run_board) for _ in range(3))
    team_rate = max(rate(len(mix), run_team) for _ in range(3))

    with tempfile.TemporaryDirectory(prefix="bench-board-") as temp:
        root = Path(temp)
        states = {"board": board, "team": ledger}

        def board_stepper(command: b.BoardCommand) -> Callable[[], object]:
            def stepped() -> object:
                states["board"] = _board_step(states["board"], command)  # type: ignore[arg-type]
                return None
            return stepped

        def team_stepper(command: object) -> Callable[[], object]:
            def stepped() -> object:
                states["team"] = _team_step(states["team"], command)  # type: ignore[arg-type]
                return None
            return stepped

        durable_board = await durable_rate(
            root / "board-durable",
            [
                (board_stepper(cmd), delta_record(cmd, board.revision + n + 1))
                for n, cmd in enumerate(board_cmds)
            ],
        )
        durable_team = await durable_rate(
            root / "team-durable", [(team_stepper(cmd), command_to_json(cmd)) for cmd in mix]
        )

        # Recovery: a checkpoint of the full board, then `journal` deltas after it; the ledger's journal of
        # the same number of entries (its ask/reply mix from the team's creation).
        state, bodies = board, [checkpoint_record(board)]
        for n, command in enumerate(role_commands(board, journal)):
            state = _board_step(state, command)
            bodies.append(delta_record(command, board.revision + n + 1))
        await stored(root / "board-journal", bodies)
        team_questions = min(journal, 400 * 8) // 8  # a team retains at most 500 exchanges
        team_bodies = [command_to_json(_creation())]
        team_bodies += [command_to_json(command) for command in cycle_commands(0, team_questions)]
        await stored(root / "team-journal", team_bodies)
        board_open, board_found = await reopen(root / "board-journal")
        started = time.perf_counter()
        recovered = recover("bench-board", records_of(board_found), LIMITS)
        board_replay = time.perf_counter() - started
        assert recovered.board == state and recovered.applied == journal, "board recovery is not exact"
        team_open, team_found = await reopen(root / "team-journal")
        started = time.perf_counter()
        replay_ledger(TEAM, team_found, DEFAULT_LIMITS)
        team_replay = time.perf_counter() - started
    board_entries, team_entries = len(bodies), len(team_bodies)
    print(f"journals: board {board_entries:,} records (a checkpoint of the full board first), team "
          f"{team_entries:,} entries (per-entry figures below)")

    def line(what: str, board_figure: float, team_figure: float, unit: str) -> None:
        print(f"{what:<44} board {board_figure:>10,.1f} {unit:<10} team {team_figure:>10,.1f}  "
              f"ratio {board_figure / team_figure:5.2f}")

    line("commands/s, pure reducer", board_rate, team_rate, "cmd/s")
    line("commands/s, durable one at a time", durable_board, durable_team, "cmd/s")
    read_ms, replay_ms = board_open * 1e3, board_replay * 1e3
    print(f"recovery of the board journal: read {read_ms:,.0f} ms, replay {replay_ms:,.0f} ms, checkpoint in")
    board_n, team_n = board_entries / 1e6, team_entries / 1e6  # seconds per entry, in microseconds
    line("recovery read, per entry", board_open / board_n, team_open / team_n, "us")
    line("recovery replay, per entry", board_replay / board_n, team_replay / team_n, "us")


def _creation() -> object:
    """The command that creates the benchmark team as bench_core's `build_base` does."""
    from harness.core import commands as c

    members = tuple(
        c.NewMember(f"m{n}", "machine", f"a{n}", f"agent-{n}", "role", f"key{n}") for n in range(MEMBERS)
    )
    return c.CreateTeam(0, TEAM, "bench team", members)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Board throughput at 8 MiB and journal recovery.")
    parser.add_argument("--commands", type=int, default=2_000)
    parser.add_argument("--journal", type=int, default=12_000)
    args = parser.parse_args()
    trio.run(main, args.commands, args.journal)
