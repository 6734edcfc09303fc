# Which shell would read what is pasted into a tmux pane, asked of the kernel (/proc, Linux) rather than of
# tmux. tmux names a pane's foreground program by argv[0], so an adversarial review got past the name check of
# team.v1's "ordinary terminal shells cannot be automatic answering members": a bash under a program with a
# pty of its own (`script`, `sudo -s`, `poetry shell`) is named after that program, one started as `exec -a
# agent bash` is named `agent`, and the desk pasted a command into both and pressed Enter.
#
# So: the pane tty's foreground process group (tpgid), and every process below that group (ppid links, on
# any pty: a wrapper's shell sits on the wrapper's), each judged by its real executable (/proc/PID/exe) and
# its kernel name (comm), never by argv[0]. A shell there counts unless it shows that it runs commands it was
# given, not what it reads: a `-c` command string (how engines run their tools, hooks and MCP servers, and
# how `script -c` starts its program), or a script file it holds open. So a shell an engine runs never
# blocks a paste, however long it runs, and one below an engine that reads its input blocks only while it
# runs (the engine is busy with it then, or has started it in the background: a notice waits either way).
# When /proc cannot tell, the caller must not paste: every doubt raises ProcessesUnseen, never "no shell".
from __future__ import annotations

import collections
import os
import stat
from pathlib import Path

import attrs

from harness.io.profiles import is_plain_shell

PROC = Path("/proc")
MAX_BELOW = 1_000  # processes looked at under the foreground group: more is no pane a person works in
STAT_BYTES = 4_096  # /proc/PID/stat is one line of about 300 bytes
COMMAND_OPTIONS = ("--command", "--commands")  # fish's and nushell's long spellings of `-c`
DELETED = " (deleted)"  # what /proc/PID/exe appends when the executable was replaced (an upgrade)


class ProcessesUnseen(Exception):
    """/proc cannot tell which processes would read the pane's input."""


@attrs.frozen
class Process:
    """The fields of /proc/PID/stat this module reads."""

    pid: int
    comm: str  # the kernel's name: the executable's base name (exec -a does not change it), 15 bytes at most
    state: str  # Z, X: exited, reads nothing
    ppid: int
    pgrp: int
    tty: int  # tty_nr: the controlling terminal's device, the kernel's encoding
    tpgid: int  # the foreground process group of that terminal

    @property
    def exited(self) -> bool:
        return self.state in ("Z", "X")


def plain_shell_below(pane_pid: int, pane_tty: str, proc: Path | None = None) -> str | None:
    """The plain shell among the processes that would read the pane's input (described), or None when there
    is none. `pane_pid` and `pane_tty` are tmux's #{pane_pid} and #{pane_tty}; the pid must still run on that
    tty (a pid from another namespace, or reused, is no evidence). Raises ProcessesUnseen when /proc cannot
    tell: no /proc, the pane's process gone or off its tty, no visible member of the foreground group, or
    more than MAX_BELOW processes below it."""
    root = str(PROC if proc is None else proc)
    pane = _process(root, str(pane_pid))
    if pane is None:
        raise ProcessesUnseen(f"the pane's process {pane_pid} is not in {root}")
    try:
        device = os.stat(pane_tty).st_rdev
    except OSError as error:
        raise ProcessesUnseen(f"the pane's tty {pane_tty!r}: {error.strerror}") from None
    if _device(pane.tty) != (os.major(device), os.minor(device)):
        raise ProcessesUnseen(f"the pane's process {pane_pid} is not on its tty {pane_tty}")
    processes = _all(root)
    group = [p for p in processes.values() if p.pgrp == pane.tpgid > 0 and not p.exited]
    if not group:
        raise ProcessesUnseen(f"no process of the pane's foreground group {pane.tpgid} is visible")
    children: dict[int, list[int]] = collections.defaultdict(list)
    for process in processes.values():
        children[process.ppid].append(process.pid)
    under = {p.pid: p.pid for p in group}  # each process looked at -> the foreground process it runs under
    queue = collections.deque(under)
    while queue:
        if len(under) > MAX_BELOW:
            raise ProcessesUnseen(f"more than {MAX_BELOW} processes run in the pane's foreground")
        process = processes[queue.popleft()]
        name = _shell_name(f"{root}/{process.pid}", process)
        if name is not None:
            top = processes[under[process.pid]]
            shell = f"{name} (pid {process.pid})"
            if top.pid == process.pid:
                return f"{shell} is the pane's foreground program"
            return f"{shell} runs under the pane's foreground program {top.comm} (pid {top.pid})"
        for child in children[process.pid]:
            if child not in under and not processes[child].exited:
                under[child] = under[process.pid]
                queue.append(child)
    return None


