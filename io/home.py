# The daemon's data directory: where it is, and the small private files that let a client find a running
# daemon (daemon.json) and prove owner authority (the owner token). Clients import this on every CLI call,
# so it uses the standard library only (platformdirs is imported only when no directory was named).
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

HOME_ENV = "HARNESS_HOME"
DAEMON_FILE = "daemon.json"
LOCK_FILE = "daemon.lock"
TOKEN_FILE = "owner-token"
MACHINE_FILE = "machine-id"
LOG_FILE = "daemon.log"


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
    """Create the data directory (0700) if needed; refuse one that others can read or write."""
    home.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    mode = home.stat().st_mode & 0o777
    if mode != PRIVATE_DIR_MODE:
        os.chmod(home, PRIVATE_DIR_MODE)
    return home


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
    try:
        return (home / TOKEN_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def machine_id(home: Path) -> str:
    """This data directory's stable identity; members name agents by (machineId, agentId)."""
    return read_or_create_secret(home / MACHINE_FILE, partial(secrets.token_hex, 16))


def write_private_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically replace `path` with `data` (write temp, fsync, rename, fsync directory), mode 0600."""
    temp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.write(fd, (json.dumps(data, indent=2) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_daemon_info(home: Path) -> dict[str, Any] | None:
    """What the running daemon wrote about itself, or None when no daemon.json is there."""
    try:
        data = json.loads((home / DAEMON_FILE).read_text())
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
        where = f" (pid {info.get('pid')}, port {info.get('port')})" if info else ""
        raise DaemonRunning(f"a daemon is already running for {home}{where}") from None
    return fd
