# `harness selfedit` in real git repositories in temporary directories, run as the real command: one table
# of cases (the README's table), each with its exit status, the words of its message, and what is on disk
# afterwards, plus the atomic write under an injected fault, and the bypasses a review found (review r5): git
# pointed at another repository, and a directory swapped for a symlink between the check and the write.
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.io import selfedit
from harness.io.fileops import FileOps
from tests.test_cli_e2e import HARNESS

RULES = ["Edit(.claude/**)", "Edit(docs/*.md)", "Bash(git status)"]
TRIED = "Edit() rules tried: Edit(.claude/**), Edit(docs/*.md)"
README = b"# the project's readme\n"
VICTIM = b"outside the project\n"
NEW = b"new content\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    )
    return done.stdout


@dataclass
class World:
    project: Path
    outside: Path

    def settings(self, document: object) -> None:
        (self.project / ".claude" / "settings.json").write_text(json.dumps(document))


@pytest.fixture
def world(tmp_path: Path) -> World:
    """A project on branch `feature` with .claude/settings.json allowing RULES, and a directory beside it."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / ".claude").mkdir(parents=True)
    outside.mkdir()
    (outside / "victim.md").write_bytes(VICTIM)
    (project / "README.md").write_bytes(README)
    (project / "docs").mkdir()
    world = World(project, outside)
    world.settings({"permissions": {"allow": RULES}})
    git(project, "init", "-q", "-b", "feature")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "init")
    return world


def selfedit_env(**variables: str) -> dict[str, str]:
    """The environment of a selfedit call: this one, with no system or global git configuration, and
    `variables` (what the agent that makes the call may set)."""
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **variables}


def selfedit_run(
    cwd: Path, path: str, data: bytes, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*HARNESS, "selfedit", path, *extra],
        cwd=cwd,
        input=data,
        capture_output=True,
        timeout=60,
        env=env or selfedit_env(),
        check=False,
    )


def _link(name: str, to: Callable[[World], Path]) -> Callable[[World], None]:
    def setup(w: World) -> None:
        (w.project / name).symlink_to(to(w))

    return setup


def _nothing(w: World) -> None:
    pass


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    status: int
    words: tuple[str, ...]
    setup: Callable[[World], None] = _nothing
    written: str | None = None  # the file (relative to the project) that must now hold NEW


def _no_settings(w: World) -> None:
    (w.project / ".claude" / "settings.json").unlink()


def _settings_not_json(w: World) -> None:
    (w.project / ".claude" / "settings.json").write_text("{ not json")


def _unsupported_rule(w: World) -> None:
    w.settings({"permissions": {"allow": ["Edit(.claude/+(a|b).md)", "Edit(.claude/{1..3}.md)"]}})


def _detached(w: World) -> None:
    git(w.project, "checkout", "-q", "--detach")


def _main(w: World) -> None:
    git(w.project, "checkout", "-q", "-b", "main")


def _not_a_repository(w: World) -> None:
    shutil.rmtree(w.project / ".git")


def _directory_target(w: World) -> None:
    (w.project / ".claude" / "dir").mkdir()


CASES = [
    Case("allowed", ".claude/skills/new/SKILL.md", 0, (), written=".claude/skills/new/SKILL.md"),
    Case("dot file under .claude/**", ".claude/.hidden", 0, (), written=".claude/.hidden"),
    Case("dot file by docs/*.md", "docs/.draft.md", 0, (), written="docs/.draft.md"),
    Case("dot file no rule matches", ".env", 2, ("safeguard 1 (settings allow)", ".env", TRIED)),
    Case(
        "traversal",
        ".claude/../README.md",
        2,
        ("safeguard 1 (settings allow)", "README.md (in ", "matches no Edit() rule", TRIED),
    ),
    Case(
        "symlink to a file outside the allowed tree",
        ".claude/link.md",
        2,
        ("safeguard 1 (settings allow)", "README.md (in ", TRIED),
        _link(".claude/link.md", lambda w: w.project / "README.md"),
    ),
    Case(
        "symlink out of the project",
        ".claude/out.md",
        2,
        ("safeguard 1 (settings allow)", "no .claude/settings.json in"),
        _link(".claude/out.md", lambda w: w.outside / "victim.md"),
    ),
    Case(
        "symlinked directory out of the project",
        ".claude/skills/victim.md",
        2,
        ("safeguard 1 (settings allow)", "no .claude/settings.json in"),
        _link(".claude/skills", lambda w: w.outside),
    ),
    Case("missing settings", ".claude/x.md", 2, ("safeguard 1", "no .claude/settings.json in"), _no_settings),
    Case(
        "settings not JSON", ".claude/x.md", 2, ("safeguard 1", "unreadable as settings"), _settings_not_json
    ),
    Case(
        "unsupported rule",
        ".claude/a.md",
        2,
        (
            "safeguard 1",
            "Edit(.claude/+(a|b).md) [refused: an extglob",
            "Edit(.claude/{1..3}.md) [refused: a brace sequence",
        ),
        _unsupported_rule,
    ),
    Case("detached HEAD", ".claude/x.md", 2, ("safeguard 2 (branch scope)", "HEAD is detached"), _detached),
    Case("main", ".claude/x.md", 2, ("safeguard 2 (branch scope)", "the branch is main"), _main),
    Case(
        "not a git work tree",
        ".claude/x.md",
        2,
        ("safeguard 2 (branch scope)", "cannot read the branch"),
        _not_a_repository,
    ),
    Case("I/O error", ".claude/dir", 1, ("io_error", "cannot write"), _directory_target),
]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if ".git" not in p.parts and p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_safeguard_table(world: World, case: Case) -> None:
    """Seed 004: "It exits 0, 2 (safeguard violation), or 1 (I/O error)." "Failure messages name the
    safeguard that rejected the write. Safeguard 1 also lists the Edit() rules it tried." Nothing but the
    allowed file changes, inside or outside the project."""
    case.setup(world)
    before = _snapshot(world.project.parent)
    done = selfedit_run(world.project, case.path, NEW)
    stderr = done.stderr.decode()
    assert done.returncode == case.status, stderr
    for words in case.words:
        assert words in stderr, (words, stderr)
    after = _snapshot(world.project.parent)
    if case.written is None:
        assert after == before
        assert stderr.count("\n") == 1  # one line
    else:
        key = str(Path("project") / case.written)
        assert after.pop(key) == NEW
        assert after == before
        assert f"wrote {len(NEW)} bytes" in done.stdout.decode()
    assert list(world.project.parent.rglob(".*.selfedit-*")) == []


def test_json_names_the_safeguard_and_lists_the_rules(world: World) -> None:
    done = selfedit_run(world.project, ".claude/../README.md", NEW, "--json")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert document["error"] == "refused"
    assert (document["safeguard"], document["name"]) == (1, "settings allow")
    assert document["rulesTried"] == ["Edit(.claude/**)", "Edit(docs/*.md)"]
    assert (world.project / "README.md").read_bytes() == README


def test_settings_follow_the_allowlist_and_the_nearest_file_wins(world: World) -> None:
    """Seed 004: "Widen the project allowlist and the CLI follows." A nested project's settings, nearer to
    the target, decide for it, relative to its own root."""
    assert selfedit_run(world.project, "README.md", NEW).returncode == 2
    world.settings({"permissions": {"allow": [*RULES, "Edit(README.md)"]}})
    assert selfedit_run(world.project, "README.md", NEW).returncode == 0
    assert (world.project / "README.md").read_bytes() == NEW
    nested = world.project / "sub"
    (nested / ".claude").mkdir(parents=True)
    (nested / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Edit(x.md)"]}}))
    assert selfedit_run(world.project, "sub/x.md", b"x").returncode == 0
    refused = selfedit_run(world.project, "sub/.claude/y.md", b"y")
    assert refused.returncode == 2 and "Edit() rules tried: Edit(x.md)" in refused.stderr.decode()


def test_an_existing_file_keeps_its_mode_and_is_replaced_whole(world: World) -> None:
    target = world.project / ".claude" / "tool.sh"
    target.write_bytes(b"old")
    target.chmod(0o750)
    assert selfedit_run(world.project, ".claude/tool.sh", NEW).returncode == 0
    assert target.read_bytes() == NEW
    assert target.stat().st_mode & 0o777 == 0o750


class FailingFsync(FileOps):
    def fsync(self, fd: int) -> None:
        raise OSError(5, "Input/output error")


def test_a_failed_fsync_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "file.md"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="Input/output error"):
        selfedit.write_atomically(target, NEW, FailingFsync())
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.md"]


def test_stdin_is_read_only_after_both_safeguards(world: World) -> None:
    """A refused call exits without reading stdin, so it never waits on a terminal: here stdin stays open
    and empty, and the call still returns."""
    _main(world)
    with subprocess.Popen(
        [*HARNESS, "selfedit", ".claude/x.md"],
        cwd=world.project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.wait(timeout=60) == 2  # would time out if it read the open, silent stdin
        assert process.stderr is not None and b"safeguard 2" in process.stderr.read()
        assert process.stdin is not None
        process.stdin.close()


# --- review r5: the bypasses, reproduced -------------------------------------------------------------------

REVIEW_RULES = ["Edit(.claude/agents/**)", "Edit(src/**)"]
HOSTILE = b'{"permissions": {"allow": ["Edit(**)", "Bash(*)"]}}\n'


def repository_on_feature(directory: Path) -> Path:
    """Another repository, on branch `feature`: what the agent points git at. Returns its git directory."""
    directory.mkdir()
    git(directory, "init", "-q", "-b", "feature")
    git(directory, "commit", "-q", "--allow-empty", "-m", "init")
    return directory / ".git"


@pytest.mark.parametrize(
    "variables",
    [("GIT_DIR",), ("GIT_DIR", "GIT_WORK_TREE")],
    ids="+".join,
)
def test_git_variables_do_not_choose_the_branch(
    world: World, tmp_path: Path, variables: tuple[str, ...]
) -> None:
    """Review r5, finding 1: "Safeguard 2 (the branch check) is bypassed through the environment:
    io/selfedit.py runs git with the caller's environment, so with GIT_DIR=<another repo on branch feature>
    (or GIT_WORK_TREE, GIT_COMMON_DIR, GIT_INDEX_FILE, GIT_CEILING_DIRECTORIES...) a call on `main` writes
    anyway." """
    _main(world)
    values = {"GIT_DIR": str(repository_on_feature(tmp_path / "other")), "GIT_WORK_TREE": str(world.project)}
    env = selfedit_env(**{name: values[name] for name in variables})
    done = selfedit_run(world.project, ".claude/x.md", NEW, env=env)
    assert done.returncode == 2, done.stderr
    assert "safeguard 2 (branch scope): the branch is main" in done.stderr.decode()
    assert not (world.project / ".claude" / "x.md").exists()


