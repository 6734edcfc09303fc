# The seed's journal contract for a team board, as one pure function over the records a store holds, so the
# rules can be read, property-tested and model-checked without a disk. Seed 002: "Recovery accepts only valid
# journalVersion: 1 checkpoint and delta entries. Unversioned snapshots are ignored; no legacy field repair,
# dependency-state migration or compatibility aliases are provided. Inconsistent checkpoints and deltas are
# rejected as a whole, while earlier valid entries remain recoverable. Delta revisions must connect to the
# recovered checkpoint." and "The active branch is scanned back to a recoverable checkpoint, including beyond
# the initial 10,000-entry window when necessary."
#
# A record is a checkpoint `{"journalVersion": 1, "board": BOARD}` or a delta `{"journalVersion": 1,
# "revision": N, "command": COMMAND}` (N: the board's revision after the command). Recovery starts from the
# newest valid checkpoint (scanning back over every record, however many), or from the empty board when
# none is valid, and applies the deltas after it while each connects (revision one more than the board's),
# decodes, belongs to the team and is accepted by `step`; the first delta that does not is rejected and so is
# every later one (they cannot connect to what was recovered). Nothing is repaired.
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from harness.core.board import (
    DEFAULT_BOARD_LIMITS,
    Board,
    BoardCommand,
    BoardLimits,
    empty_board,
    step,
)
from harness.core.board_invariants import board_violations
from harness.core.codec import (
    BOARD_JOURNAL_VERSION,
    board_command_from_json,
    board_command_to_json,
    board_from_json,
    board_to_json,
)
from harness.core.errors import Rejected

# One record as the store returned it: its sequence number and its JSON body.
Record = tuple[int, Mapping[str, object]]

CHECKPOINT_FIELD: Final = "board"
DELTA_FIELD: Final = "command"


@attrs.frozen
class Refused:
    """A record recovery did not use, and why (ignored: an unversioned snapshot, which the seed ignores)."""

    seq: int
    reason: str
    ignored: bool = False


@attrs.frozen
class Recovered:
    """What a board's records amount to. `board` is None when the store held nothing usable and no delta
    connected to the empty board; `checkpoint` is the valid checkpoint recovery started from (seq, board)."""

    board: Board | None
    checkpoint: tuple[int, Board] | None
    applied: int  # deltas applied after the checkpoint
    refused: tuple[Refused, ...]
    last_at: int  # the latest command time among the applied deltas

    @property
    def rejected(self) -> tuple[Refused, ...]:
        return tuple(refusal for refusal in self.refused if not refusal.ignored)


def checkpoint_record(board: Board) -> dict[str, object]:
    return {"journalVersion": BOARD_JOURNAL_VERSION, CHECKPOINT_FIELD: board_to_json(board)}


def delta_record(command: BoardCommand, revision: int) -> dict[str, object]:
    return {
        "journalVersion": BOARD_JOURNAL_VERSION,
        "revision": revision,
        DELTA_FIELD: board_command_to_json(command),
    }


def _is_checkpoint(body: Mapping[str, object]) -> bool:
    return CHECKPOINT_FIELD in body and DELTA_FIELD not in body


def _checkpoint(team_id: str, body: Mapping[str, object], limits: BoardLimits) -> Board | str:
    """The board a checkpoint record holds, or why it is not a valid one."""
    board = board_from_json(body.get(CHECKPOINT_FIELD))
    if isinstance(board, Rejected):
        return f"checkpoint is not a board: {board.detail}"
    if board.session.team_id != team_id:
        return f"checkpoint belongs to team {board.session.team_id!r}"
    broken = board_violations(board, limits)
    if broken:  # derived states, indexes or the measure disagree with the records: not repaired
        return f"checkpoint is inconsistent: {': '.join(broken[0])}"
    return board


def _delta(
    team_id: str, board: Board | None, body: Mapping[str, object], limits: BoardLimits
) -> tuple[Board, BoardCommand] | str:
    """The board after one delta record, or why the delta does not connect to `board`."""
    if body.get("journalVersion") != BOARD_JOURNAL_VERSION:
        return "delta is not journalVersion 1"
    command = board_command_from_json(body.get(DELTA_FIELD))
    if isinstance(command, Rejected):
        return f"delta is not a board command: {command.detail}"
    if command.session.team_id != team_id:
        return f"delta belongs to team {command.session.team_id!r}"
    before = board if board is not None else empty_board(command.session)
    revision = body.get("revision")
    if type(revision) is not int or revision != before.revision + 1:
        return f"delta revision {revision!r} does not connect to revision {before.revision}"
    outcome = step(before, command, limits)
    if isinstance(outcome, Rejected):
        return f"delta was refused on replay ({outcome.code}: {outcome.detail})"
    if outcome.state.revision != revision:
        return f"delta changed nothing, so it cannot reach revision {revision}"
    return outcome.state, command


def _newest_checkpoint(
    team_id: str, records: Sequence[Record], limits: BoardLimits
) -> tuple[int | None, Board | None, list[Refused]]:
    """Scan back over every record to the newest valid checkpoint: its index and board; what was skipped."""
    refused: list[Refused] = []
    for index in range(len(records) - 1, -1, -1):
        seq, body = records[index]
        if not _is_checkpoint(body):
            continue
        if body.get("journalVersion") != BOARD_JOURNAL_VERSION:
            refused.append(Refused(seq, "unversioned snapshot", ignored=True))
            continue
        found = _checkpoint(team_id, body, limits)
        if isinstance(found, str):
            refused.append(Refused(seq, found))
            continue
        return index, found, refused
    return None, None, refused


def replay_limits(limits: BoardLimits) -> BoardLimits:
    """`limits` as a journal is replayed under: a member's share (the `member_*` bounds) is an admission rule
    made after boards were journaled, so a delta accepted before it is accepted again; every share stays
    within the board-wide bound it is a part of."""
    return attrs.evolve(
        limits,
        member_operations=limits.operations,
        member_tasks=limits.tasks,
        member_notes=limits.notes,
        member_bytes=limits.state_bytes,
    )


def recover(
    team_id: str, records: Sequence[Record], limits: BoardLimits = DEFAULT_BOARD_LIMITS
) -> Recovered:
    limits = replay_limits(limits)
    start, board, refused = _newest_checkpoint(team_id, records, limits)
    checkpoint = None if start is None or board is None else (records[start][0], board)
    applied, last_at, broken = 0, 0, False
    for seq, body in records[(start + 1 if start is not None else 0):]:
        if _is_checkpoint(body):
            continue  # a later checkpoint was refused by the scan; the deltas go on connecting past it
        if broken:
            refused.append(Refused(seq, "follows a rejected delta, so it cannot connect"))
            continue
        stepped = _delta(team_id, board, body, limits)
        if isinstance(stepped, str):
            refused.append(Refused(seq, stepped))
            broken = True
            continue
        board, command = stepped
        applied += 1
        last_at = max(last_at, command.at)
    refused.sort(key=lambda refusal: refusal.seq)
    return Recovered(board, checkpoint, applied, tuple(refused), last_at)

