# `harness selfedit PATH`: a narrow, audited way for an agent session that may not edit its own project
# files (.claude/**) to write one anyway, when two safeguards agree (seed 004's selfedit CLI):
#   1. settings allow: the nearest .claude/settings.json above the target has an `Edit(<glob>)` rule in
#      permissions.allow[] that the target, relative to that file's grandparent, matches (minimatch
#      semantics, dot: true; core.glob_match). The project's own allowlist is the single source of truth.
#   2. branch scope: git, asked in the target's directory, reports a work tree that holds that grandparent,
#      on a branch, and not `main`, so the edit rides the project's merge gates. git runs with no GIT_*
#      variable in its environment: GIT_DIR, GIT_WORK_TREE and their kin make it answer for another
#      repository (a review wrote on main with GIT_DIR naming a repository on a feature branch), and a
#      work tree that does not hold the rules' directory (a `.git` file left in .claude/agents) is not the
#      project's.
# The target is resolved before either check: `..` collapses and symlinks are followed, so a path that
# names an allowed file but lands elsewhere (`.claude/../README.md`, a link out of the tree) is judged by
# where it lands, and that is the file written. The tree can change between the check and the write (a
# review swapped a checked directory for a symlink to .claude), so the write follows no symlink: it opens
# the resolved path's directories from / down, each relative to the one before, refuses a symlink among them
# (safeguard 1: the path is no longer the one judged), and makes and renames its temporary file inside the
# last. The write is atomic (temporary file, fsync, rename, directory fsync); its calls on descriptors go
# through the FileOps seam so tests can fail them.
from __future__ import annotations

import contextlib
import os
import secrets
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.core.bounded_json import JsonRefused, parse_json
from harness.core.glob_match import Unsupported, compile_glob
from harness.io.fileops import FileOps, write_all