def _device(tty_nr: int) -> tuple[int, int]:
    """(major, minor) of a tty_nr (proc(5): minor in bits 31-20 and 7-0, major in bits 15-8)."""
    return (tty_nr >> 8) & 0xFFF, (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)


def _read(path: str, most: int) -> bytes | None:
    """Up to `most` bytes of a /proc file (plain os calls: a look reads every process's stat)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, most)
        finally:
            os.close(fd)
    except OSError:  # gone meanwhile, or not ours to read
        return None


def _process(root: str, pid: str) -> Process | None:
    raw = _read(f"{root}/{pid}/stat", STAT_BYTES)
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    close = text.rfind(")")  # comm may hold spaces and parentheses; nothing after it does
    fields = text[close + 2 :].split()
    if close < 0 or len(fields) < 6:
        return None
    state, ppid, pgrp, _session, tty, tpgid = fields[:6]
    comm = text[text.find("(") + 1 : close]
    return Process(int(pid), comm, state, int(ppid), int(pgrp), int(tty), int(tpgid))


def _all(root: str) -> dict[int, Process]:
    """Every process /proc shows: one scan per look."""
    try:
        names = [name for name in os.listdir(root) if name.isdigit()]
    except OSError as error:
        raise ProcessesUnseen(f"{root}: {error.strerror}") from None
    found = (_process(root, name) for name in names)
    return {process.pid: process for process in found if process is not None}


def _shell_name(where: str, process: Process) -> str | None:
    """The shell `process` is, when it is one that may read its input; None for any other process."""
    try:
        executable = os.path.basename(os.readlink(f"{where}/exe").removesuffix(DELETED))
    except OSError:  # another user's process (a root shell under sudo): its kernel name still tells
        executable = ""
    name = next((n for n in (executable, process.comm) if is_plain_shell(n)), None)
    if name is None:
        return None
    raw = _read(f"{where}/cmdline", 1 << 20)  # an argv that cannot be read shows nothing: the shell counts
    argv = raw.decode(errors="replace").split("\0")[:-1] if raw else []
    return None if _runs_given_commands(where, argv) else name


def _runs_given_commands(where: str, argv: list[str]) -> bool:
    """Whether a shell's arguments show that it runs commands it was given rather than what it reads: a `-c`
    string (`sh -c`, `bash -lc`, fish's `--command`), or a script file (the first operand) that it holds
    open, as bash and dash do while they run one. An option's argument taken for an operand (`--rcfile rc`)
    is no open script, so a misreading counts the shell."""
    words = argv[1:]
    while words and len(words[0]) > 1 and words[0][0] in "-+" and words[0] != "--":
        word = words.pop(0)
        if word.startswith("--"):
            if word.split("=", 1)[0] in COMMAND_OPTIONS:
                return True
        elif word.startswith("-") and "c" in word:
            return True
    operands = words[1:] if words[:1] == ["--"] else words
    return bool(operands) and _holds_open(where, os.path.basename(operands[0]))


def _holds_open(where: str, name: str) -> bool:
    """Whether the process holds a regular file called `name` open (not as its standard input or output)."""
    try:
        for fd in os.listdir(f"{where}/fd"):
            if not fd.isdigit() or int(fd) <= 2:
                continue
            target = os.readlink(f"{where}/fd/{fd}")
            named = target.startswith("/") and os.path.basename(target) == name
            if named and stat.S_ISREG(os.stat(f"{where}/fd/{fd}").st_mode):
                return True
    except OSError:  # not ours to read, or gone meanwhile: no evidence
        return False
    return False
