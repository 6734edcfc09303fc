# The walk down the pane's children files (io/pane_processes.py) must find every shell the full scan of
# /proc finds, at the cost of the pane's processes: real process trees in a real tmux pane (a server of each
# test, `-L`), each answered by the walk and by the full scan, which must agree. The trees are the ones a
# walk from the pane's first process could miss: a shell two levels below a wrapper on a pty of its own, a
# grandchild whose parent is in the foreground group, children hanging off a thread (alive, exited, or the
# only one left after the main thread exited), and a foreground shell orphaned out of the pane's tree.
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from harness.io import pane_processes
from harness.io.pane_processes import ProcessesUnseen, plain_shell_below
from harness.io.tmux import ProcessRunner, new_session, pane_info
from tests.test_tmux import server  # noqa: F401  (the fixture: a tmux server per test)

DEADLINE = 30.0
WALKS = 50  # tries for a walk that vouches: other tests' processes come and go below init meanwhile

pytestmark = pytest.mark.skipif(
    not os.path.exists(f"/proc/self/task/{os.getpid()}/children"),
    reason="no children files (CONFIG_PROC_CHILDREN): the full scan alone answers",
)
needs_script = pytest.mark.skipif(shutil.which("script") is None, reason="util-linux `script` is missing")

# An engine-like program: starts argv (JSON), its input a fifo that never ends, from its main thread or a
# worker thread; `thread-exits` lets the worker end after the start, `leader-exits` ends the main thread
# (pthread_exit: the process lives on in the worker, a zombie leader in /proc), `churn` also starts and
# reaps short-lived children all the time from a second thread.
ENGINE = r"""
import ctypes, json, os, subprocess, sys, threading, time
mode, argv, fifo = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
started = threading.Event()
def start():
    subprocess.Popen(argv, stdin=os.open(fifo, os.O_RDWR), stderr=subprocess.DEVNULL)
    started.set()
def worker():
    start()
    if mode != "thread-exits":
        time.sleep(1000)
def churn():
    while True:
        short = [subprocess.Popen(["sleep", "0.00%d" % n]) for n in range(1, 4)]
        subprocess.run(["true"])
        for child in short:
            child.wait()
if mode == "main" or mode == "churn":
    start()
else:
    threading.Thread(target=worker).start()
if mode == "churn":
    threading.Thread(target=churn, daemon=True).start()
started.wait()
if mode == "leader-exits":
    ctypes.CDLL(None).pthread_exit(None)
time.sleep(1000)
"""


def stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after comm (state first), read here without the module under test."""
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rfind(")") + 2 :].split()
    return None


def field(pid: int, index: int) -> str:
    """One field of a process's stat that must be there (0: state, 1: ppid, 2: pgrp, 3: session)."""
    fields = stat(pid)
    assert fields is not None, f"process {pid} is gone"
    return fields[index]


def argv(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    return []


def pane_family(pane_pid: int) -> set[int]:
    """The processes below the pane's first process or in its session, from every process's stat."""
    parents: dict[int, int] = {}
    family = {pane_pid}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat(int(name))) is not None:
            parents[int(name)] = int(fields[1])
            if int(fields[3]) == pane_pid:
                family.add(int(name))
    grew = True
    while grew:
        below = {pid for pid, ppid in parents.items() if ppid in family} - family
        family |= below
        grew = bool(below)
    return family


def ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 0 and (fields := stat(pid)) is not None:
        pid = int(fields[1])
        found.add(pid)
    return found