SETTINGS: Final = Path(".claude") / "settings.json"
MAX_SETTINGS_BYTES: Final = 1 << 20
MAX_CONTENT_BYTES: Final = 16 << 20
GIT_TIMEOUT: Final = 30.0
SAFEGUARDS: Final = {1: "settings allow", 2: "branch scope"}
PROTECTED_BRANCHES: Final = ("HEAD", "main")
# How the write opens each directory on its way: never through a symlink. O_PATH (Linux) needs no read
# permission, only what following the path would need.
WALK_FLAGS: Final = (
    (os.O_PATH if sys.platform == "linux" else os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
)


class Refused(Exception):
    """A safeguard said no. `rules` are the Edit() rules safeguard 1 tried (with why a rule was refused)."""

    def __init__(self, safeguard: int, detail: str, rules: tuple[str, ...] | None = None) -> None:
        self.safeguard = safeguard
        self.detail = detail
        self.rules = rules
        super().__init__(self.message())

    def message(self) -> str:
        text = f"safeguard {self.safeguard} ({SAFEGUARDS[self.safeguard]}): {self.detail}"
        if self.rules is None:
            return text
        return text + "; Edit() rules tried: " + (", ".join(self.rules) or "none")


@dataclass(frozen=True)
class Allowed:
    """What both safeguards agreed to: the file to write, the rule that allowed it, the branch."""

    target: Path
    settings: Path
    rule: str
    branch: str


def resolve(path: Path) -> Path:
    """`path` made absolute with `..` collapsed and every symlink followed, as far as it exists."""
    return Path(os.path.realpath(os.path.abspath(path)))


def find_settings(start: Path) -> Path | None:
    """The nearest .claude/settings.json in `start` or a directory above it."""
    for directory in (start, *start.parents):
        candidate = directory / SETTINGS
        if candidate.is_file():
            return candidate
    return None


def edit_rules(settings: Path) -> list[str]:
    """The globs of the `Edit(<glob>)` entries of permissions.allow[] (other entries are not edit rules)."""
    with open(settings, "rb") as handle:
        data = handle.read(MAX_SETTINGS_BYTES + 1)
    document = parse_json(data, max_bytes=MAX_SETTINGS_BYTES)
    if isinstance(document, JsonRefused):
        raise Refused(1, f"{settings} is unreadable as settings: {document.detail}")
    permissions = document.get("permissions") if isinstance(document, dict) else None
    allow = permissions.get("allow") if isinstance(permissions, dict) else None
    if not isinstance(allow, list):
        return []
    return [
        entry[len("Edit(") : -1]
        for entry in allow
        if isinstance(entry, str) and entry.startswith("Edit(") and entry.endswith(")")
    ]


def check_settings(target: Path) -> tuple[Path, str]:
    """Safeguard 1 for a resolved `target`: the settings file and the rule that allows it."""
    settings = find_settings(target.parent)
    if settings is None:
        raise Refused(1, f"no {SETTINGS} in {target.parent} or any directory above it")
    root = settings.parent.parent
    relative = target.relative_to(root).as_posix()
    tried = []
    for glob in edit_rules(settings):
        rule = f"Edit({glob})"
        try:
            if compile_glob(glob, dot=True).matches(relative):
                return settings, rule
            tried.append(rule)
        except Unsupported as error:
            tried.append(f"{rule} [refused: {error}]")
    raise Refused(1, f"{relative} (in {root}) matches no Edit() rule of {settings}", tuple(tried))


def work_tree(directory: Path) -> tuple[Path, str]:
    """git's work tree root for `directory`, and its branch (HEAD when detached). git runs in `directory`
    with no GIT_* variable in its environment, so the directory alone decides which repository answers."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--show-toplevel", "--abbrev-ref", "HEAD"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Refused(2, f"cannot read the branch of {directory}: {error}") from None
    answer = done.stdout.splitlines()
    if done.returncode != 0 or len(answer) != 2:
        reason = (done.stderr.strip().splitlines() or ["git failed"])[0]
        raise Refused(2, f"cannot read the branch of {directory}: {reason}")
    return Path(answer[0]), answer[1]


def check_branch(target: Path, root: Path) -> str:
    """Safeguard 2 for a resolved `target` whose Edit() rules apply below `root`: the branch of the work tree
    that holds them, when it is neither detached nor `main`."""
    directory = _existing(target.parent)
    worktree, branch = work_tree(directory)
    if not root.is_relative_to(worktree):
        detail = (
            f"git's work tree for {directory} is {worktree}, which does not hold the rules' project {root}"
        )
        raise Refused(2, detail)
    if branch == "HEAD":
        raise Refused(2, f"HEAD is detached in {directory}; edits ride a feature branch")
    if branch in PROTECTED_BRANCHES:
        raise Refused(2, f"the branch is {branch} in {directory}; edits ride a feature branch")
    return branch


def _existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check(path: Path) -> Allowed:
    """Both safeguards, in order, for `path`; raises Refused naming the first that says no."""
    target = resolve(path)
    settings, rule = check_settings(target)
    branch = check_branch(target, settings.parent.parent)
    return Allowed(target, settings, rule, branch)


def write_atomically(target: Path, data: bytes, ops: FileOps | None = None) -> None:
    """Replace `target`, a path as `resolve` gives it (absolute, no symlink in it), with `data` all at once: a
    reader sees the old content or the new, never a part, even across a crash. A new file gets the usual mode
    (0666 less the umask), an old one keeps its own. Missing directories below the target are created. A
    symlink met on the way, a directory or the file itself, is refused (Refused), never followed."""
    ops = ops or FileOps()
    directory = _open_directory(target.parent)
    try:
        _replace_in(directory, target, data, ops)
    finally:
        os.close(directory)


def _symlink_refused(path: Path) -> Refused:
    return Refused(1, f"{path} is a symbolic link: the path changed after it was checked; nothing written")


def _is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_directory(path: Path) -> int:
    """A descriptor of the absolute directory `path`, opened from / one name at a time, each relative to the
    one before and never through a symlink; what is missing is created."""
    descriptor = os.open("/", WALK_FLAGS)
    reached = Path("/")
    try:
        for name in path.parts[1:]:
            reached /= name
            inner = _enter(descriptor, name, reached)
            os.close(descriptor)
            descriptor = inner
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _enter(directory: int, name: str, path: Path) -> int:
    """Directory `name` in `directory` (at `path`), opened without following a symlink; made if missing."""
    try:
        return _open_inner(directory, name, path)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: open what is there
            os.mkdir(name, dir_fd=directory)
        return _open_inner(directory, name, path)


def _open_inner(directory: int, name: str, path: Path) -> int:
    try:
        return os.open(name, WALK_FLAGS, dir_fd=directory)
    except OSError:
        if _is_symlink(directory, name):
            raise _symlink_refused(path) from None
        raise


def _replace_in(directory: int, target: Path, data: bytes, ops: FileOps) -> None:
    """Write `data` to a new temporary file in `directory`, fsync it, rename it over `target`'s name there and
    fsync the directory; on a failure before the rename the temporary file is removed."""
    try:
        existing: os.stat_result | None = os.stat(target.name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISLNK(existing.st_mode):
        raise _symlink_refused(target)
    mode = None if existing is None else stat.S_IMODE(existing.st_mode)
    temporary = f".{target.name}.selfedit-{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o666 if mode is None else mode, dir_fd=directory)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # the umask may have narrowed it
            write_all(ops, fd, data)
            ops.fsync(fd)
        finally:
            ops.close(fd)
        os.rename(temporary, target.name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
    # `directory` may be an O_PATH descriptor, which fsync refuses: the directory itself, opened for reading.
    synced = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
    try:
        ops.fsync(synced)
    finally:
        ops.close(synced)
