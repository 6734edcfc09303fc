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
#
# A look costs what the pane's own processes cost, not the machine's: the processes are found from the pane's
# first process down its children files (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN), as well as the
# processes of its session that an ancestor adopted (a foreground process whose parent exited), for which
# each child of each ancestor (tmux's other panes, init's children) costs one getsid(2). Reading every
# process's stat (the full scan) stays the answer whenever that walk cannot vouch for what it saw: no
# children files, children that kept coming and going, an ancestor gone meanwhile, too many processes.
from __future__ import annotations

import collections
import errno
import os
import stat
from pathlib import Path

import attrs

from harness.io.profiles import is_plain_shell

PROC = Path("/proc")
# Processes looked at under the foreground group, or walked in the pane's trees: more is no pane a person
# works in.
MAX_BELOW = 1_000
STAT_BYTES = 4_096  # /proc/PID/stat is one line of about 300 bytes
COMMAND_OPTIONS = ("--command", "--commands")  # fish's and nushell's long spellings of `-c`
DELETED = " (deleted)"  # what /proc/PID/exe appends when the executable was replaced (an upgrade)
TRIES = 3  # reads of one children list, or rounds of the walk, before the full scan decides instead
GONE = (errno.ENOENT, errno.ESRCH)  # a /proc file of a process or thread that exited meanwhile


class ProcessesUnseen(Exception):
    """/proc cannot tell which processes would read the pane's input."""


class _Doubt(Exception):
    """The walk down the children files cannot vouch for what it saw: the full scan decides."""


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
    session: int = 0  # its session's id: the pid of the session's leader

    @property
    def exited(self) -> bool:
        return self.state in ("Z", "X")


def plain_shell_below(
    pane_pid: int, pane_tty: str, proc: Path | None = None, *, full_scan: bool = False
) -> str | None:
    """The plain shell among the processes that would read the pane's input (described), or None when there
    is none. `pane_pid` and `pane_tty` are tmux's #{pane_pid} and #{pane_tty}; the pid must still run on that
    tty (a pid from another namespace, or reused, is no evidence). Raises ProcessesUnseen when /proc cannot
    tell: no /proc, the pane's process gone or off its tty, no visible member of the foreground group, or
    more than MAX_BELOW processes below it. `full_scan` reads every process's stat, as when the pane's
    processes cannot be found by their children files (the same answer, at the machine's cost)."""
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
    processes = None if full_scan else _pane_processes(root, pane)
    return _foreground_shell(root, pane, _all(root) if processes is None else processes)


def _foreground_shell(root: str, pane: Process, processes: dict[int, Process]) -> str | None:
    """The walk from the pane tty's foreground group down, among `processes` (in /proc's order, by pid)."""
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


# --- the pane's processes by their children files ----------------------------------------------------------
#
# What the full scan would find in the foreground group and below it, without reading the machine: every
# member of the foreground group is in the pane's session, and each process of that session descends, by
# fork, from the pane's first process (its leader: tmux starts it with setsid). It is below that process
# still, or it lost its parent and went to the nearest ancestor that reaps orphans (a subreaper, or init),
# which is an ancestor of the pane: so the pane's tree, and the tree of each process of its session that
# one of the pane's ancestors holds as a child. (What it cannot see, and the full scan does: a foreground
# process below an orphan that had left the session, with setsid, so that nothing shows where it came from;
# or one orphaned inside a pid namespace that a process of the pane entered with setns, whose init is not
# the pane's ancestor.)
#
# The full scan sees every process that lives through the look; the walk must too, though a children file
# is a list that moves while it is read. So each list is read before the stat of its process, and a process
# alive after its list was read had all its children in it: the children of one that exited had moved to
# its reaper, so its ancestors are read again (and the pane's, last of all, after every exit seen). A list
# read while a child was reaped may skip the next child (proc(5): precise only for a stopped process): that
# child is seen gone, and its parent read again. A thread that exits hands its children to another: the
# threads are read last to first (they go to the first live thread) and read again if one went missing.


def _pane_processes(root: str, pane: Process) -> dict[int, Process] | None:
    """What the full scan would find in the pane's foreground and below it, by pid; None when the walk
    cannot vouch for it (no children files, /proc not of this pid namespace, the pane's process not its
    session's leader, an ancestor gone meanwhile, lists that kept moving, more than MAX_BELOW processes in
    the pane's trees)."""
    if pane.session != pane.pid or not os.path.exists(f"{root}/{pane.pid}/task/{pane.pid}/children"):
        return None
    try:
        if os.readlink(f"{root}/self") != str(os.getpid()):
            return None  # another pid namespace's /proc: getsid(2) would name other processes
    except OSError:
        return None
    walk = _Walk(root, pane.pid)
    try:
        for _ in range(TRIES):
            walk.drain()
            adopted = _adopted(root, pane) - walk.above.keys()
            if not adopted:
                return dict(sorted(walk.processes.items()))
            for pid in adopted:
                walk.visit(pid, 0)
    except _Doubt:
        return None
    return None


