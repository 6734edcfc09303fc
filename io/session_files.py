# What a session's runner (io/session_runner.py) leaves in the data directory, read back: `harness session
# status` only reads status files and needs none of the runner's trio, so this module imports none.
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TypeGuard

from harness.core.bounded_json import parse_own

SESSIONS_DIR: Final = "sessions"
STATUS_FILE: Final = "status.json"


def session_dir(home: Path, session_id: str) -> Path:
    return home / SESSIONS_DIR / session_id


def sessions(home: Path) -> Iterator[str]:
    root = home / SESSIONS_DIR
    yield from sorted(entry.name for entry in root.iterdir() if entry.is_dir()) if root.is_dir() else ()


class StatusUnreadable(ValueError):
    """A session's status file is there and cannot be read as one (damaged, or not a file)."""


def read_status(home: Path, session_id: str) -> dict[str, Any] | None:
    """The last status the session's runner wrote, or None when there is no such session (nor a data
    directory to hold one). Raises StatusUnreadable for a status file that cannot be read as a status."""
    path = session_dir(home, session_id) / STATUS_FILE
    try:
        data = parse_own(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as error:
        raise StatusUnreadable(f"cannot read {path}: {error}") from None
    if not _is_status(data):
        raise StatusUnreadable(f"{path} is not a session status")
    return data


_STATUS_TEXTS: Final = ("sessionId", "mode", "lead", "state", "trace")
_ASK_TEXTS: Final = ("id", "asker", "to", "state")


def _is_status(data: object) -> TypeGuard[dict[str, Any]]:
    """The shape io/session_runner.py's `status_view` writes, as far as readers rely on it."""
    if not isinstance(data, dict) or not all(isinstance(data.get(key), str) for key in _STATUS_TEXTS):
        return False
    asks, reminders, violations = data.get("asks"), data.get("reminders"), data.get("violations")
    if not (isinstance(asks, list) and isinstance(reminders, list) and isinstance(violations, list)):
        return False
    texts = all(isinstance(v, str) for v in violations)
    return texts and all(
        isinstance(a, dict) and all(isinstance(a.get(k), str) for k in _ASK_TEXTS) for a in asks
    )