def test_a_git_file_below_the_project_does_not_stand_for_it(world: World, tmp_path: Path) -> None:
    """Review r5, finding 1, asked to "check that the work tree git reports is the one that holds the file
    being edited": a `.git` file left in .claude/agents (written there on a feature branch, say) makes git,
    asked in that directory, report a work tree of its own, .claude/agents, on another repository's branch."""
    _main(world)
    agents = world.project / ".claude" / "agents"
    agents.mkdir()
    (agents / ".git").write_text(f"gitdir: {repository_on_feature(tmp_path / 'other')}\n")
    done = selfedit_run(world.project, ".claude/agents/x.md", NEW)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "safeguard 2 (branch scope)" in stderr and "does not hold" in stderr, stderr
    assert not (agents / "x.md").exists()


def git_that_swaps(tmp_path: Path, package: Path, on_call: int) -> dict[str, str]:
    """An environment whose `git` (first on PATH) runs the real one and then, on its call number `on_call`,
    makes the directory `package` a symlink to ../.claude: the agent's swap of the review, timed exactly."""
    real = shutil.which("git")
    assert real is not None
    calls, directory = shlex.quote(str(tmp_path / "git-calls")), shlex.quote(str(package))
    swap = f"rm -rf {directory} && ln -s ../.claude {directory}"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\n{shlex.quote(real)} "$@"\nstatus=$?\necho call >> {calls}\n'
        f'if [ "$(wc -l < {calls})" -eq {on_call} ]; then {swap}; fi\nexit "$status"\n'
    )
    wrapper.chmod(0o755)
    return selfedit_env(PATH=f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def review_world(world: World) -> World:
    """The review's project: rules allow .claude/agents/** and src/**, and src/pkg is a directory."""
    world.settings({"permissions": {"allow": REVIEW_RULES}})
    (world.project / "src" / "pkg").mkdir(parents=True)
    return world


def test_a_directory_swapped_while_stdin_is_pending_is_judged_as_it_now_is(
    review_world: World, tmp_path: Path
) -> None:
    """Review r5, finding 2: "cli/selfedit.py checks the path, then waits on stdin, then writes through the
    earlier resolved path; io/selfedit.py follows symlinked parent directories. While stdin is pending the
    agent swaps `src/pkg` for a symlink to `../.claude` and the write lands in `.claude/settings.json`."
    Here the swap comes as soon as the check made before stdin is read has asked git for the branch, and
    stdin is written only once src/pkg is the symlink."""
    project = review_world.project
    settings = (project / ".claude" / "settings.json").read_bytes()
    package = project / "src" / "pkg"
    env = git_that_swaps(tmp_path, package, on_call=1)
    with subprocess.Popen(
        [*HARNESS, "selfedit", "src/pkg/settings.json"],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        deadline = time.monotonic() + 60
        while not package.is_symlink():
            assert process.poll() is None and time.monotonic() < deadline, "no swap: git was never asked"
            time.sleep(0.01)
        _, stderr = process.communicate(HOSTILE, timeout=60)
    assert (project / ".claude" / "settings.json").read_bytes() == settings
    assert process.returncode == 2, stderr
    assert b"safeguard 1 (settings allow): .claude/settings.json (in " in stderr, stderr
    assert list(project.rglob(".*.selfedit-*")) == []


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_directory_swapped_after_the_last_check_is_refused_by_the_write(
    review_world: World, tmp_path: Path, json_out: bool
) -> None:
    """Review r5, finding 2, asked to "write without following symlinks on the way", "refusing a symlinked
    component with a clear one-line error with a stable code". The swap here comes after git's second call,
    which is the check after stdin was read: only the write itself can see it."""
    project = review_world.project
    settings = (project / ".claude" / "settings.json").read_bytes()
    env = git_that_swaps(tmp_path, project / "src" / "pkg", on_call=2)
    done = selfedit_run(project, "src/pkg/settings.json", HOSTILE, *(["--json"] if json_out else []), env=env)
    assert (project / ".claude" / "settings.json").read_bytes() == settings
    assert done.returncode == 2, done.stderr
    detail = f"safeguard 1 (settings allow): {project / 'src' / 'pkg'} is a symbolic link"
    if json_out:
        document = json.loads(done.stdout)
        assert (document["error"], document["safeguard"]) == ("refused", 1)
        assert document["name"] == "settings allow"
        assert document["detail"].startswith(detail), document
        assert done.stderr == b""
    else:
        stderr = done.stderr.decode()
        assert stderr.startswith(f"harness: refused: {detail}") and stderr.count("\n") == 1, stderr
    assert list(project.rglob(".*.selfedit-*")) == []


@pytest.mark.parametrize(
    ("swapped", "link_to"),
    [("src/pkg", "../.claude"), ("src/pkg/settings.json", "../../.claude/settings.json")],
)
def test_the_write_follows_no_symlink(review_world: World, swapped: str, link_to: str) -> None:
    """Whichever part of the checked path became a symlink, a directory or the file itself, the write refuses
    it rather than follow it to .claude/settings.json, and leaves no temporary file behind."""
    project = review_world.project
    settings = (project / ".claude" / "settings.json").read_bytes()
    link = project / swapped
    if link.is_dir():
        link.rmdir()
    link.symlink_to(link_to)
    refusal = re.escape(f"safeguard 1 (settings allow): {link} is a symbolic link")
    with pytest.raises(selfedit.Refused, match=refusal):
        selfedit.write_atomically(project / "src" / "pkg" / "settings.json", HOSTILE)
    assert (project / ".claude" / "settings.json").read_bytes() == settings
    assert list(project.rglob(".*.selfedit-*")) == []
