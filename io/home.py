# The daemon's data directory: where it is, and the small private files that let a client find a running
# daemon (daemon.json, which names its socket), prove owner authority (the owner token) and act as a member
# (the member key files an introduction names, so that no key travels on a command line). Everything in it
# is private to one user, and so must the directory be. Clients import this on every CLI call, so it uses the
# standard library only (platformdirs is imported only when no directory was named).
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from harness.core.bounded_json import parse_own
from harness.io import fileops
from harness.io.fileops import FileOps, replace_durably

PRIVATE_DIR_MODE = fileops.PRIVATE_DIR_MODE
PRIVATE_FILE_MODE = fileops.PRIVATE_FILE_MODE

HOME_ENV = "HARNESS_HOME"
DAEMON_FILE = "daemon.json"
LOCK_FILE = "daemon.lock"
TOKEN_FILE = "owner-token"
MACHINE_FILE = "machine-id"
LOG_FILE = "daemon.log"
SOCKET_FILE = "daemon.sock"
KEYS_DIR = "keys"
REMOTE_DIR = "remote"  # what this machine keeps of its pairings (io/pairing.py) and its remote gateway
KEY_SUFFIX = ".key"
EXPORTS_DIR = "exports"  # one note per team: the last export written (`team delete` requires a current one)
DELETED_FILE = "deleted-teams.json"  # teams deleted here: the desk prune knows nothing owes their notices


class HomeError(Exception):
    """The data directory cannot be used (bad permissions, unreadable file)."""


class DaemonRunning(HomeError):
    """Another daemon holds this data directory's lock."""


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """`--home`, else HARNESS_HOME, else the platform's user data directory."""
    if home is not None and str(home):
        return Path(home).expanduser().absolute()
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().absolute()
    import platformdirs

    return Path(platformdirs.user_data_dir("harness", appauthor=False))


def ensure_home(home: Path) -> Path:
    """Create the data directory (0700, and each missing parent 0700 too) if needed. An existing one must be
    this user's own and private: a shared directory (/tmp's 1777, a group's 0775, a readable 0755) is
    refused, never taken over, since others could have placed files (or links) in it or read what it holds.
    And no other user may be able to replace it (see `_replaceable`)."""
    try:
        _make_private(home)
        found = home.stat()
    except OSError as error:
        raise HomeError(f"cannot use {home} as the data directory: {error.strerror or error}") from None
    if not stat.S_ISDIR(found.st_mode):
        raise HomeError(f"{home} is not a directory")
    mode = stat.S_IMODE(found.st_mode)
    if found.st_uid != os.geteuid() or mode & 0o077:
        raise HomeError(
            f"{home} is not a private directory of this user (owner uid {found.st_uid}, mode {mode:04o}); "
            "name a directory of your own that only you can use (chmod 700), or a new one (created 0700)"
        )
    why = _replaceable(home)
    if why is not None:
        raise HomeError(
            f"another user could replace the data directory {home}: {why}; name one whose every parent "
            "only you or root can write (or that is sticky, like /tmp)"
        )
    return home


def _make_private(home: Path) -> None:
    """Create `home` and each of its missing parents, each 0700: a parent made with the umask's mode (0777
    under umask 0) let another user rename the data directory away and put its own in its place."""
    missing = []
    for path in (home, *home.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)


def _replaceable(home: Path) -> str | None:
    """Why another user could rename the data directory (or a directory above it) and put one of its own
    there, or None. As ssh's StrictModes: every directory above its real path belongs to this user or root
    and no one else may write it, unless it is sticky (/tmp: others cannot rename what is not theirs); and
    no link on the way as named belongs to another user (its owner could aim it elsewhere)."""
    me = os.geteuid()
    for directory in home.resolve().parents:
        found = directory.stat()
        mode = stat.S_IMODE(found.st_mode)
        if found.st_uid not in (me, 0):
            return f"{directory} belongs to uid {found.st_uid}"
        if mode & 0o022 and not mode & stat.S_ISVTX:
            return f"others may write {directory} (mode {mode:04o})"
    for path in (home, *home.parents):
        linked = path.lstat()
        if stat.S_ISLNK(linked.st_mode) and linked.st_uid not in (me, 0):
            return f"{path} is a link of uid {linked.st_uid}"
    return None


def read_or_create_secret(path: Path, draw: Callable[[], str]) -> str:
    """A private value (0600) drawn once by `draw`, created with O_EXCL so two racing creators agree, and then
    kept."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        value = path.read_text().strip()
        if not value:
            raise HomeError(f"{path} is empty; delete it to draw a new one") from None
        return value
    value = draw()
    try:
        os.write(fd, (value + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return value


def owner_token(home: Path) -> str:
    """The owner's secret: whoever can read this 0600 file is the same OS user as the daemon."""
    return read_or_create_secret(home / TOKEN_FILE, partial(secrets.token_hex, 32))


def read_owner_token(home: Path) -> str | None:
    """The owner's secret if this data directory has one (a "directory" that is a file has none)."""
    try:
        return (home / TOKEN_FILE).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def machine_id(home: Path) -> str:
    """This data directory's stable identity; members name agents by (machineId, agentId)."""
    return read_or_create_secret(home / MACHINE_FILE, partial(secrets.token_hex, 16))


