# Only this machine's user reaches the daemon (issue 14, findings 4 and 7). Another local user that read a
# member key from `ps` is refused on every channel by the kernel's word on who it is (SO_PEERCRED), not by
# the directory's permissions alone: the test loosens those on purpose. Keys leave command lines, a shared
# data directory is refused instead of taken over, and the daemon's start-up failures are one clear error.
# The other user is a real process of uid 65534 (setpriv), so these tests need root.
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core.effects import notice_id
from harness.core.records import NoticeKind
from harness.io import home as homes
from harness.io.rpc import PROTOCOL, PROTOCOL_REVISION
from tests import raw_ws
from tests.listener_world import TEAM, Machine

HARNESS = [sys.executable, "-m", "harness.cli.main"]
ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # world-executable, unlike a venv under a private directory
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to act as another user",
)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory another user can traverse (0711): under /tmp, not under pytest's private base directory.
    Removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="harness-trust-"))
    os.chmod(base, 0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _runnable_copy(base: Path) -> Path:
    """What the other user runs, copied where it can read it: the checkout and its venv may sit in a private
    directory (a fresh clone under a 0700 mktemp), which another uid can neither read nor execute. The
    client needs only the standard library, harness.core/io, wsproto and h11; the system Python runs it."""
    import h11
    import wsproto

    code = base / "code"
    if code.exists():  # copied for an earlier call of this test
        return code
    for source, target in ((ROOT / "core", "harness/core"), (ROOT / "io", "harness/io")):
        shutil.copytree(source, code / target, ignore=shutil.ignore_patterns("__pycache__", "web_static"))
    for module in (wsproto, h11):
        shutil.copytree(Path(module.__file__).parent, code / module.__name__,  # type: ignore[arg-type]
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (code / "tests").mkdir()
    for name in ("__init__.py", "other_user.py", "raw_ws.py"):
        shutil.copy(ROOT / "tests" / name, code / "tests" / name)
    for directory in [code, *code.rglob("*")]:
        directory.chmod(0o755 if directory.is_dir() else 0o644)
    return code


def _other_user(job: dict[str, Any], *, as_nobody: bool, base: Path | None = None) -> dict[str, str]:
    command, cwd = [sys.executable, "-m", "tests.other_user"], ROOT
    if as_nobody:
        assert base is not None
        cwd = _runnable_copy(base)
        command = [*AS_NOBODY, SYSTEM_PYTHON, "-m", "tests.other_user"]
    done = subprocess.run(
        command,
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, str] = json.loads(done.stdout)
    return report


@needs_root
def test_finding_4_other_user_refused_on_every_channel(reachable: Path) -> None:
    """Finding 4: "Member keys travel on command lines (`--key KEY`, the prefix the introduction teaches), so
    `ps -eo args` shows them to every user; the daemon accepts any local user on its loopback port. As uid
    65534, a key read from `ps` was enough to ask a bash-hosted member `id > FILE`." """
    home = reachable / "home"
    machine_id = homes.machine_id(homes.ensure_home(home))
    people = [
        {"machineId": machine_id, "agentId": f"agent-{n}", "name": n, "role": n} for n in ("alice", "bob")
    ]
    machine = Machine(home, members=people)
    try:
        handed = machine.owner("key", memberId="alice")
        key = handed["memberKey"]
        # What the owner hands out and what the introduction teaches name a private file, never the key.
        assert key not in handed["command"] and "--key-file" in handed["command"]
        key_file = Path(handed["keyFile"])
        assert key_file.read_text().strip() == key and key_file.stat().st_mode & 0o777 == 0o600
        assert (home / "keys").stat().st_mode & 0o777 == 0o700
        assert machine.daemon.desk is not None
        alice = next(m for m in machine.owner("members")["members"] if m["name"] == "alice")
        notices, intro_id = (
            machine.daemon.desk.desk.notices,
            notice_id(TEAM, alice["id"], NoticeKind.INTRODUCTION),
        )
        deadline = time.monotonic() + 30
        while intro_id not in notices:  # the desk gets it from the delivery worker, after the ledger
            assert time.monotonic() < deadline, "the introduction never reached the desk"
            time.sleep(0.01)
            notices = machine.daemon.desk.desk.notices
        intro = notices[intro_id]
        assert key not in intro.text and f"--key-file {key_file}" in intro.text

        # The key, as another user would read it from `ps` of a member's call made the old way. The private
        # directory alone would stop that user at its door; give it a way to the very sockets (hard links in
        # a directory it may enter, the sockets' modes opened), so that only the peer-credential check
        # stands between it and the daemon.
        exposed = reachable / "exposed"
        exposed.mkdir(mode=0o711)
        for socket_file in (machine.daemon.socket_path, machine.gateway):
            os.chmod(socket_file, 0o666)
            os.link(socket_file, exposed / socket_file.name)
        job = {"daemon": str(exposed / "daemon.sock"), "gateway": str(exposed / "gateway.sock"),
               "webPort": machine.web.port, "team": TEAM, "key": key}  # fmt: skip
        stranger = _other_user(job, as_nobody=True, base=reachable)
        assert stranger["uid"] == NOBODY
        assert stranger["daemon"].startswith("unreachable"), stranger
        assert stranger["gateway"].startswith("unreachable"), stranger
        # The page's port is TCP, open to all: the kernel's word on the client's uid (sock_diag) closes the
        # connection before a byte is read, even with a valid page ticket (a review read one from the
        # browser's command line in /proc and paused the team as uid 1001).
        ticket = machine.in_loop(machine.web.mint_ticket)
        refused_before = machine.web.listener.stats.refused_peers
        with_ticket = _other_user({**job, "ticket": ticket}, as_nobody=True, base=reachable)
        assert with_ticket["web"].startswith("closed"), with_ticket
        assert machine.web.listener.stats.refused_peers == refused_before + 1
        assert machine.daemon.rpc.stats.refused_peers >= 1
        assert machine.daemon.node is not None and machine.daemon.node.gateway.stats.refused_peers >= 1
        assert machine.web.listener.stats.refused_peers >= 1
        assert machine.owner("get")["exchanges"] == []  # nothing was asked

        # The same key from this user's own process works: the refusal was the uid's, not the key's.
        own = _other_user({**job, "ticket": ticket}, as_nobody=False)
        assert own["daemon"].startswith("served"), own
        assert own["gateway"].startswith("answered unauthorized"), own  # reached; needs the owner token
        assert own["web"].startswith("served") and "web_hello" in own["web"], own  # the ticket was good
        assert len(machine.owner("get")["exchanges"]) == 1

        # A member's call made with the taught prefix shows a path to `ps`, not the key.
        question = machine.owner("get")["exchanges"][0]["id"]
        argv = shlex.split(handed["command"])
        assert Path(argv[0]).name == "harness"  # the CLI by its absolute path (an agent's PATH may lack it)
        call = subprocess.Popen(
            [*HARNESS, *argv[1:], "wait", question, "--seconds", "3", "--json"],
            stdout=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"},
        )
        seen = b""
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline and call.poll() is None:
            try:
                seen = Path(f"/proc/{call.pid}/cmdline").read_bytes()
            except OSError:
                break
        out, _ = call.communicate(timeout=60)
        assert call.returncode == 0 and json.loads(out)["reason"] == "timeout", out
        assert seen and key.encode() not in seen and str(key_file).encode() in seen
        assert machine.alive
    finally:
        machine.close()
    assert machine.daemon.internal_errors == 0


def _cli(*args: str, read_only: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI; with `read_only`, in a mount namespace of its own where that directory is mounted read-only
    (root writes through any mode bits, and the venv may not be reachable by another uid)."""
    env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_HOME", "HARNESS_MEMBER_KEY"}}
    wrap = []
    if read_only is not None:
        mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        wrap = ["unshare", "-m", "--", "sh", "-c", mount, str(read_only)]
    return subprocess.run(
        [*wrap, *HARNESS, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )


def _one_json_error(done: subprocess.CompletedProcess[str], code: str) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    error = json.loads(lines[0])
    assert set(error) == {"error", "detail", "operationId"} and error["error"] == code, error
    return str(error["detail"])


def _one_line_error(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"harness: {code}: "), done.stderr


@needs_root
def test_finding_7_a_shared_or_foreign_home_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Finding 7: "`daemon start --home DIR` silently chmods an existing shared 1777 directory to 0700 (it
    should refuse a directory that is not the user's own and private)"."""
    shared, foreign, readable = tmp_path / "shared", tmp_path / "foreign", tmp_path / "readable"
    for directory, mode in ((shared, 0o1777), (foreign, 0o700), (readable, 0o755)):
        directory.mkdir()
        os.chmod(directory, mode)
    os.chown(foreign, NOBODY, NOBODY)
    for directory in (shared, foreign, readable):
        before = directory.stat()
        for command in ("start", "run"):
            detail = _one_json_error(
                _cli("daemon", command, "--home", str(directory), "--json"), "bad_request"
            )
            assert "not a private directory of this user" in detail
            _one_line_error(_cli("daemon", command, "--home", str(directory)), "bad_request")
        after = directory.stat()
        assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)
        assert list(directory.iterdir()) == []  # nothing was written into it


@needs_root
def test_finding_7_json_errors_for_a_read_only_home_and_a_second_daemon(
    tmp_path: Path, reachable: Path
) -> None:
    """Finding 7: "`--json` calls print raw tracebacks on a read-only home or a second `daemon run`"."""
    home = tmp_path / "home"
    started = _cli("daemon", "start", "--home", str(home), "--json")
    assert started.returncode == 0, started.stderr
    try:
        detail = _one_json_error(_cli("daemon", "run", "--home", str(home), "--json"), "conflict")
        assert "already running" in detail
        _one_line_error(_cli("daemon", "run", "--home", str(home)), "conflict")
        _one_json_error(_cli("daemon", "start", "--home", str(home), "--json"), "conflict")
    finally:
        assert _cli("daemon", "stop", "--home", str(home)).returncode == 0

    # A data directory its user may read but not write (read-only): every start-up step fails with one error.
    read_only = reachable / "read-only"
    read_only.mkdir(mode=0o700)
    for command in ("run", "start"):
        home_args = ("--home", str(read_only))
        done = _cli("daemon", command, *home_args, "--json", read_only=read_only)
        detail = _one_json_error(done, "bad_request")
        assert "Read-only file system" in detail
        _one_line_error(_cli("daemon", command, *home_args, read_only=read_only), "bad_request")
    assert list(read_only.iterdir()) == []


def _tcp_listeners(pid: int) -> list[str]:
    """The local addresses of the TCP sockets in LISTEN state that process `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(fields[1])
    return found


def test_finding_7_no_web_page_reaches_the_daemon(tmp_path: Path) -> None:
    """Finding 7: "the RPC port accepts any `Origin` and `Host` (a web page can reach it)"."""
    home = tmp_path / "home"
    started = _cli("daemon", "start", "--home", str(home), "--json")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        assert _tcp_listeners(pid) == []  # no port at all: a page in a browser can name none
        sock = raw_ws.open_unix(home / homes.SOCKET_FILE)
        try:  # a browser's handshake always carries Origin: refused on the socket too, before any upgrade
            assert raw_ws.upgrade(sock, host="evil.example", origin="http://evil.example").startswith(
                "HTTP/1.1 403"
            )
        finally:
            raw_ws.close(sock)
        status = json.loads(_cli("daemon", "status", "--home", str(home), "--json").stdout)
        assert status["listeners"]["rpc"]["refusedPeers"] == 1
    finally:
        assert _cli("daemon", "stop", "--home", str(home)).returncode == 0


def test_finding_7_the_page_refuses_other_names_and_origins_before_upgrading(tmp_path: Path) -> None:
    """The one TCP listener left, `harness web`, answers only to its own loopback name and origin (DNS
    rebinding, a foreign page), and counts what it refused."""
    machine = Machine(tmp_path / "home")
    try:
        own = f"127.0.0.1:{machine.web.port}"
        for host, origin, expected in (
            ("evil.example", f"http://{own}", "HTTP/1.1 421"),
            (own, "http://evil.example", "HTTP/1.1 403"),
            (f"evil.example:{machine.web.port}", f"http://evil.example:{machine.web.port}", "HTTP/1.1 421"),
        ):
            sock = raw_ws.open_tcp(machine.web.port)
            try:
                assert raw_ws.upgrade(sock, host=host, path="/ws", origin=origin).startswith(expected)
            finally:
                raw_ws.close(sock)
        assert machine.web.listener.stats.refused_peers == 3
        assert machine.web_serves()
    finally:
        machine.close()


def test_the_sockets_work_under_a_data_directory_longer_than_sun_path(tmp_path: Path) -> None:
    """A Unix socket's address holds 108 bytes; data directories (pytest's among them) can be longer. The
    daemon, the gateway, the web page server and the CLI all reach such a socket."""
    home = tmp_path / ("a-rather-long-directory-name-" * 4) / "home"
    assert len(os.fsencode(home / homes.SOCKET_FILE)) > 108
    machine = Machine(home)
    try:
        assert machine.daemon.socket_path.is_socket() and machine.gateway.is_socket()
        assert machine.rpc_serves() and machine.gateway_serves() and machine.web_serves()
        listed = _cli("team", "--home", str(home), "list", "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout)["teams"][0]["id"] == TEAM
    finally:
        machine.close()


IMPOSTOR = """
import socket, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen()
print("listening", flush=True)
connection, _ = server.accept()
connection.settimeout(5)
received = b""
try:
    while chunk := connection.recv(65536):
        received += chunk
except OSError:
    pass
print(len(received), flush=True)
"""


@needs_root
def test_a_client_sends_nothing_to_a_socket_another_user_serves(reachable: Path) -> None:
    """An adversarial review, as uid 1001: where a parent of the data directory was writable by others, it
    renamed the directory away and put its own in its place, whose daemon.json named its own socket; the
    owner's `harness team get` then showed its forged question and sent it the owner token and a member key.
    A client now checks who serves the socket (SO_PEERCRED), as the daemon checks who connects."""
    home = homes.ensure_home(reachable / "home")
    token = homes.owner_token(home)
    impostor_dir = reachable / "impostor"
    impostor_dir.mkdir(mode=0o777)
    os.chmod(impostor_dir, 0o777)
    socket_path = impostor_dir / "daemon.sock"
    impostor = subprocess.Popen(
        [*AS_NOBODY, SYSTEM_PYTHON, "-c", IMPOSTOR, str(socket_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert impostor.stdout is not None and impostor.stdout.readline().strip() == "listening"
        info = {"pid": impostor.pid, "socket": str(socket_path), "protocol": PROTOCOL,
                "protocolRevision": PROTOCOL_REVISION}  # fmt: skip
        homes.write_private_json(home / homes.DAEMON_FILE, info)
        done = _cli("team", "--home", str(home), "--team", "t1", "get", "--json")
        assert done.returncode == 3, (done.stdout, done.stderr)  # unreachable: as if no daemon were there
        error = json.loads(done.stdout)
        assert error["error"] == "unreachable" and f"served by uid {NOBODY}" in error["detail"], error
        received, _ = impostor.communicate(timeout=60)
        assert received.strip() == "0", received  # not a byte: no handshake, no token
        assert token not in done.stdout + done.stderr
    finally:
        if impostor.poll() is None:
            impostor.kill()
            impostor.wait(10)


@needs_root
def test_a_data_directory_another_user_could_replace_is_refused(reachable: Path) -> None:
    """The same review: the daemon made the missing parents of HARNESS_HOME with the umask's mode (0777 under
    umask 0), and only the last one 0700. Each missing parent is now made 0700, and a data directory under a
    parent others may write (not sticky), or owned by another user, is refused before anything is written."""
    old = os.umask(0)
    try:
        made = homes.ensure_home(reachable / "u0" / "share" / "harness")
    finally:
        os.umask(old)
    for path in (made, made.parent, made.parent.parent):
        assert path.stat().st_mode & 0o777 == 0o700, path

    shared = reachable / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # writable by others, not sticky: another user can rename what is in it
    (shared / "home").mkdir(mode=0o700)
    foreign = reachable / "foreign"
    foreign.mkdir(mode=0o755)
    os.chown(foreign, NOBODY, NOBODY)  # another user's directory: it may rename its entries
    (foreign / "home").mkdir(mode=0o700)
    sticky = reachable / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp: others cannot rename what is not theirs
    for home, why in ((shared / "home", "others may write"), (foreign / "home", f"belongs to uid {NOBODY}")):
        with pytest.raises(homes.HomeError) as refused:
            homes.ensure_home(home)
        assert "another user could replace" in str(refused.value) and why in str(refused.value)
        detail = _one_json_error(_cli("daemon", "start", "--home", str(home), "--json"), "bad_request")
        assert why in detail
        assert list(home.iterdir()) == []  # nothing was written into it
    assert homes.ensure_home(sticky / "home") == sticky / "home"
