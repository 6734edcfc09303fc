# A tmux server that has stopped answering (SIGSTOP here; a hung server, or one an agent's process stopped)
# against real tmux servers of this test only, each on its own -L socket. An adversarial review stopped one
# server and the channels keeper, `agent list` and `agent show` waited on it for as long as it stayed
# stopped: a pane moved between windows of another, answering server stayed in its old team and asked
# across tabs. Every tmux command now has a deadline, and the keeper looks at each server apart.
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest
import trio

from harness.io import channels as io_channels
from harness.io.agents import AgentEntry, Engine, StartedBy, TmuxPane
from harness.io.tmux import ControlRunner, ProcessRunner, TmuxError, TmuxLost

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
WAIT = 60.0  # the outer bound on every wait here: a regression fails, never hangs (a loaded machine is slow)


def tmux(socket: str, *args: str) -> str:
    argv = ["tmux", "-f", "/dev/null", "-L", socket, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=WAIT).stdout.strip()


@contextlib.contextmanager
def server() -> Iterator[tuple[str, str, int]]:
    """A tmux server of this test: (socket name, the pane id of its one pane, the server's pid)."""
    socket = f"harness-stuck-{os.getpid()}-{secrets.token_hex(4)}"
    pane = tmux(socket, "new-session", "-d", "-s", "s", "-P", "-F", "#{pane_id}", "sleep 600")
    pid = int(tmux(socket, "display-message", "-p", "-t", pane, "#{pid}"))
    try:
        yield socket, pane, pid
    finally:
        os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            tmux(socket, "kill-server")


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def entry(agent_id: str, socket: str, pane: str) -> AgentEntry:
    return AgentEntry(agent_id, agent_id, Engine.CLAUDE, TmuxPane(socket, pane), None, StartedBy.ATTACHED, 0)


async def test_a_command_to_a_stopped_server_ends_at_its_deadline() -> None:
    with server() as (socket, pane, pid):
        runner = ProcessRunner(socket)  # the default deadline while the server answers (a loaded machine)
        assert await runner.run("display-message", "-p", "-t", pane, "#{pane_id}") == [pane]
        runner.deadline = 1.0
        with stopped(pid), trio.fail_after(WAIT), pytest.raises(TmuxError, match="did not answer"):
            await runner.run("display-message", "-p", "-t", pane, "#{pane_id}")
        runner.deadline = ProcessRunner(socket).deadline
        assert await runner.run("display-message", "-p", "-t", pane, "#{pane_id}") == [pane]


async def test_a_control_client_of_a_stopped_server_is_uncertain_and_comes_back() -> None:
    """A command sent to a server that then does not answer may have run: TmuxLost (a paste is never
    repeated), the client is closed, and the next command opens a fresh one."""
    with server() as (socket, pane, pid):
        runner = ControlRunner(socket)  # the default deadline while the server answers
        try:
            assert await runner.run("display-message", "-p", "-t", pane, "#{pane_id}") == [pane]
            runner.deadline = 1.0
            with stopped(pid), trio.fail_after(WAIT), pytest.raises(TmuxLost, match="did not answer"):
                await runner.run("display-message", "-p", "-t", pane, "#{pane_id}")
            runner.deadline = ControlRunner(socket).deadline
            with trio.fail_after(WAIT):
                assert await runner.run("display-message", "-p", "-t", pane, "#{pane_id}") == [pane]
        finally:
            await runner.aclose()


async def test_the_channels_look_sees_the_answering_server_while_another_is_stopped() -> None:
    with server() as (stuck, stuck_pane, stuck_pid), server() as (live, live_pane, _):
        agents = (entry("a-stuck", stuck, stuck_pane), entry("a-live", live, live_pane))
        with stopped(stuck_pid), trio.fail_after(WAIT):
            observation = await io_channels.observe(agents)
        assert observation.unseen == frozenset({"a-stuck"})  # its memberships are kept, not dropped
        assert set(observation.panes) == {"a-live"}
        assert observation.panes["a-live"].window.socket == live
