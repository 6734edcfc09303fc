# The README's first-team walkthrough is run exactly as written (issue 17: "a first-team walkthrough in the
# README that a test runs verbatim"): the shell block after `<!-- walkthrough -->`, in a fresh directory
# holding only a link to this checkout's `.venv`, with no harness variable of the caller's environment.
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- walkthrough -->\n```sh\n(.*?)```", re.DOTALL)


def walkthrough() -> str:
    found = BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, "README.md has exactly one walkthrough block"
    return str(found[0])


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", walkthrough()],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:  # a failed step must not leave the daemon running
        subprocess.run(
            [str(ROOT / ".venv/bin/harness"), "daemon", "stop", "--home", str(tmp_path / "harness-home")],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wait ended: answered" in done.stdout and "8080 (see api/server.py)" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert "stopped: True" in done.stdout
