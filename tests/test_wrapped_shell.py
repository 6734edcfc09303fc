# An adversarial review got past team.v1's "Ordinary terminal shells cannot be automatic answering members",
# which harness checked by name only (tmux's #{pane_current_command}): a bash under a program with a pty of
# its own (`script`) or started as `exec -a agent bash` is named `script` or `agent`, so the pane registered
# for pushed notices, the generic prompt profile read `$ ` as an idle prompt, and the desk pasted a command
# and pressed Enter. Real parts: real shells in a real tmux server of each test (`-L`, its own name), the real
# registry and the real tmux Terminals.
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from harness.io import pane_processes
from harness.io.agents import AgentError, AgentRegistry, Refusal
from harness.io.pane_processes import ProcessesUnseen, plain_shell_below
from harness.io.profiles import classify
from harness.io.terminal_port import ScreenState, WriteOutcome
from harness.io.tmux import (
    AgentTerminal,
    ProcessRunner,
    TmuxTerminals,
    WriteTiming,
    capture,
    new_session,
    pane_info,
)
from tests.test_tmux import FAKE_TUI, Pane, server  # noqa: F401  (the fixture: a tmux server per test)

DEADLINE = 30.0
TIMING = WriteTiming(enter_delay=0.2, confirm=5.0, poll=0.02, settle=0.15)

needs_script = pytest.mark.skipif(
    shutil.which("script") is None, reason="util-linux `script` (a wrapper with a pty of its own) is missing"
)
# The review's two disguises of a plain bash: tmux names the first pane `script`, the second `agent`.
WRAPPED_BASH = [
    pytest.param(["script", "-qfc", "bash", "/dev/null"], id="script", marks=needs_script),
    pytest.param(["bash", "-c", "exec -a agent bash --norc -i"], id="exec-a"),
]


async def idle_looking_shell(socket: str, cwd: Path, command: list[str]) -> str:
    """Start `command` in a pane and wait until its screen alone reads idle to the generic prompt profile
    (a `$ `/`# ` prompt on the last line): what the desk saw when it pasted."""
    pane = await new_session(socket, "sh", command, cwd=str(cwd), config="/dev/null", width=120)
    with trio.fail_after(DEADLINE):
        while classify("shell", await capture(ProcessRunner(socket), pane)).state is not ScreenState.IDLE:
            await trio.sleep(0.02)
    return pane


async def past_settling(terminals: TmuxTerminals) -> ScreenState:
    """The agent's state once a fresh attach's settle time is over (before it, every pane reads settling)."""
    with trio.fail_after(DEADLINE):
        while (screen := await terminals.observe("a")).state is ScreenState.SETTLING:
            await trio.sleep(0.02)
    return screen.state


@pytest.mark.parametrize("command", WRAPPED_BASH)
async def test_review_registration_refuses_a_wrapped_or_renamed_bash(
    server: str,  # noqa: F811
    tmp_path: Path,
    command: list[str],
) -> None:
    """The review: "a plain shell under a program with its own pty (`script`, `sudo -s`, `poetry shell`,
    screen, nested tmux...) or started as `exec -a NAME bash` is named by tmux as the wrapper or NAME, so
    registration accepts the pane with engine `shell` or `scripted`". Now the registry looks at the pane's
    processes: a bash there, by its executable, is refused `plain_shell`; it may join inbox-only."""
    pane = await idle_looking_shell(server, tmp_path, command)
    registry = AgentRegistry(tmp_path / "agents.json")
    tmux = {"socket": server, "target": pane}
    for engine in ("shell", "scripted"):
        with pytest.raises(AgentError) as refused:
            await registry.register({"name": "bob", "engine": engine, "tmux": tmux}, 0, 64, 64)
        assert refused.value.code is Refusal.PLAIN_SHELL and "bash" in refused.value.detail
    entry = await registry.register(
        {"name": "bob", "engine": "shell", "tmux": tmux, "inboxOnly": True}, 0, 64, 64
    )
    assert entry.inbox_only


