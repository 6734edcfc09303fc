# A live team: real engines (tests/engines: Claude Code, Codex, Gemini CLI, Grok CLI, pinned) joined into one
# team by a real daemon, all of it inside ONE private network namespace that has only loopback.
#
# Topology. `unshare -n` makes the namespace; in it run one scripted fake model per engine (127.0.0.1:8765,
# 8766, ... of that namespace; each also serves its control API on a Unix socket file), the daemon
# (tests/live/daemon_main.py: `harness daemon run` with test knobs) on its Unix socket in its data
# directory, and one tmux server (a socket file) with a session per engine, each with its own HOME and
# config. The engines' shell tools run `harness team --home H --team T --key-file F ...` (the prefix their
# introduction taught them) and reach the daemon through its socket file, as agents on one machine do.
# Nothing in there can reach any other address, and nothing outside can reach in except through files: the
# tmux socket, the fake models' control sockets, the daemon's data directory (its socket among them). The
# test talks to the daemon from a single thread of its own that `setns` moved into the namespace (a network
# namespace is per thread), so it needs no helper process; sockets it opens there stay there.
#
# Stopping: every process of that namespace is ended by PID (SIGTERM, so the daemon closes its journals,
# then SIGKILL for what is left). The test process itself is never among them: /proc/PID/ns/net names the
# namespace of a process's main thread, which never moves.
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.io import home as homes
from harness.io.client import Client
from harness.io.journal_files import delivery_store_dir, ledger_store_dir, scan_store_consistent
from tests.engines.fake_model import FakeModelClient
from tests.engines.launch import (
    FAKE_MODEL,
    SETUP,
    TMUX_CONF,
    EngineError,
    EngineRun,
    engine_version,
    turn_permissions_off,
)

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # the venv's bin: `harness` (the CLI the engines run) lives here
FIRST_PORT = 8765  # fake models listen on 8765, 8766, ... of the team's own namespace
CLONE_NEWNET = 0x40000000
WIDTH, HEIGHT = 160, 50


class TeamError(RuntimeError):
    """The live team could not be started or did not reach a state a test waited for."""


@dataclass(frozen=True)
class SeatSpec:
    """One engine of the team: its member name and role, and the script its fake model follows."""

    name: str
    engine: str
    role: str
    script: Mapping[str, Any]


@dataclass
class Seat:
    name: str
    engine: str
    role: str
    port: int  # its fake model's port inside the namespace
    run: EngineRun  # the engine's pane and fake model (its stop() is not used: the team stops as a whole)
    agent_id: str = ""
    member_id: str = ""

    @property
    def fake(self) -> FakeModelClient:
        return self.run.fake

    @property
    def pane(self) -> str:
        return self.run.target


# --------------------------------------------------------------------------------- a thread in the namespace


def _enter_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({path}): {os.strerror(error)}")
    finally:
        os.close(fd)