class Tree:
    """A pane's real processes, stopped by pid at the end with those that left its family (`strays`)."""

    def __init__(self, pid: int, tty: str) -> None:
        self.pid, self.tty = pid, tty
        self.strays: set[int] = set()

    async def process(self, wanted: list[str]) -> int:
        """The one process of the pane's family whose argv starts with `wanted`, once it runs."""
        with trio.fail_after(DEADLINE):
            while not (found := [p for p in pane_family(self.pid) if argv(p)[: len(wanted)] == wanted]):
                await trio.sleep(0.02)
        assert len(found) == 1, found
        return found[0]

    def answers(self) -> str | None:
        """The walk's answer, once a walk vouched for what it saw; the full scan's and the public call's
        must be the same."""
        pane = pane_processes._process("/proc", str(self.pid))
        assert pane is not None
        for _ in range(WALKS):
            if (walked := pane_processes._pane_processes("/proc", pane)) is not None:
                break
        else:
            pytest.fail(f"no walk vouched for what it saw in {WALKS} tries")
        answer = pane_processes._foreground_shell("/proc", pane, walked)
        assert plain_shell_below(self.pid, self.tty, full_scan=True) == answer
        assert plain_shell_below(self.pid, self.tty) == answer
        return answer

    def stop(self) -> None:
        for pid in pane_family(self.pid) | self.strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def tree(socket: str, tmp_path: Path, command: list[str]) -> AsyncIterator[Tree]:
    target = await new_session(socket, "t", command, config="/dev/null", cwd=str(tmp_path))
    pane = await pane_info(ProcessRunner(socket), target)
    assert pane.pid is not None
    found = Tree(pane.pid, pane.tty)
    try:
        yield found
    finally:
        found.stop()


def engine(tmp_path: Path, mode: str, command: list[str]) -> list[str]:
    fifo = tmp_path / f"in-{len(list(tmp_path.glob('in-*')))}"
    os.mkfifo(fifo)
    return [sys.executable, "-c", ENGINE, mode, json.dumps(command), str(fifo)]


@needs_script
async def test_a_shell_two_levels_below_a_wrapper_on_its_own_pty(server: str, tmp_path: Path) -> None:  # noqa: F811
    """script (the foreground) -> bash -c (runs its command) -> bash reading its input, on script's pty."""
    command = ["script", "-qfc", "bash -c 'bash --norc -i; true'", "/dev/null"]
    async with tree(server, tmp_path, command) as pane:
        shell = await pane.process(["bash", "--norc", "-i"])
        assert int(field(shell, 1)) != pane.pid  # a grandchild at least
        assert field(shell, 3) != field(pane.pid, 3)  # on script's pty, in a session of its own
        answer = f"bash (pid {shell}) runs under the pane's foreground program script (pid {pane.pid})"
        assert pane.answers() == answer