@pytest.mark.parametrize("engine", ["shell", "scripted"])
@pytest.mark.parametrize("command", WRAPPED_BASH)
async def test_review_the_desk_never_pastes_into_a_wrapped_or_renamed_bash(
    server: str,  # noqa: F811
    tmp_path: Path,
    command: list[str],
    engine: str,
) -> None:
    """The review: "the generic prompt profile (io/profiles.py, `_prompt_composer`) reads `$ ` as an idle
    prompt, and the desk pasted `echo ... >> PWNED` and pressed Enter in both bash shells". Now every look
    finds the bash among the pane's processes: the pane reads offline and the write sends nothing."""
    pane = await idle_looking_shell(server, tmp_path, command)
    pwned = tmp_path / "PWNED"
    terminals = TmuxTerminals(lambda: [AgentTerminal("a", engine, server, pane)], timing=TIMING)
    try:
        before = await capture(ProcessRunner(server), pane)
        state = await past_settling(terminals)
        outcome = await terminals.write("a", f"echo pwned >> {pwned}")
        assert (state, outcome, pwned.exists()) == (ScreenState.OFFLINE, WriteOutcome.FAILED, False)
        assert await capture(ProcessRunner(server), pane) == before  # not one byte was typed
        evidence = (await terminals.observe("a")).evidence[0]
        assert evidence.startswith("plain shell") and "bash" in evidence, evidence
    finally:
        await terminals.aclose()


def fake_tui(tmp_path: Path) -> list[str]:
    return [
        sys.executable,
        str(FAKE_TUI),
        "--control",
        str(tmp_path / "control"),
        "--log",
        str(tmp_path / "log"),
    ]


async def tui_pane(
    socket: str, tmp_path: Path, command: list[str], ready: ScreenState = ScreenState.IDLE
) -> Pane:
    """The fake coding-agent TUI (engine `claude`), started by `command`, once it reads `ready`."""
    os.mkfifo(tmp_path / "control")
    target = await new_session(
        socket, "t", command, width=100, height=30, config="/dev/null", cwd=str(tmp_path)
    )
    terminals = TmuxTerminals(lambda: [AgentTerminal("a", "claude", socket, target)], timing=TIMING)
    pane = Pane(socket, target, tmp_path / "control", tmp_path / "log", terminals)
    await pane.until(ready)
    return pane


def engine_with(tmp_path: Path, *children: str) -> list[str]:
    """The fake TUI started by `sh -c`, which first starts each of `children` in the background, its input
    a fifo of its own that never ends, and notes its pid in `pids`. `exec` keeps the pid, so they are the
    engine's children, in its process group, as an engine's tools, hooks and MCP servers are."""
    started = ""
    for index, child in enumerate(children):
        fifo = tmp_path / f"in{index}"
        os.mkfifo(fifo)
        started += f"{child} <>{shlex.quote(str(fifo))} & echo $! >>{shlex.quote(str(tmp_path / 'pids'))}; "
    return ["sh", "-c", started + 'exec "$0" "$@"', *fake_tui(tmp_path)]


async def started_children(tmp_path: Path, count: int) -> list[int]:
    """The pids `engine_with` noted, once all `count` of them run bash (not yet the `sh` that forked them)."""
    pids = tmp_path / "pids"
    with trio.fail_after(DEADLINE):
        while not pids.exists() or len(found := pids.read_text().split()) < count:
            await trio.sleep(0.02)
        while any(Path(f"/proc/{pid}/exe").resolve().name != "bash" for pid in found):
            await trio.sleep(0.02)
    return [int(pid) for pid in found]


