# Read-only health checks and backups of the ledger stores, for `harness doctor` and `harness team export`.
# Before anyone repairs a damaged store by hand they need to see exactly what is wrong (file, byte offset)
# and keep a copy; neither step may change a byte, so nothing here opens a store for writing or takes its
# lock (an export only notes itself in the data directory), and readers tolerate a daemon compacting beside
# them. The doctor also shows what a running daemon's listeners refused and dropped, so an attack on them (or
# a misbehaving client) is visible, and which teams hold more than its limits allow new work to add.
from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from harness.core.records import ID_PATTERN
from harness.io.client import Client, ClientError, locate_socket
from harness.io.fileops import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, FileOps, replace_durably
from harness.io.home import read_owner_token, write_export_note
from harness.io.journal_files import (
    LOCK_NAME,
    TEAMS_DIR,
    CorruptState,
    StoreScan,
    delivery_store_dir,
    ledger_store_dir,
    ledgers_dir,
    scan_store_consistent,
)

EXPORT_FORMAT: Final = "harness.store-export"
EXPORT_VERSION: Final = 1


def _permission_problems(directory: Path, scan: StoreScan | None, ops: FileOps) -> list[str]:
    problems = []
    mode = ops.mode(directory)
    if mode != PRIVATE_DIR_MODE:
        problems.append(f"{directory} has mode {mode:04o}, expected {PRIVATE_DIR_MODE:04o}")
    names = [LOCK_NAME]
    if scan is not None:
        names.extend((*scan.checkpoints, *(s.name for s in scan.segments), *sorted(scan.parts)))
    for name in names:
        path = directory / name
        if path.exists() and (mode := ops.mode(path)) != PRIVATE_FILE_MODE:
            problems.append(f"{path} has mode {mode:04o}, expected {PRIVATE_FILE_MODE:04o}")
    return problems


def inspect_store(directory: Path, *, ops: FileOps | None = None) -> dict[str, object]:
    """Health report of one store directory, JSON-able; changes nothing on disk.

    Keys: directory, ok (no damage and private permissions), lastSeq (the revision recovery reaches),
    checkpointSeq (0 if none), entriesAfterCheckpoint, journalRecords (all complete records on disk),
    segments, checkpoints (file names), parts (how many the checkpoint names), tornTail (bool) with tornTails
    [{file, offset}], tempFiles and strayParts (left by an interrupted checkpoint; the next open removes
    them), damage (null or {file, offset, reason}: the
    first damage found; the daemon refuses this store until it is repaired), permissions (problems).
    """
    ops = ops or FileOps()
    report: dict[str, object] = {"directory": str(directory)}
    if not ops.is_dir(directory):
        report.update(ok=False, damage={"file": str(directory), "offset": 0, "reason": "no such store"})
        return report
    try:
        scan = scan_store_consistent(directory, ops)
    except CorruptState as exc:
        problems = _permission_problems(directory, None, ops)
        report.update(
            ok=False,
            damage={"file": str(exc.path), "offset": exc.offset, "reason": exc.reason},
            permissions=problems,
        )
        return report
    problems = _permission_problems(directory, scan, ops)
    torn = [{"file": s.name, "offset": s.torn_offset} for s in scan.segments if s.torn_offset is not None]
    report.update(
        ok=not problems,
        lastSeq=scan.recovery.last_seq,
        checkpointSeq=scan.recovery.checkpoint_seq,
        entriesAfterCheckpoint=len(scan.recovery.entries),
        journalRecords=sum(s.records for s in scan.segments),
        segments=len(scan.segments),
        checkpoints=list(scan.checkpoints),
        tornTail=bool(torn),
        tornTails=torn,
        parts=len(scan.parts),
        tempFiles=list(scan.temp_files),
        strayParts=list(scan.stray_parts),
        damage=None,
        permissions=problems,
    )
    return report