class NamespaceWorker:
    """One worker thread of this process, moved into a network namespace (setns affects only the calling
    thread). Everything submitted runs on it, so its sockets are opened on that namespace's loopback."""

    def __init__(self, netns_path: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="team-netns",
            initializer=_enter_netns,
            initargs=(netns_path,),
        )

    def call(self, fn: Callable[[], T], timeout: float = 120.0) -> T:
        return self._pool.submit(fn).result(timeout=timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------------------------------------ the team


@dataclass
class LiveTeam:
    root: Path
    socket: Path
    daemon_home: Path
    seats: dict[str, Seat]
    netns: str
    worker: NamespaceWorker
    daemon_pid: int
    daemon_socket: Path
    machine_id: str
    token: str
    timings: dict[str, float] = field(default_factory=dict)
    stopped: bool = False

    # -- the daemon, from the thread inside the namespace

    def rpc(self, action: str, *, team_id: str | None = None, fields: dict[str, Any] | None = None) -> Any:
        """One owner request to the daemon."""

        def go() -> Any:
            with Client(self.daemon_socket) as client:
                return client.request(action, team_id=team_id, owner_token=self.token, fields=fields)

        return self.worker.call(go)

    def register_agents(self) -> None:
        """Register every engine pane with the daemon (adopted panes: the daemon never kills them)."""
        for seat in self.seats.values():
            seat.agent_id = f"agent-{seat.name}"
            self.rpc(
                "agent_register",
                fields={
                    "agentId": seat.agent_id,
                    "name": seat.name,
                    "engine": seat.engine,
                    "tmux": {"socket": str(self.socket), "target": seat.pane},
                    "cwd": str(seat.run.workdir),
                    "startedBy": "attached",
                },
            )

    def create_team(self, team_id: str, name: str, extra: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
        """A team of every seat (in order), plus `extra` members (name, role) whose agents have no terminal
        on this machine: their own notices wait, offline; they are there to ask on whose behalf."""
        members = [
            {"machineId": self.machine_id, "agentId": s.agent_id, "name": s.name, "role": s.role}
            for s in self.seats.values()
        ]
        members += [
            {
                "machineId": self.machine_id,
                "agentId": f"agent-{m['name']}",
                "name": m["name"],
                "role": m["role"],
            }
            for m in extra
        ]
        team: dict[str, Any] = self.rpc("create", fields={"id": team_id, "name": name, "members": members})
        by_name = {member["name"]: member["id"] for member in team["members"]}
        for seat in self.seats.values():
            seat.member_id = by_name[seat.name]
        return team

    def team(self, team_id: str) -> dict[str, Any]:
        view: dict[str, Any] = self.rpc("get", team_id=team_id)
        return view

    def wait_team(
        self, team_id: str, done: Callable[[dict[str, Any]], bool], *, timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        view = self.team(team_id)
        while not done(view):
            if time.monotonic() > deadline:
                raise TeamError(f"no {what} within {timeout:.0f} s; team:\n{json.dumps(view, indent=1)}")
            time.sleep(0.2)
            view = self.team(team_id)
        return view

    # -- the journals (read-only, safe beside the running daemon)

    def desk_journal(self) -> list[dict[str, Any]]:
        """Every command this machine's delivery desk accepted, in order (never checkpointed in a run)."""
        scan = scan_store_consistent(delivery_store_dir(self.daemon_home))
        assert scan.recovery.checkpoint_seq == 0, "the desk journal was checkpointed: receipts would be cut"
        return [dict(entry.body) for entry in scan.recovery.entries]

    def ledger_journal(self, team_id: str) -> list[dict[str, Any]]:
        """Every command the owner's ledger of `team_id` accepted, in order."""
        scan = scan_store_consistent(ledger_store_dir(self.daemon_home, team_id))
        assert scan.recovery.checkpoint_seq == 0, "the ledger journal was checkpointed"
        return [dict(entry.body) for entry in scan.recovery.entries]

    # -- stopping

    def processes(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "net") == self.netns:
                        found.append(int(entry.name))
        return found

    def stop(self, *, keep_files: bool = False) -> None:
        """End every process of the namespace by PID (never the machine's own namespace), then remove the
        temporary tree unless asked to keep it."""
        if self.stopped:
            return
        self.stopped = True
        self.worker.close()
        if self.netns and self.netns != os.readlink("/proc/self/ns/net"):
            _sweep(self.processes)
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _sweep(processes: Callable[[], list[int]]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 3.0)):
        for pid in processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not processes():
            return


# ---------------------------------------------------------------------------------------------- launching


def _base_env() -> dict[str, str]:
    """Built from scratch (nothing of this process's environment but PATH and USER): no credential of the
    machine can reach an engine."""
    return {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/bash",
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "COLORTERM": "truecolor",
        "NO_UPDATE_NOTIFIER": "1",
    }


def _seat_files(root: Path, spec: SeatSpec, port: int, skip_permissions: bool) -> tuple[list[str], list[str]]:
    """Prepare one engine's HOME, workdir, config and script; its fake model argv and tmux session argv."""
    seat_root = root / spec.name
    home = seat_root / "home"
    workdir = home / "project"
    workdir.mkdir(parents=True)
    (seat_root / "tmp").mkdir()
    (seat_root / "script.json").write_text(json.dumps(spec.script), encoding="utf-8")
    # Login shells (Codex runs `bash -lc`) reset PATH from /etc/profile; the user's own profile puts the
    # harness CLI back on it, as an installation would.
    profile = f'export PATH={shlex.quote(str(VENV_BIN))}:"$PATH"\n'
    for name in (".profile", ".bashrc"):
        (home / name).write_text(profile, encoding="utf-8")
    env = {**_base_env(), "HOME": str(home), "TMPDIR": str(seat_root / "tmp")}
    command = SETUP[spec.engine](home, workdir, env, skip_permissions, True, port=port)
    fake = [
        sys.executable,
        str(FAKE_MODEL),
        "--port",
        str(port),
        "--unix",
        str(seat_root / "fake.sock"),
        "--ready-file",
        str(seat_root / "fake.ready"),
        "--script",
        str(seat_root / "script.json"),
    ]
    session = ["new-session", "-d", "-s", spec.name, "-x", str(WIDTH), "-y", str(HEIGHT), "-c", str(workdir)]
    for key, value in sorted(env.items()):
        session += ["-e", f"{key}={value}"]
    return fake, [*session, "--", *command]


def launch_team(
    specs: Sequence[SeatSpec],
    *,
    skip_permissions: bool,
    idle_timeout: float = 60.0,
    poll_ms: int = 200,
) -> LiveTeam:
    """Start the namespace (fake models, daemon, one tmux server with every engine), wait until the daemon
    listens and every engine shows a stable idle screen."""
    if shutil.which("harness", path=str(VENV_BIN)) is None:
        raise TeamError(f"no harness CLI in {VENV_BIN}: run `bash scripts/setup.sh`")
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="harness-team-"))
    socket_path = root / "tmux.sock"
    daemon_home = root / "daemon"
    (root / "tmux.conf").write_text(TMUX_CONF, encoding="utf-8")
    (root / "tmp").mkdir()
    fakes, sessions = [], []
    for index, spec in enumerate(specs):
        fake, session = _seat_files(root, spec, FIRST_PORT + index, skip_permissions)
        fakes.append(fake)
        sessions.append(session)
    tmux = ["tmux", "-S", str(socket_path), "-f", str(root / "tmux.conf")]
    daemon = [
        sys.executable,
        "-m",
        "tests.live.daemon_main",
        "--home",
        str(daemon_home),
        "--poll-ms",
        str(poll_ms),
    ]
    lines = ["set -e", "ip link set lo up"]
    for spec, fake in zip(specs, fakes, strict=True):
        log = shlex.quote(str(root / spec.name / "fake.log"))
        lines.append(f"{shlex.join(fake)} >{log} 2>&1 </dev/null &")
    for spec in specs:
        ready = shlex.quote(str(root / spec.name / "fake.ready"))
        lines.append(f"for _ in $(seq 400); do [ -f {ready} ] && break; sleep 0.025; done; [ -f {ready} ]")
    lines.append(f"cd {shlex.quote(str(REPO))}")
    lines.append(f"{shlex.join(daemon)} >{shlex.quote(str(root / 'daemon.log'))} 2>&1 </dev/null &")
    lines.extend(shlex.join([*tmux, *session]) for session in sessions)
    env = {**_base_env(), "HOME": str(root), "TMPDIR": str(root / "tmp")}
    result = subprocess.run(
        ["unshare", "-n", "--", "bash", "-c", "\n".join(lines)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    netns = _netns_of(root, specs)
    if result.returncode != 0 or not netns:
        _abandon(root, netns)
        raise TeamError(f"the team namespace did not start (rc={result.returncode}): {result.stderr.strip()}")
    worker = NamespaceWorker(f"/proc/{_first_pid(root, specs)}/ns/net")
    team: LiveTeam | None = None
    try:
        worker.call(lambda: None)  # enter the namespace now, while the process that names it surely runs
        info = _wait_daemon(root, daemon_home, timeout=30.0)
        seats: dict[str, Seat] = {}
        for index, spec in enumerate(specs):
            seat_root = root / spec.name
            pane = subprocess.run(
                [
                    "tmux",
                    "-S",
                    str(socket_path),
                    "display-message",
                    "-p",
                    "-t",
                    f"={spec.name}:",
                    "#{pane_id}",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            run = EngineRun(
                engine=spec.engine,
                version=engine_version(spec.engine),
                root=seat_root,
                home=seat_root / "home",
                workdir=seat_root / "home" / "project",
                socket=socket_path,
                target=pane,
                fake=FakeModelClient(unix_path=seat_root / "fake.sock"),
                pids={},
                netns=netns,
            )
            run.stopped = True  # the team stops as a whole; this run must never sweep on its own
            seats[spec.name] = Seat(spec.name, spec.engine, spec.role, FIRST_PORT + index, run)
        team = LiveTeam(
            root=root,
            socket=socket_path,
            daemon_home=daemon_home,
            seats=seats,
            netns=netns,
            worker=worker,
            daemon_pid=int(info["pid"]),
            daemon_socket=Path(info["socket"]),
            machine_id=str(info["machineId"]),
            token=homes.read_owner_token(daemon_home) or "",
        )
        team.timings["namespaceUp"] = time.monotonic() - started
        _wait_all_idle(team, idle_timeout, started)
        if skip_permissions:
            for seat in seats.values():
                turn_permissions_off(seat.run)
        team.timings["allIdle"] = time.monotonic() - started
        return team
    except BaseException:
        if team is not None:
            team.stop(keep_files=False)
        else:
            worker.close()
            _abandon(root, netns)
        raise


def _netns_of(root: Path, specs: Sequence[SeatSpec]) -> str:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return os.readlink(f"/proc/{_first_pid(root, specs)}/ns/net")
    return ""


def _first_pid(root: Path, specs: Sequence[SeatSpec]) -> int:
    ready = json.loads((root / specs[0].name / "fake.ready").read_text(encoding="utf-8"))
    return int(ready["pid"])


def _abandon(root: Path, netns: str) -> None:
    """Stop whatever a failed start left in its namespace, and remove the tree."""
    if netns and netns != os.readlink("/proc/self/ns/net"):

        def processes() -> list[int]:
            found = []
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        if os.readlink(entry / "ns" / "net") == netns:
                            found.append(int(entry.name))
            return found

        _sweep(processes)
    shutil.rmtree(root, ignore_errors=True)


def _wait_daemon(root: Path, home: Path, *, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(homes.HomeError):
            info = homes.read_daemon_info(home)
            if info is not None and isinstance(info.get("socket"), str):
                return info
        time.sleep(0.05)
    log = (root / "daemon.log").read_text(encoding="utf-8") if (root / "daemon.log").exists() else ""
    raise TeamError(f"the daemon did not start within {timeout:.0f} s: {log[-2000:]}")


def _wait_all_idle(team: LiveTeam, timeout: float, started: float) -> None:
    def wait(seat: Seat) -> float:
        seat.run.wait_idle(timeout=timeout)
        seat.run.seconds_to_idle = time.monotonic() - started - 2.0  # idle `stable_for` before the return
        return seat.run.seconds_to_idle

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(team.seats)) as pool:
        futures = [pool.submit(wait, seat) for seat in team.seats.values()]
        for future in futures:
            try:
                future.result()
            except EngineError as error:
                raise TeamError(str(error)) from None
