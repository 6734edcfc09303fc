# `harness selfedit PATH`: a narrow, audited way for an agent session that may not edit its own project
# files (.claude/**) to write one anyway, when two safeguards agree (seed 004's selfedit CLI):
#   1. settings allow: the nearest .claude/settings.json above the target has an `Edit(<glob>)` rule in
#      permissions.allow[] that the target, relative to that file's grandparent, matches (minimatch
#      semantics, dot: true; core.glob_match). The project's own allowlist is the single source of truth.
#   2. branch scope: the work tree is on a branch, and not `main`, so the edit rides the project's merge
#      gates.
# The target is resolved before either check: `..` collapses and symlinks are followed, so a path that
# names an allowed file but lands elsewhere (`.claude/../README.md`, a link out of the tree) is judged by
# where it lands, and that is the file written. The write is atomic (temporary file, fsync, rename, directory
# fsync), through the FileOps seam so tests can fail it.
from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.core.bounded_json import JsonRefused, parse_json
from harness.core.glob_match import Unsupported, compile_glob
from harness.io.fileops import FileOps, replace_durably

SETTINGS: Final = Path(".claude") / "settings.json"
MAX_SETTINGS_BYTES: Final = 1 << 20
MAX_CONTENT_BYTES: Final = 16 << 20
GIT_TIMEOUT: Final = 30.0
SAFEGUARDS: Final = {1: "settings allow", 2: "branch scope"}
PROTECTED_BRANCHES: Final = ("HEAD", "main")


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


def current_branch(directory: Path) -> str:
    """`git rev-parse --abbrev-ref HEAD` in `directory` (HEAD when detached)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--abbrev-ref", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Refused(2, f"cannot read the branch of {directory}: {error}") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["git failed"])[0]
        raise Refused(2, f"cannot read the branch of {directory}: {reason}")
    return done.stdout.strip()


def check_branch(directory: Path) -> str:
    """Safeguard 2: the branch, when it is neither detached nor `main`."""
    branch = current_branch(directory)
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
    branch = check_branch(_existing(target.parent))
    return Allowed(target, settings, rule, branch)


def write_atomically(target: Path, data: bytes, ops: FileOps | None = None) -> None:
    """Replace `target` with `data` all at once: a reader sees the old content or the new, never a part,
    even across a crash. A new file gets the usual mode (0666 less the umask), an old one keeps its own.
    Missing directories below the target are created."""
    ops = ops or FileOps()
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.selfedit-{secrets.token_hex(6)}")
    mode = target.stat().st_mode & 0o777 if target.exists() else None
    replace_durably(ops, target, data, temporary, mode)