class _Walk:
    """The trees below some processes, each list read before its process's stat (see above)."""

    def __init__(self, root: str, pane_pid: int) -> None:
        self.root = root
        self.processes: dict[int, Process] = {}
        self.above: dict[int, int] = {}  # each process met -> the one whose list showed it (0: a tree's top)
        self.moved: set[int] = set()  # processes seen exited, or seen with another parent: read above again
        self.queue: collections.deque[int] = collections.deque()
        self.reads = 0
        self.visit(pane_pid, 0)

    def visit(self, pid: int, above: int) -> None:
        self.above.setdefault(pid, above)
        self.queue.append(pid)

    def drain(self) -> None:
        while self.queue:
            self.reads += 1
            if len(self.above) > MAX_BELOW or self.reads > 4 * MAX_BELOW:
                raise _Doubt
            self._read(self.queue.popleft())

    def _read(self, pid: int) -> None:
        listed = _listed(self.root, pid)
        process = _process(self.root, str(pid))  # after its list: alive now, it was alive when listed
        if process is None:
            self.processes.pop(pid, None)
        else:
            self.processes[pid] = process
        above = self.above[pid]
        if listed is None or process is None or process.exited or (above and process.ppid != above):
            self._moved(pid)
        for child in listed or ():
            if child not in self.above:
                self.visit(child, pid)

    def _moved(self, pid: int) -> None:
        """`pid` exited (its children went to an ancestor's list), or its list skipped a child, or it is no
        longer the child of the one that listed it: read every process above it again, once."""
        if pid in self.moved:
            return
        self.moved.add(pid)
        up = self.above[pid]
        while up:
            self.queue.append(up)
            up = self.above[up]


def _adopted(root: str, pane: Process) -> set[int]:
    """The processes of the pane's session that are children of its ancestors: adopted orphans. An orphan
    goes to its reaper's first live thread, the leader while it lives (its exit shows as the process's),
    so of an ancestor only the leader's list is read: its threads' own children are none of the pane's."""
    found: set[int] = set()
    seen = {pane.pid}
    pid = pane.ppid
    while pid > 0:
        if pid in seen:
            raise _Doubt
        seen.add(pid)
        sessions = _sessions(root, pid)
        ancestor = _process(root, str(pid))  # after its list (see above)
        if ancestor is None or ancestor.exited:
            raise _Doubt  # its children moved up meanwhile, and its parent is not known
        found |= {child for child, sid in sessions.items() if sid == pane.session and child != pane.pid}
        pid = ancestor.ppid
    return found


def _sessions(root: str, pid: int) -> dict[int, int]:
    """The session of each child in a process's leader's list, by getsid(2) (an init may have thousands of
    children: one call each, no stat), from a list in which none was reaped while it was read (so none was
    skipped). A child that exited is still in its session until reaped; one of the pane's session is walked
    and, if it exited, the ancestors are read again once the walk is done."""
    for _ in range(TRIES):
        raw = _read_all(f"{root}/{pid}/task/{pid}/children")
        if raw is None:
            raise _Doubt
        sessions: dict[int, int] = {}
        for child in map(int, raw.split()):
            try:
                sessions[child] = os.getsid(child)
            except ProcessLookupError:
                break  # reaped meanwhile
            except OSError:
                raise _Doubt from None
        else:
            return sessions
    raise _Doubt


def _listed(root: str, pid: int) -> list[int] | None:
    """The pids in the children files of a process's threads; None when the process is gone."""
    task = f"{root}/{pid}/task"
    for _ in range(TRIES):
        try:
            threads = os.listdir(task)
        except OSError as error:
            if error.errno in GONE:
                return None
            raise _Doubt from None
        found: list[int] = []
        for thread in reversed(threads):  # a thread's children go to the first live one
            raw = _read_all(f"{task}/{thread}/children")
            if raw is None:
                break  # that thread exited meanwhile: its children moved
            found += [int(word) for word in raw.split()]
        else:
            if len(threads) == 1 or set(threads) <= set(_threads(task)):
                return found
    raise _Doubt


def _threads(task: str) -> list[str]:
    try:
        return os.listdir(task)
    except OSError as error:
        if error.errno in GONE:
            return []
        raise _Doubt from None


def _read_all(path: str) -> bytes | None:
    """A whole /proc file that comes a page per read (a children file); None when its thread is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    except OSError as error:
        if error.errno in GONE:
            return None
        raise _Doubt from None


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
    state, ppid, pgrp, session, tty, tpgid = fields[:6]
    comm = text[text.find("(") + 1 : close]
    return Process(int(pid), comm, state, int(ppid), int(pgrp), int(tty), int(tpgid), int(session))


def _all(root: str) -> dict[int, Process]:
    """Every process /proc shows (the full scan)."""
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