async def test_a_grandchild_shell_whose_parent_is_in_the_foreground_group(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """engine -> `sh -c` (in the foreground group) -> bash in a session of its own, reading its input."""
    fifo = tmp_path / "shell-in"
    os.mkfifo(fifo)
    command = ["sh", "-c", f"setsid bash --norc -i <>{fifo} 2>/dev/null; true"]
    async with tree(server, tmp_path, engine(tmp_path, "main", command)) as pane:
        shell = await pane.process(["bash", "--norc", "-i"])
        parent = int(field(shell, 1))
        assert argv(parent)[:2] == ["sh", "-c"] and int(field(parent, 1)) == pane.pid
        assert field(parent, 2) == field(pane.pid, 2) != field(shell, 2)  # sh is in the foreground group
        answer = f"bash (pid {shell}) runs under the pane's foreground program sh (pid {parent})"
        assert pane.answers() == answer


@pytest.mark.parametrize("mode", ["thread", "thread-exits"])
async def test_a_shell_started_by_a_thread(server: str, tmp_path: Path, mode: str) -> None:  # noqa: F811
    """A child hangs off the thread that started it, in that thread's children file; when the thread ends,
    it moves to another thread's."""
    async with tree(server, tmp_path, engine(tmp_path, mode, ["setsid", "bash", "--norc", "-i"])) as pane:
        shell = await pane.process(["bash", "--norc", "-i"])
        threads = Path(f"/proc/{pane.pid}/task")
        with trio.fail_after(DEADLINE):
            while (len(os.listdir(threads)) == 1) != (mode == "thread-exits"):
                await trio.sleep(0.02)
        lists = {t: (threads / t / "children").read_text().split() for t in os.listdir(threads)}
        holders = [thread for thread, children in lists.items() if str(shell) in children]
        assert (holders == [str(pane.pid)]) == (mode == "thread-exits"), holders  # the main thread's, or not
        answer = f"bash (pid {shell}) runs under the pane's foreground program python (pid {pane.pid})"
        assert pane.answers() == answer


async def test_a_shell_below_a_process_whose_main_thread_exited(server: str, tmp_path: Path) -> None:  # noqa: F811
    """The pane's process reads as a zombie (its leader exited) while its worker thread runs on, with the
    shell it started: the full scan finds that shell by its process group, the walk in the worker's list."""
    async with tree(server, tmp_path, engine(tmp_path, "leader-exits", ["bash", "--norc", "-s"])) as pane:
        shell = await pane.process(["bash", "--norc", "-s"])
        with trio.fail_after(DEADLINE):
            while field(pane.pid, 0) != "Z":
                await trio.sleep(0.02)
        assert pane.answers() == f"bash (pid {shell}) is the pane's foreground program"


async def test_a_foreground_shell_orphaned_out_of_the_pane_s_tree(server: str, tmp_path: Path) -> None:  # noqa: F811
    """`sh -c 'bash -s &'` ends: its bash goes to init (or the nearest subreaper), an ancestor of the pane,
    in the pane's foreground group still, reading the pane's input. The walk finds it among the children of
    the pane's ancestors, by its session."""
    fifo, noted = tmp_path / "shell-in", tmp_path / "orphan"
    os.mkfifo(fifo)
    command = ["sh", "-c", f"bash --norc -s <>{fifo} & echo $! >{noted}"]
    async with tree(server, tmp_path, engine(tmp_path, "main", command)) as pane:
        with trio.fail_after(DEADLINE):
            while not noted.exists() or not noted.read_text().strip():
                await trio.sleep(0.02)
            shell = int(noted.read_text())
            pane.strays.add(shell)
            while pane.pid in ancestors(shell) or argv(shell)[:2] != ["bash", "--norc"]:
                await trio.sleep(0.02)  # until sh has ended and bash runs
        assert int(field(shell, 3)) == pane.pid  # in the pane's session
        assert field(shell, 2) == field(pane.pid, 5)  # in the pane tty's foreground group
        assert pane.answers() == f"bash (pid {shell}) is the pane's foreground program"


@pytest.mark.parametrize("mode", ["main", "thread"])
async def test_no_shell_that_reads_its_input(server: str, tmp_path: Path, mode: str) -> None:  # noqa: F811
    """Not a false refusal either way: a `bash -c` tool and its child."""
    async with tree(server, tmp_path, engine(tmp_path, mode, ["bash", "-c", "sleep 1000; true"])) as pane:
        await pane.process(["sleep", "1000"])
        assert pane.answers() is None


async def test_more_processes_than_the_walk_takes(
    server: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than MAX_BELOW processes in the pane's trees: the walk does not vouch, the full scan decides."""
    command = ["sh", "-c", "sleep 1000 & sleep 1000 & sleep 1000 & sleep 1000 & wait"]
    async with tree(server, tmp_path, engine(tmp_path, "main", command)) as pane:
        with trio.fail_after(DEADLINE):
            while sum(argv(p) == ["sleep", "1000"] for p in pane_family(pane.pid)) < 4:
                await trio.sleep(0.02)
        monkeypatch.setattr(pane_processes, "MAX_BELOW", 3)
        process = pane_processes._process("/proc", str(pane.pid))
        assert process is not None and pane_processes._pane_processes("/proc", process) is None
        for full_scan in (False, True):
            with pytest.raises(ProcessesUnseen, match="more than 3"):
                plain_shell_below(pane.pid, pane.tty, full_scan=full_scan)


async def test_children_that_come_and_go_never_hide_the_shell(server: str, tmp_path: Path) -> None:  # noqa: F811
    """The engine starts and reaps short-lived children all the time, beside a shell that reads its input:
    every look finds the shell, whether the walk vouched or the full scan decided."""
    async with tree(server, tmp_path, engine(tmp_path, "churn", ["setsid", "bash", "--norc", "-i"])) as pane:
        shell = await pane.process(["bash", "--norc", "-i"])
        answer = f"bash (pid {shell}) runs under the pane's foreground program python (pid {pane.pid})"
        process = pane_processes._process("/proc", str(pane.pid))
        assert process is not None
        walked = 0
        for _ in range(300):
            assert plain_shell_below(pane.pid, pane.tty) == answer
            if (world := pane_processes._pane_processes("/proc", process)) is not None:
                walked += 1
                assert pane_processes._foreground_shell("/proc", process, world) == answer
        assert walked > 0