def children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@needs_script
async def test_a_program_under_a_wrapper_with_its_own_pty_is_still_written_to(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Not a false refusal: `script` in front is no reason to refuse; a bash is. The fake TUI under `script`
    (run by `bash -c`, which `script -c` uses and which runs one given command) is idle and written to."""
    pane = await tui_pane(server, tmp_path, ["script", "-qfc", shlex.join(fake_tui(tmp_path)), "/dev/null"])
    wrapper = (await pane_info(ProcessRunner(server), pane.target)).pid
    assert wrapper is not None
    try:
        assert await pane.terminals.write("a", "a notice") is WriteOutcome.OK
        assert [e["paste"] for e in pane.inputs() if "paste" in e] == ["a notice"]
    finally:
        stop([*children(wrapper), wrapper])  # the TUI on script's pty outlives the pane's hangup
        await pane.terminals.aclose()


async def test_an_engine_whose_shells_run_given_commands_is_still_written_to(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Not a false refusal: engines run their tools, hooks and MCP servers as `bash -c STRING` or `bash
    FILE`, and some of those run long (a dev server, an MCP server). Such a shell runs what it was given and
    reads no commands from the pane, so an engine idle while they run is written to."""
    tool = tmp_path / "tool.sh"
    tool.write_text("read line\n")  # waits on its fifo, holding its script open as bash does while it runs
    command = engine_with(tmp_path, "bash -c 'read line; true'", f"bash {shlex.quote(str(tool))}")
    pids: list[int] = []
    pane = await tui_pane(server, tmp_path, command)
    try:
        pids = await started_children(tmp_path, 2)
        assert await pane.terminals.write("a", "a notice") is WriteOutcome.OK
    finally:
        stop(pids)
        await pane.terminals.aclose()


async def test_a_shell_reading_its_input_below_an_engine_blocks_writes_only_while_it_runs(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A shell that reads its commands (no `-c`, no script) below the pane's foreground counts, though it is
    in a session of its own, off the pane's tty, as the review's bash under `script` was. Below an engine it
    blocks writes only while it runs; once it ends, the idle engine is written to."""
    command = engine_with(tmp_path, "setsid bash --norc -i 2>/dev/null")  # no tty: no job control
    pane = await tui_pane(server, tmp_path, command, ready=ScreenState.OFFLINE)
    (shell,) = await started_children(tmp_path, 1)
    try:
        with trio.fail_after(DEADLINE):  # until `sh` has become the engine (exec)
            while "runs under" not in (evidence := (await pane.terminals.observe("a")).evidence[0]):
                await trio.sleep(0.02)
        assert f"bash (pid {shell}) runs under the pane's foreground program python" in evidence, evidence
        assert await pane.terminals.write("a", "never") is WriteOutcome.FAILED
        stop([shell])
        await pane.until(ScreenState.IDLE)
        assert await pane.terminals.write("a", "a notice") is WriteOutcome.OK
        assert [e["paste"] for e in pane.inputs() if "paste" in e] == ["a notice"]
    finally:
        stop([shell])
        await pane.terminals.aclose()


async def test_when_proc_cannot_tell_nothing_is_pasted(
    server: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Failing safe: without /proc to read, an idle engine reads offline and a write sends nothing; its
    registration is accepted (the registry's convention for a pane it cannot see now: it reads offline
    until it can be seen)."""
    pane = await tui_pane(server, tmp_path, fake_tui(tmp_path))
    monkeypatch.setattr(pane_processes, "PROC", tmp_path / "no-proc")
    try:
        screen = await pane.terminals.observe("a")
        assert screen.state is ScreenState.OFFLINE and screen.evidence[0].startswith("unseen processes")
        assert await pane.terminals.write("a", "never") is WriteOutcome.FAILED
        assert pane.inputs() == []
        registry = AgentRegistry(tmp_path / "agents.json")
        tmux = {"socket": server, "target": pane.target}
        await registry.register({"name": "amy", "engine": "claude", "tmux": tmux}, 0, 64, 64)
    finally:
        await pane.terminals.aclose()


# --- reading /proc: the rules, on a made-up process table -----------------------------------------------


@attrs.frozen
class Table:
    """A made-up /proc of processes on one real pty, the pane's."""

    root: Path
    tty: str  # the pane's tty: a real pty, so its device can be stat'ed
    tty_nr: int  # its device as /proc/PID/stat encodes it

    def add(
        self,
        pid: int,
        comm: str,
        argv: list[str],
        *,
        ppid: int = 1,
        pgrp: int = 10,
        tpgid: int = 10,
        exe: str | None = "",
        state: str = "S",
        other_tty: bool = False,
        open_files: tuple[Path, ...] = (),
    ) -> None:
        """A process; `exe` "" is /usr/bin/COMM, None an executable that cannot be read (another user's)."""
        where = self.root / str(pid)
        (where / "fd").mkdir(parents=True)
        tty = self.tty_nr + 1 if other_tty else self.tty_nr
        (where / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pgrp} {pgrp} {tty} {tpgid} 4194560 0")
        (where / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in argv))
        if exe is not None:
            (where / "exe").symlink_to(exe or f"/usr/bin/{comm}")
        for fd, file in enumerate(open_files, start=255):
            (where / "fd" / str(fd)).symlink_to(file)

    def shell(self, pane_pid: int = 10) -> str | None:
        return plain_shell_below(pane_pid, self.tty, self.root)


@pytest.fixture
def table(tmp_path: Path) -> Iterator[Table]:
    leader, follower = os.openpty()
    try:
        device = os.stat(os.ttyname(follower)).st_rdev
        major, minor = os.major(device), os.minor(device)
        tty_nr = (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)
        yield Table(tmp_path / "proc", os.ttyname(follower), tty_nr)
    finally:
        os.close(leader)
        os.close(follower)


def test_an_idle_engine_and_the_shells_that_run_its_tools_are_no_plain_shell(table: Table) -> None:
    script = table.root.parent / "mcp-server.sh"
    script.write_text("exec node server.js\n")
    table.add(10, "node", ["claude"])
    table.add(11, "bash", ["/bin/bash", "-c", "-l", "eval 'npm test'"], ppid=10)
    table.add(12, "sh", ["sh", "-lc", "npm run dev"], ppid=10)
    table.add(13, "bash", ["bash", str(script)], ppid=10, open_files=(script,))
    table.add(14, "zsh", ["zsh", "-c", "sleep 1"], ppid=10, pgrp=14, tpgid=-1, other_tty=True)
    table.add(15, "bash", ["bash"], ppid=10, state="Z")  # exited: reads nothing
    assert table.shell() is None


def test_the_shell_that_started_the_engine_waits_behind_it(table: Table) -> None:
    """A person typed `claude` in the pane's bash: the engine's process group is the foreground, not bash."""
    table.add(10, "bash", ["-bash"], tpgid=20)
    table.add(20, "node", ["claude"], ppid=10, pgrp=20, tpgid=20)
    assert table.shell() is None


def test_the_review_s_disguises_are_plain_shells(table: Table) -> None:
    table.add(10, "script", ["script", "-qfc", "bash", "/dev/null"])
    table.add(11, "bash", ["bash"], ppid=10, pgrp=11, tpgid=11, other_tty=True)
    assert table.shell() == "bash (pid 11) runs under the pane's foreground program script (pid 10)"
    table.add(30, "bash", ["agent", "--norc", "-i"], pgrp=30, tpgid=30)
    assert table.shell(30) == "bash (pid 30) is the pane's foreground program"


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["bash", "--rcfile", "rc", "-i"], "an option's argument is no script it holds open"),
        (["bash", "-s", "x"], "commands from its input"),
        (["bash", "-"], "commands from its input"),
        (["-bash"], "a login shell"),
        (["bash", "+c"], "`+c` is no command string"),
    ],
)
def test_a_shell_below_counts_unless_it_runs_given_commands(table: Table, argv: list[str], what: str) -> None:
    """Below an engine's `sh -c` (looked past: it runs its command), on a pty of its own, a shell that
    reads its commands counts."""
    (table.root.parent / "rc").write_text("PS1='$ '\n")
    table.add(10, "python3", ["python3", "agent.py"])
    table.add(11, "sh", ["sh", "-c", "exec python3 tool.py"], ppid=10)
    table.add(12, "bash", argv, ppid=11, pgrp=12, tpgid=12, other_tty=True)
    assert table.shell() == "bash (pid 12) runs under the pane's foreground program sh (pid 11)", what


