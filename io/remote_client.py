# The CLI's side of teams across machines (`harness team --machine M ...`, `watch --machine`): one `team`
# frame to this machine's remote gateway, a Unix socket in the data directory, which carries it sealed to the
# owning machine (io/remote.py). Kept apart from the node so that a CLI call imports only the plain RPC
# client, never the relay, sealing or the trio node.
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from harness.core.bounded_json import parse_own
from harness.io import home as homes
from harness.io.client import Client, Unreachable

GATEWAY_FILE: Final = "gateway.json"
DEFAULT_REQUEST_TIMEOUT: Final = 30.0
REMOTE_WAIT_MARGIN: Final = 15.0  # beyond a `wait` request's own seconds
WATCH_POLL: Final = 1.0  # seconds between `get`s of a remote watch (subscribe does not cross the relay)
WATCH_GET_TIMEOUT: Final = 10.0  # one look of a remote watch; a person closing the view waits at most this


def gateway_socket(home: Path) -> Path:
    """The socket of the running daemon's remote gateway; Unreachable when none runs."""
    try:
        info = parse_own((home / homes.REMOTE_DIR / GATEWAY_FILE).read_text())
    except (OSError, ValueError):
        info = None
    if (
        not isinstance(info, dict)
        or not isinstance(info.get("socket"), str)
        or not isinstance(info.get("pid"), int)
    ):
        raise Unreachable(f"no remote gateway runs for {home}; start the daemon with the relay attached")
    if not homes.pid_alive(info["pid"]):
        raise Unreachable(f"the remote gateway recorded in {home} (pid {info['pid']}) is not running")
    return Path(info["socket"])


def call_remote(
    home: Path,
    machine: str,
    action: str,
    *,
    team_id: str | None = None,
    member_key: str | None = None,
    fields: dict[str, Any] | None = None,
    operation_id: str | None = None,
    timeout: float = DEFAULT_REQUEST_TIMEOUT + REMOTE_WAIT_MARGIN,
) -> Any:
    """`team` RPC to a team owned by paired machine `machine`, through this machine's gateway. Blocking;
    raises the client's errors (RemoteError with `offline`/`unpaired`, Uncertain, Unreachable)."""
    token = homes.read_owner_token(home)
    with Client(gateway_socket(home)) as client:
        return client.request(
            action,
            team_id=team_id,
            member_key=member_key,
            owner_token=token,
            fields={**(fields or {}), "machineId": machine},
            operation_id=operation_id,
            timeout=timeout,
        )


def remote_snapshots(
    home: Path,
    machine: str,
    team_id: str,
    *,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    poll: float = WATCH_POLL,
) -> Iterator[Any]:
    """The snapshots of a team owned by paired machine `machine` as they change (by revision), the current
    one first: `watch --machine`. Ends after `timeout` seconds without a change or once `stop` is set;
    raises the client's errors."""
    stop = stop or threading.Event()
    revision: object = None
    changed = time.monotonic()
    while not stop.is_set():
        team = call_remote(home, machine, "get", team_id=team_id, timeout=WATCH_GET_TIMEOUT)
        now = time.monotonic()
        if not isinstance(team, dict) or team.get("revision") != revision:
            revision = team.get("revision") if isinstance(team, dict) else None
            changed = now
            yield team
        elif timeout is not None and now - changed >= timeout:
            return
        stop.wait(poll if timeout is None else max(0.0, min(poll, changed + timeout - now)))


__all__ = ["call_remote", "gateway_socket", "remote_snapshots"]
