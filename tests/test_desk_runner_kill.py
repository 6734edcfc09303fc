# The out-of-process crash: a daemon SIGKILLed while its terminal write is in flight. Run as a module, this
# file is that daemon (scripted terminals whose write never returns); as a test, it kills it and restarts.
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

from harness.io.daemon import Daemon
from harness.io.terminal_port import ScreenState
from tests.test_desk_runner import (
    DEADLINE,
    LIMITS,
    TIMING,
    FakeTerminals,
    desk_daemon,
    intro,
    is_,
    local_team,
    until,
)


async def _doomed_daemon(home: Path) -> None:
    fake = FakeTerminals({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.IDLE})
    fake.gate = trio.Event()  # never set: SIGKILL arrives inside the write
    daemon = Daemon(
        home, limits=LIMITS, log=lambda line: None, terminals=lambda r: fake, runner_timing=TIMING
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        await local_team(daemon)
        await fake.writing.wait()
        (home / "writing").write_text("")
        await trio.sleep_forever()


async def test_sigkill_mid_write_leaves_it_unconfirmed_and_never_rewritten(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-m", "tests.test_desk_runner_kill", str(home)], cwd=Path.cwd())
    try:
        with trio.fail_after(DEADLINE):
            while not (home / "writing").exists():
                assert child.poll() is None, "the daemon died before writing"
                await trio.sleep(0.02)
    finally:
        child.kill()  # SIGKILL: no shutdown path runs
        child.wait(10)
    after = FakeTerminals({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.IDLE})
    async with desk_daemon(home, after) as daemon:
        await until(lambda: is_(intro(daemon, "bob"), "unconfirmed", "restart"))
        await trio.sleep(0.2)
        assert after.writes == []


if __name__ == "__main__":
    trio.run(_doomed_daemon, Path(sys.argv[1]))
