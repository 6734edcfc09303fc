# `harness relay serve` takes its bounds from the command line; a bound no relay can work under (a negative
# queue, no connection allowed, a budget below one message) is refused before anything listens, with the
# CLI's one-line error, instead of a relay that accepts connections it can never serve.
from __future__ import annotations

import subprocess
import sys

import pytest

BAD_BOUNDS = [
    ("--queue", "-1"),
    ("--queue", "0"),
    ("--max-connections", "0"),
    ("--max-pending", "-3"),
    ("--max-pending", "0"),
    ("--held-bytes", "5"),
    ("--held-bytes", "-1"),
]


@pytest.mark.parametrize(("option", "value"), BAD_BOUNDS)
def test_a_bound_no_relay_can_work_under_is_refused_before_listening(option: str, value: str) -> None:
    """A stranger can cause nothing but a refusal; neither can a slip of the operator's: the relay must not
    start at all under such a bound (before this test, `--queue -1`, `--max-connections 0` and
    `--max-pending -3` were served)."""
    argv = [sys.executable, "-m", "harness.cli.main", "relay", "serve", "--port", "0", option, value]
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as expired:  # it listened and served until killed
        pytest.fail(f"{option} {value} was served: {expired.stderr!r}")
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: bad_request: "), done.stderr
    assert option in lines[0]
    assert "listening" not in done.stderr and done.stdout == ""
