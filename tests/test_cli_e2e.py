# The CLI as a user and agents run it: a real `harness daemon run` process, every team command as a
# subprocess, a SIGKILL with work pending and a restart, and the exit statuses of the contract.
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.io import home as homes
from harness.io.rpc import PROTOCOL_REVISION

HARNESS = [sys.executable, "-m", "harness.cli.main"]
DEADLINE = 60.0  # seconds: generous, the daemon process shares a loaded two-core machine
LIMITS = {"pendingPerSender": 3, "questionChars": 200, "ttlMinMs": 50, "asksPerMinute": 100}


class Daemon:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "HARNESS_LIMITS": json.dumps(LIMITS)}
        self.process = subprocess.Popen(
            [*HARNESS, "daemon", "run", "--home", str(self.home)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:  # polling a file with a timeout: the process has no other signal
            info = homes.read_daemon_info(self.home)
            if info is not None and info.get("pid") == self.process.pid:
                return
            assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
            time.sleep(0.02)
        raise AssertionError("daemon did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.close_pipes()

    def terminate(self) -> str:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=DEADLINE)
        assert self.process.returncode == 0, err
        return err.decode()

    def close_pipes(self) -> None:
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "home")
    running.start()
    yield running
    if running.process is not None and running.process.poll() is None:
        running.process.kill()
        running.process.wait(10)
    running.close_pipes()


def cli(home: Path, *args: str, key: str | None = None, stdin: str | None = None) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    if key is not None:
        env["HARNESS_MEMBER_KEY"] = key
    done = subprocess.run(
        [*HARNESS, *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )
    body = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, body


def team(home: Path, *args: str, key: str | None = None, stdin: str | None = None) -> tuple[int, Any]:
    return cli(home, "team", "--home", str(home), "--team", "t1", *args, key=key, stdin=stdin)


def ok(result: tuple[int, Any]) -> Any:
    code, body = result
    assert code == 0, body
    return body


def error(result: tuple[int, Any], status: int, code: str) -> dict[str, Any]:
    got_status, body = result
    assert (got_status, body["error"]) == (status, code), body
    assert set(body) == {"error", "detail", "operationId"}
    return dict(body)


def test_every_command_across_a_crash(daemon: Daemon, tmp_path: Path) -> None:
    home = daemon.home
    info = homes.read_daemon_info(home)
    assert info is not None
    here = info["machineId"]  # members on this machine: their introductions name key files here
    members = [
        {"machineId": here, "agentId": name, "name": name, "role": f"{name} role"}
        for name in ("alice", "bob", "carol")
    ]
    (tmp_path / "team.json").write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
    assert (
        ok(cli(home, "team", "--home", str(home), "create", "--file", str(tmp_path / "team.json")))["id"]
        == "t1"
    )
    assert ok(cli(home, "team", "--home", str(home), "list"))["teams"][0]["id"] == "t1"
    assert ok(cli(home, "team", "--home", str(home), "capabilities"))["protocol"] == "team.v1"
    handed = {m["name"]: ok(team(home, "key", m["name"])) for m in members}
    keys = {name: view["memberKey"] for name, view in handed.items()}
    alice, bob, carol = keys["alice"], keys["bob"], keys["carol"]
    roster = ok(team(home, "members", key=bob))["members"]
    assert [m["name"] for m in roster] == ["alice", "bob", "carol"]
    # The prefix an introduction teaches names the member's key file, never the key; the CLI reads it.
    bob_file = Path(handed["bob"]["keyFile"])
    assert bob_file.read_text().strip() == bob and bob_file.stat().st_mode & 0o777 == 0o600
    assert bob not in handed["bob"]["command"] and f"--key-file {bob_file}" in handed["bob"]["command"]
    assert ok(team(home, "--key-file", str(bob_file), "members"))["members"] == roster
    # Issue 16, item 1: an agent runs what it is taught even with no `harness` on its PATH (started as the
    # README shows, `.venv/bin/harness agent start`): the prefix names the CLI by its absolute path.
    taught = shlex.split(handed["bob"]["command"])
    assert Path(taught[0]).is_absolute()
    argv, bare = [*taught, "members", "--json"], {"PATH": "/nonexistent"}
    lone = subprocess.run(argv, env=bare, capture_output=True, text=True, check=False)
    assert lone.returncode == 0 and json.loads(lone.stdout)["members"] == roster, lone.stderr
    (tmp_path / "dave.json").write_text(
        json.dumps({"id": "dave1", "machineId": here, "agentId": "d", "name": "dave"})
    )
    assert ok(team(home, "add", "--file", str(tmp_path / "dave.json")))["id"] == "dave1"
    dave_file = Path(ok(team(home, "key", "dave"))["keyFile"])
    assert dave_file.exists()
    assert ok(team(home, "remove", "dave1"))["state"] == "removed"
    assert not dave_file.exists()  # a removed member's key is revoked, and its file goes with it

    asked = ok(team(home, "ask", "bob", "Which endpoint?", "--id", "q1", "--context", "phone", key=alice))
    assert (asked["id"], asked["state"]) == ("q1", "open")
    assert ok(team(home, "ask", "bob", "--id", "q1", "--context", "phone", "--text-file", "-", key=alice,
                   stdin="Which endpoint?"))["id"] == "q1"  # fmt: skip
    conflict = error(team(home, "ask", "bob", "Something else", "--id", "q1", key=alice), 1, "conflict")
    assert conflict["operationId"] == "q1"
    error(team(home, "reply", "q1", "me!", key=alice), 1, "wrong_member")
    error(team(home, "reply", "q1", "me!", key=carol), 1, "not_found")  # not carol's question to see
    ok(team(home, "ask", "bob", "Still there after a crash?", "--id", "q2", key=alice))
    ok(team(home, "ask", "carol", "Quick one", "--id", "q3", "--ttl", "2", key=alice))
    bound = error(team(home, "ask", "bob", "x" * 201, key=bob), 1, "bound_exceeded")
    assert "question_chars" in bound["detail"]
    for n in range(3):
        ok(team(home, "ask", "carol", f"bob's {n}", key=bob))
    assert (
        "pending_per_sender"
        in error(team(home, "ask", "carol", "four", key=bob), 1, "bound_exceeded")["detail"]
    )
    assert [q["id"] for q in ok(team(home, "inbox", key=bob))["questions"]] == ["q1", "q2"]

    daemon.kill()  # SIGKILL with q2 and q3 pending and q3's deadline armed
    error(team(home, "inbox", key=bob), 3, "unreachable")
    daemon.start()

    assert ok(team(home, "status", "q2", key=bob))["state"] == "open"
    again = ok(team(home, "ask", "bob", "Still there after a crash?", "--id", "q2", key=alice))
    assert again["id"] == "q2" and again["createdAt"] == ok(team(home, "status", "q2"))["createdAt"]
    assert ok(team(home, "wait", "q3", "--seconds", "10", key=alice))["reason"] == "expired"
    late = ok(team(home, "reply", "q3", "sorry, late", key=carol))
    assert (late["state"], late["answer"]["late"]) == ("expired", True)
    answered = ok(team(home, "reply", "q1", "GET /state", "--evidence", "io/daemon.py:1", key=bob))
    assert answered["answer"]["evidence"] == ["io/daemon.py:1"]
    assert ok(team(home, "wait", "q1", "--seconds", "5", key=alice))["reason"] == "answered"
    assert [a["id"] for a in ok(team(home, "inbox", key=alice))["answers"]] == ["q1", "q3"]  # newest first
    assert ok(team(home, "cancel", "q2", key=alice))["state"] == "cancelled"
    by_owner = ok(team(home, "ask", "alice", "from the user", "--from", "carol", "--id", "q4"))
    assert by_owner["byUser"] is True
    assert ok(team(home, "reply", "q4", "ok", "--member", "alice"))["answer"]["author"] == "user"
    assert len(ok(team(home, "status"))["exchanges"]) == 7

    # Two members waiting on each other both wake.
    ok(team(home, "ask", "carol", "a to c", "--id", "qa", key=alice))
    env = {**os.environ, "HARNESS_MEMBER_KEY": alice}
    waiting = subprocess.Popen(
        [*HARNESS, "team", "--home", str(home), "--team", "t1", "wait", "qa", "--seconds", "20", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    ok(team(home, "ask", "alice", "c to a", "--id", "qb", key=carol))
    assert ok(team(home, "wait", "qb", "--seconds", "20", key=carol))["reason"] == "incoming"
    out, _ = waiting.communicate(timeout=30)
    assert waiting.returncode == 0 and json.loads(out)["reason"] == "incoming", out

    assert ok(team(home, "pause"))["state"] == "paused"
    assert ok(team(home, "ask", "bob", "paused?", key=alice))["state"] == "open"  # pause holds, never refuses
    assert ok(team(home, "resume"))["state"] == "active"
    assert ok(team(home, "archive"))["state"] == "archived"
    error(team(home, "get", key=alice), 1, "unauthorized")
    error(team(home, "status", "nope"), 1, "not_found")
    assert "Members" not in json.dumps(ok(team(home, "get")))
    assert all(k not in json.dumps(ok(team(home, "get"))) for k in keys.values())
    assert "stopped" in daemon.terminate()


def test_daemon_start_status_stop_and_usage(tmp_path: Path) -> None:
    home = tmp_path / "home"
    started = ok(cli(home, "daemon", "start", "--home", str(home)))
    try:
        assert started["running"] is True and started["protocol"] == "team.v1"
        again = error(cli(home, "daemon", "start", "--home", str(home)), 1, "conflict")
        assert "already running" in again["detail"]
        status = ok(cli(home, "daemon", "status", "--home", str(home)))
        assert (status["pid"], status["machineId"]) == (started["pid"], started["machineId"])
        assert status["socket"] == str(home / "daemon.sock") == started["socket"]
        assert set(status["listeners"]) == {"rpc", "gateway"} and status["internalErrors"] == 0
        assert status["listeners"]["rpc"]["accepted"] >= 1 and status["listeners"]["rpc"]["refusedPeers"] == 0
        assert home.stat().st_mode & 0o777 == 0o700
        assert (home / "daemon.json").stat().st_mode & 0o777 == 0o600
        error(cli(home, "team", "--home", str(home), "inbox"), 2, "bad_request")  # no --team
        usage = subprocess.run(
            [*HARNESS, "team", "--team", "t", "wait"], capture_output=True, text=True, timeout=30, check=False
        )
        assert usage.returncode == 2
        doctor = ok(cli(home, "doctor", "--home", str(home)))
        assert doctor["ok"] is True and doctor["daemon"]["running"] is True
        assert doctor["daemon"]["listeners"]["rpc"]["droppedConnections"] == 0
    finally:
        stopped = ok(cli(home, "daemon", "stop", "--home", str(home)))
    assert stopped["stopped"] is True and not homes.pid_alive(started["pid"])
    error(cli(home, "daemon", "status", "--home", str(home)), 3, "unreachable")


def _fake_daemon(path: Path, revision: int, answer_requests: bool) -> tuple[socket.socket, threading.Thread]:
    """A WebSocket server that speaks `capabilities` only, then drops the connection on any other request."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request, TextMessage

    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            ws = WSConnection(ConnectionType.SERVER)
            while data := conn.recv(65536):
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, Request):
                        conn.sendall(ws.send(AcceptConnection()))
                    elif isinstance(event, TextMessage):
                        frame = json.loads(event.data)
                        if frame["action"] != "capabilities" and not answer_requests:
                            return  # the request arrived; the reply is lost
                        result = {"protocol": "team.v1", "protocolRevision": revision}
                        reply = {"type": "team_result", "requestId": frame["requestId"], "result": result}
                        conn.sendall(ws.send(TextMessage(data=json.dumps(reply))))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_lost_reply_is_uncertain_and_an_old_daemon_is_incompatible(tmp_path: Path) -> None:
    fake = tmp_path / "fake.sock"
    listener, thread = _fake_daemon(fake, revision=PROTOCOL_REVISION, answer_requests=False)
    with listener:
        lost = cli(tmp_path, "team", "--home", str(tmp_path), "--socket", str(fake), "--team", "t1",
                   "ask", "bob", "hello", "--id", "op-7", key="k")  # fmt: skip
        assert error(lost, 4, "uncertain")["operationId"] == "op-7"
        thread.join(10)
    listener, thread = _fake_daemon(fake, revision=PROTOCOL_REVISION - 1, answer_requests=True)
    with listener:
        old = cli(tmp_path, "team", "--home", str(tmp_path), "--socket", str(fake), "--team", "t1", "inbox",
                  key="k")  # fmt: skip
        assert "older" in error(old, 1, "incompatible")["detail"]
        thread.join(10)


def human(*args: str | bytes, stdin: bytes = b"") -> tuple[int, str, str]:
    """A command as a person types it (no --json): its status, stdout and stderr. Arguments may be bytes that
    are not UTF-8, as a shell passes them."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    done = subprocess.run(
        [*HARNESS, *args], env=env, capture_output=True, input=stdin, timeout=60, check=False
    )
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def test_hostile_numbers_and_bytes_get_one_line_never_a_traceback(daemon: Daemon, tmp_path: Path) -> None:
    """Issue 17: "No traceback ever reaches a user": --ttl nan|inf, wait --seconds nan|inf|huge and bytes
    that are not UTF-8 (in an argument, on stdin) each raised one before."""
    home = daemon.home
    info = homes.read_daemon_info(home)
    assert info is not None
    members = [{"machineId": info["machineId"], "agentId": n, "name": n} for n in ("alice", "bob")]
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
    ok(cli(home, "team", "--home", str(home), "create", "--file", str(team_file)))
    asker = ("--from", "alice")
    for ttl in ("nan", "inf", "-inf", "1e309"):
        assert (
            "--ttl" in error(team(home, "ask", "bob", "hi", "--ttl", ttl, *asker), 2, "bad_request")["detail"]
        )
    for seconds in ("nan", "inf", "1e309"):
        error(team(home, "wait", "q", "--seconds", seconds), 2, "bad_request")
    for seconds in ("-1000", "1e300"):
        error(team(home, "wait", "q", "--seconds", seconds), 1, "bound_exceeded")
    base = ["team", "--home", str(home), "--team", "t1"]
    for argv, stdin in (
        ([*base, "ask", "bob", b"caf\xe9", *asker], b""),
        ([*base, "ask", b"b\xffb", "hi", *asker], b""),
        ([*base, "ask", "bob", "--text-file", "-", *asker], b"caf\xe9 \xff"),
        ([*base, "reply", "q", "--text-file", "-"], b"\xed\xa0\x80"),  # an encoded surrogate
        (["team", "--home", str(home), "create", "--file", "-"], b'{"name": "\xff", "members": []}'),
        (["team", "--home", str(home), "create", "--file", "-"], b'{"name": "\\udcff", "members": []}'),
        (["team", "--home", str(home), "add", "--team", "t1", "--file", "-"], b'{"name": 1e999}'),
    ):
        for json_out in ((), ("--json",)):
            status, out, err = human(*argv, *json_out, stdin=stdin)
            assert status == 2, (argv, out, err)
            if json_out:
                assert json.loads(out)["error"] == "bad_request" and err == "", (argv, out, err)
            else:
                assert err.startswith("harness: bad_request: ") and err.count("\n") == 1 and out == "", err
    assert len(ok(team(home, "get"))["exchanges"]) == 0


def test_rejections_speak_the_options_units_and_only_uncertainty_asks_for_a_retry(
    daemon: Daemon, tmp_path: Path
) -> None:
    """Issue 17: a TTL error quotes seconds for --ttl, given in seconds; "(operation id …; a retry must reuse
    it)" is not printed on a final rejection, and when it is printed it says that `--id ID` reuses it."""
    home = daemon.home
    info = homes.read_daemon_info(home)
    assert info is not None
    members = [{"machineId": info["machineId"], "agentId": n, "name": n} for n in ("alice", "bob")]
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
    ok(cli(home, "team", "--home", str(home), "create", "--file", str(team_file)))
    base = ["team", "--home", str(home), "--team", "t1", "ask", "bob", "hi", "--from", "alice"]
    status, _, err = human(*base, "--ttl", "100000", "--id", "q1")
    limit = LIMITS["ttlMinMs"] / 1000
    expected = f"--ttl must be {limit:g} s to 86400 s, not 100000 s (bound ttl)"
    assert (status, err) == (1, f"harness: bound_exceeded: {expected}\n")
    assert "ms" not in error(team(home, "ask", "bob", "hi", "--from", "alice", "--ttl", "0.01"), 1,
                             "bound_exceeded")["detail"]  # fmt: skip
    ok(team(home, "ask", "bob", "hi", "--from", "alice", "--id", "q2"))
    status, _, err = human(*base[:-3], "something else", "--from", "alice", "--id", "q2")
    assert status == 1 and err.startswith("harness: conflict: ") and "retry" not in err, err
    assert error(team(home, "ask", "bob", "other", "--from", "alice", "--id", "q2"), 1, "conflict")[
        "operationId"] == "q2"  # fmt: skip


def test_an_uncertain_ask_says_how_to_retry_it(tmp_path: Path) -> None:
    fake = tmp_path / "fake.sock"
    listener, thread = _fake_daemon(fake, revision=PROTOCOL_REVISION, answer_requests=False)
    with listener:
        status, _, err = human("team", "--home", str(tmp_path), "--socket", str(fake), "--team", "t1", "ask",
                               "bob", "hello", "--id", "op-7", "--key", "k")  # fmt: skip
        thread.join(10)
    assert status == 4 and err.startswith("harness: uncertain: ") and err.count("\n") == 1, err
    assert err.endswith("(operation id op-7; a retry must reuse it: retry with --id op-7)\n"), err