def write_private_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically replace `path` with `data` (write temp, fsync, rename, fsync directory), mode 0600."""
    write_private_text(path, json.dumps(data, indent=2) + "\n")


def write_private_text(path: Path, text: str) -> None:
    """Atomically replace `path` with `text` (write temp, fsync, rename, fsync directory), mode 0600."""
    temp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()  # left by a process killed while writing
    replace_durably(FileOps(), path, text.encode(), temp)


def _fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_daemon_info(home: Path) -> dict[str, Any] | None:
    """What the running daemon wrote about itself, or None when no daemon.json is there."""
    try:
        data = parse_own((home / DAEMON_FILE).read_text())
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise HomeError(f"{home / DAEMON_FILE} is not valid JSON: {error}") from None
    return data if isinstance(data, dict) else None


def remove_daemon_info(home: Path, pid: int) -> None:
    """Remove daemon.json if it is still ours (a newer daemon may have replaced it)."""
    info = read_daemon_info(home)
    if info is not None and info.get("pid") == pid:
        with contextlib.suppress(FileNotFoundError):
            (home / DAEMON_FILE).unlink()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_home(home: Path) -> int:
    """Take the one-daemon-per-directory lock; the kernel drops it when the process dies, even by SIGKILL."""
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        info = read_daemon_info(home) or {}
        where = f" (pid {info.get('pid')}, socket {info.get('socket')})" if info else ""
        raise DaemonRunning(f"a daemon is already running for {home}{where}") from None
    return fd


# --- member key files ---------------------------------------------------------------------------------------


def member_key_path(home: Path, team_id: str, member_id: str) -> Path:
    """Where a member's key is kept for its introduction to name (ids are letters, digits and `._:-`, and
    start with a letter or digit, so they are safe file names). Defence in depth for ids from elsewhere: one
    that is not a plain file name (a slash, `..`) is a ValueError, never a path."""
    if not (_file_name(team_id) and _file_name(member_id)):
        raise ValueError(f"no member key file for team {team_id[:40]!r}, member {member_id[:40]!r}: not ids")
    return home / KEYS_DIR / team_id / f"{member_id}{KEY_SUFFIX}"


def _file_name(value: str) -> bool:
    return bool(value) and value not in (".", "..") and "/" not in value and "\0" not in value


def _private_dir(path: Path) -> None:
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        return
    _fsync_dir(path.parent)


def write_member_key(home: Path, team_id: str, member_id: str, key: str) -> Path:
    """The member's key file (0600), created once and made durable (file and directory fsync) before its
    path is handed out. A file holding another key (damaged by hand) is replaced atomically."""
    path = member_key_path(home, team_id, member_id)
    with contextlib.suppress(FileNotFoundError, UnicodeDecodeError):
        if path.read_text().strip() == key:
            return path
    _private_dir(home / KEYS_DIR)
    _private_dir(path.parent)
    write_private_text(path, key + "\n")
    return path


def remove_member_key(home: Path, team_id: str, member_id: str) -> None:
    """Forget a removed member's key file (its key is already revoked in the ledger)."""
    with contextlib.suppress(FileNotFoundError):
        member_key_path(home, team_id, member_id).unlink()


def read_member_key(path: Path) -> str:
    """The key in a member key file; HomeError when it cannot be read or holds none."""
    try:
        key = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise HomeError(f"cannot read the member key file {path}: {error}") from None
    if not key or len(key.split()) != 1:
        raise HomeError(f"{path} does not hold one member key")
    return key


# --- explicit cleanup: the notes that make `team delete` and the desk prune safe --------------------------


def export_note_path(home: Path, team_id: str) -> Path:
    return home / EXPORTS_DIR / f"{team_id}.json"


def write_export_note(home: Path, team_id: str, note: dict[str, Any]) -> None:
    """Remember the export just written of team `team_id` (where, and up to which journal entry)."""
    _private_dir(home / EXPORTS_DIR)
    write_private_json(export_note_path(home, team_id), note)


def read_export_note(home: Path, team_id: str) -> dict[str, Any] | None:
    """The note of the team's last export; None if there is none or it cannot be read as one."""
    try:
        data = parse_own(export_note_path(home, team_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_team_files(home: Path, team_id: str) -> None:
    """Forget a deleted team's member key files and its export note (the export itself stays where it was
    written: it is the person's backup)."""
    keys = home / KEYS_DIR / team_id
    for key_file in keys.glob(f"*{KEY_SUFFIX}") if keys.is_dir() else ():
        key_file.unlink()
    with contextlib.suppress(FileNotFoundError):
        keys.rmdir()
    with contextlib.suppress(FileNotFoundError):
        export_note_path(home, team_id).unlink()


def deleted_teams(home: Path) -> dict[str, int]:
    """Team id -> when it was deleted here (ms), from DELETED_FILE; empty if there is none."""
    try:
        data = parse_own((home / DELETED_FILE).read_text())
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise HomeError(f"{home / DELETED_FILE} is not valid JSON: {error}") from None
    teams = data.get("teams") if isinstance(data, dict) else None
    if not isinstance(teams, dict) or not all(isinstance(at, int) for at in teams.values()):
        raise HomeError(f"{home / DELETED_FILE} does not list teams")
    return teams


def note_deleted_team(home: Path, team_id: str, at: int) -> None:
    write_private_json(home / DELETED_FILE, {"teams": {**deleted_teams(home), team_id: at}})