def test_a_shell_by_its_executable_or_its_kernel_name(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELL", "/opt/bin/oil")
    table.add(10, "sudo", ["sudo", "-s"], exe=None)
    table.add(11, "bash", ["/bin/bash"], ppid=10, pgrp=11, tpgid=11, exe=None, other_tty=True)  # root's
    assert table.shell() == "bash (pid 11) runs under the pane's foreground program sudo (pid 10)"
    table.add(20, "agent", ["agent"], pgrp=20, tpgid=20, exe="/usr/bin/bash (deleted)")  # a copy, upgraded
    assert table.shell(20) == "bash (pid 20) is the pane's foreground program"
    table.add(30, "oil", ["oil"], pgrp=30, tpgid=30, exe="/opt/bin/oil")  # the login shell
    assert table.shell(30) == "oil (pid 30) is the pane's foreground program"
    table.add(40, "tmux: client", ["tmux", "attach"], pgrp=40, tpgid=40, exe="/usr/bin/tmux")
    assert table.shell(40) == "tmux (pid 40) is the pane's foreground program"  # its shells are out of sight


def test_when_proc_cannot_tell_it_says_so(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every doubt is ProcessesUnseen, never "no shell": the caller then pastes nothing."""
    table.root.mkdir()
    with pytest.raises(ProcessesUnseen, match="not in"):
        table.shell()  # the pane's process is gone (or /proc is not there)
    table.add(10, "node", ["claude"], other_tty=True)
    with pytest.raises(ProcessesUnseen, match="is not on its tty"):
        table.shell()  # a pid from another namespace, or reused
    table.add(20, "node", ["claude"], pgrp=20, tpgid=21)
    with pytest.raises(ProcessesUnseen, match="foreground group 21"):
        table.shell(20)  # its foreground group is not visible (hidepid, or another user's)
    table.add(30, "node", ["claude"], pgrp=30, tpgid=30)
    for pid in range(31, 35):
        table.add(pid, "node", ["node", "worker.js"], ppid=30, pgrp=30, tpgid=30)
    monkeypatch.setattr(pane_processes, "MAX_BELOW", 3)
    with pytest.raises(ProcessesUnseen, match="more than 3"):
        table.shell(30)
    with pytest.raises(ProcessesUnseen, match="tty"):
        plain_shell_below(30, str(table.root / "no-tty"), table.root)