def inspect_data_dir(
    data_dir: Path, *, team_id: str | None = None, ops: FileOps | None = None
) -> dict[str, object]:
    """Health of every store under `data_dir`/teams (`harness doctor`), or of one team's ledger.

    Returns {"dataDir", "ok", "stores": [report]} where each report is `inspect_store`'s plus "kind"
    ("ledger" with "teamId", or "delivery"). With `team_id`, only that team's ledger is inspected (reported
    as damaged with reason "no such store" if it does not exist). Reads only; safe beside a running daemon.
    """
    ops = ops or FileOps()
    targets: list[tuple[Path, dict[str, object]]] = []
    if team_id is not None:
        targets.append((ledger_store_dir(data_dir, team_id), {"kind": "ledger", "teamId": team_id}))
    else:
        ledgers = ledgers_dir(data_dir)
        if ops.is_dir(ledgers):
            for name in sorted(ops.listdir(ledgers)):
                if ops.is_dir(ledgers / name):
                    targets.append((ledgers / name, {"kind": "ledger", "teamId": name}))
        if ops.is_dir(delivery_store_dir(data_dir)):
            targets.append((delivery_store_dir(data_dir), {"kind": "delivery"}))
    stores = [{**tags, **inspect_store(path, ops=ops)} for path, tags in targets]
    teams = data_dir / TEAMS_DIR
    healthy = all(s["ok"] for s in stores)
    result: dict[str, object] = {"dataDir": str(data_dir), "ok": healthy, "stores": stores}
    if ops.is_dir(teams) and (mode := ops.mode(teams)) != PRIVATE_DIR_MODE:
        result["ok"] = False
        result["permissions"] = [f"{teams} has mode {mode:04o}, expected {PRIVATE_DIR_MODE:04o}"]
    return result


def export_store(directory: Path, out: Path, *, ops: FileOps | None = None) -> dict[str, object]:
    """Write a consistent copy of one store to the new file `out` (mode 0600) and return a summary.

    The copy is one JSON object: {"format": "harness.store-export", "version": 1, "source", "lastSeq",
    "checkpoint": {"seq", "payload"} | null, "entries": [{"seq", "entry"}]} -- exactly what recovery of
    the store would return, so replaying it rebuilds the same state. Safe beside a running daemon (it sees
    a prefix of the acknowledged history). Written by temp file, fsync, rename, directory fsync.
    Raises FileExistsError if `out` exists and CorruptState for a damaged store: copy that directory
    byte for byte instead (e.g. `cp -a`) before any repair.
    """
    ops = ops or FileOps()
    recovery = scan_store_consistent(directory, ops).recovery
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "source": str(directory),
        "lastSeq": recovery.last_seq,
        "checkpoint": (
            None
            if recovery.checkpoint is None
            else {"seq": recovery.checkpoint_seq, "payload": recovery.checkpoint}
        ),
        "entries": [{"seq": e.seq, "entry": e.body} for e in recovery.entries],
    }
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite a backup")
    replace_durably(ops, out, data, out.with_name(out.name + ".tmp"))
    return {
        "out": str(out),
        "source": str(directory),
        "bytes": len(data),
        "lastSeq": recovery.last_seq,
        "checkpointSeq": recovery.checkpoint_seq,
        "entries": len(recovery.entries),
    }


class NoLedger(LookupError):
    """The team named has no ledger in the data directory (or the name is not a team id)."""


def export_team(data_dir: Path, team_id: str, out: Path, *, ops: FileOps | None = None) -> dict[str, object]:
    """`export_store` of team `team_id`'s ledger under `data_dir` (`harness team --team ID export --out`),
    noted in the data directory so that `team delete` can tell a current backup exists."""
    ops = ops or FileOps()
    if not ID_PATTERN.fullmatch(team_id):  # it names a directory to read and a note to write: never a path
        raise NoLedger(f"{team_id!r} is not a team id")
    if not ops.is_dir(ledger_store_dir(data_dir, team_id)):
        raise NoLedger(f"no ledger of team {team_id!r} in {data_dir}")
    result = export_store(ledger_store_dir(data_dir, team_id), out, ops=ops)
    note = {"out": str(out.absolute()), "lastSeq": result["lastSeq"], "bytes": result["bytes"]}
    write_export_note(data_dir, team_id, note)
    return result


def daemon_listeners(data_dir: Path) -> dict[str, object]:
    """The running daemon's own account of its listeners (`daemon_status`): per listener (rpc, gateway) the
    connections accepted and open, peers refused (another user), frames refused, connections dropped (cap,
    deadlines) and internal errors. {"running": false, "detail"} when no daemon answers."""
    try:
        where, _ = locate_socket(data_dir, None)
        with Client(where) as client:
            status = client.request("daemon_status", owner_token=read_owner_token(data_dir))
    except ClientError as error:
        return {"running": False, "detail": error.detail}
    return {"running": True, **status}


def over_limit_lines(daemon: dict[str, object]) -> list[str]:
    """One line per bound a team holds more of than the running daemon's limits (lowered since it was
    filled): that team refuses new work of that kind and keeps everything it holds."""
    rows = daemon.get("overLimits")
    lines = []
    for row in rows if isinstance(rows, list) else []:
        whose = "the owner" if row["teamId"] is None else f"team {row['teamId']}"
        subject = f" ({row['subject']})" if row.get("subject") else ""
        lines.append(
            f"{whose} is over {row['bound']}: {row['use']}/{row['limit']}{subject}; new work of that kind is "
            f"refused, nothing held is lost. {row['advice']}"
        )
    return lines
