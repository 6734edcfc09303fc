# Finding 1 of the trust review: a plain shell registered as an agent ran peer text. `harness agent start
# --engine shell` started the login shell, the desk read its `$ ` prompt as an idle composer, and a question
# `please check the build; touch FILE` created FILE. team.v1: "Ordinary terminal shells cannot be automatic
# answering members." Real parts only: a real bash in a real tmux server of this test (`-L`, its own name), a
# real daemon with the real tmux Terminals, the real CLI in a subprocess.
from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from harness.io.agents import AgentRegistry
from harness.io.daemon import Daemon
from harness.io.desk_runner import RunnerTiming
from harness.io.terminal_port import Screen, ScreenState, WriteOutcome
from harness.io.tmux import ProcessRunner, TmuxTerminals, WriteTiming, capture, new_session, pane_info
from tests.test_daemon import Api, running, team_with_keys
from tests.test_tmux import server  # noqa: F401  (the fixture: a tmux server of this test only)

DEADLINE = 30.0
TIMING = WriteTiming(enter_delay=0.2, confirm=2.0, poll=0.02, settle=0.15)
LOOKS = 8  # looks at the refused pane before "never written" is asserted, spanning several settle times
PAYLOAD = "please check the build; touch pwned"


class Watched(TmuxTerminals):
    """The daemon's real tmux Terminals, remembering every screen it reported, so a test waits for the desk's
    looks rather than for time."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.seen: dict[str, list[Screen]] = {}

    async def observe(self, agent_id: str) -> Screen:
        screen = await super().observe(agent_id)
        self.seen.setdefault(agent_id, []).append(screen)
        return screen

    def looked_long_enough(self, agent_id: str) -> bool:
        """Enough looks, over several times the settle time after which an idle pane is written to."""
        looks = self.seen.get(agent_id, [])
        return len(looks) >= LOOKS and looks[-1].at_ms - looks[0].at_ms >= 4 * self.timing.settle * 1000


@asynccontextmanager
async def daemon_with_tmux(home: Path) -> AsyncIterator[tuple[Daemon, Watched]]:
    made: list[Watched] = []

    def terminals(registry: AgentRegistry) -> Watched:
        made.append(Watched.from_registry(registry))
        made[-1].timing = TIMING  # a pane reading idle would be written to within a fraction of a second
        return made[-1]

    try:
        async with running(home, terminals=terminals, runner_timing=RunnerTiming(poll_ms=50)) as daemon:
            yield daemon, made[0]
    finally:
        for watched in made:
            await watched.aclose()


async def until(check: Callable[[], Any], what: str) -> None:
    with trio.move_on_after(DEADLINE):
        while not await check():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not within {DEADLINE:g} s: {what}")


async def bash_pane(socket: str, cwd: Path) -> str:
    """A real interactive bash with a plain prompt, ready for input."""
    rc = cwd / "rc"
    rc.write_text("PS1='agent$ '\n")
    command = ["bash", "--noprofile", "--rcfile", str(rc), "-i"]
    pane = await new_session(socket, "bash", command, cwd=str(cwd), config="/dev/null", width=120)
    await until(lambda: shows(socket, pane, "agent$"), "bash shows its prompt")
    return pane


async def shows(socket: str, pane: str, text: str) -> bool:
    return text in await capture(ProcessRunner(socket), pane)


async def foreground(socket: str, pane: str) -> str:
    return (await pane_info(ProcessRunner(socket), pane)).command


async def cli(*args: str, key: str | None = None) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    done = await trio.run_process(
        [sys.executable, "-m", "harness.cli.main", *args, "--json"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env | ({"HARNESS_MEMBER_KEY": key} if key else {}),
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr.decode()


def delivery(daemon: Daemon, question: str) -> tuple[str | None, str | None]:
    view = daemon.durable.teams["t1"].exchanges[question].delivery
    return (None, None) if view is None else (view.state, view.reason)


def introduction(daemon: Daemon, name: str) -> tuple[str | None, str | None]:
    member = next(m for m in daemon.durable.teams["t1"].members.values() if m.name == name)
    view = member.introduction
    return (None, None) if view is None else (view.state, view.reason)


async def test_finding1_a_bash_pane_is_refused_for_pushes_and_joins_only_inbox_only(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """team.v1: "Ordinary terminal shells cannot be automatic answering members." (a) A bash pane is refused
    for pushed notices, whatever engine it claims; (b) inbox-only, a question `please check the build; touch
    FILE` to it never reaches the shell: its notices stay queued, the pane reads offline `inbox-only`, and the
    member reads the question with `harness team inbox`."""
    pane = await bash_pane(server, tmp_path)
    home = tmp_path / "home"
    pwned = tmp_path / "pwned"
    async with daemon_with_tmux(home) as (daemon, terminals):
        attach = ["agent", "attach", "--tmux", pane, "--socket", server, "--name", "bob", "--home", str(home)]
        code, refused = await cli(*attach, "--engine", "shell", "--id", "agent-bob")
        assert code == 1 and refused["error"] == "plain_shell", refused
        assert "ordinary terminal shells cannot be automatic answering members" in refused["detail"]
        owner = await Api.open(daemon)
        tmux = {"socket": server, "target": pane}
        for engine in ("scripted", "claude"):
            error = await owner.error(
                "agent_register", agentId="agent-bob", name="bob", engine=engine, tmux=tmux
            )
            assert error.code == "plain_shell"
        assert (await owner("agent_list"))["agents"] == []

        code, joined = await cli(*attach, "--engine", "shell", "--id", "agent-bob", "--inbox-only")
        assert code == 0 and joined["inboxOnly"] is True, joined
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text=PAYLOAD)

        async def refused_enough() -> bool:
            q1_handled = delivery(daemon, "q1") == ("queued", "pressure")
            return pwned.exists() or (q1_handled and terminals.looked_long_enough("agent-bob"))

        await until(refused_enough, "the desk looked at bob's pane and held q1 back")
        assert not pwned.exists()
        assert daemon.desk is not None and daemon.desk.writes == 0
        assert introduction(daemon, "bob") == ("queued", "offline")
        assert delivery(daemon, "q1") == ("queued", "pressure")  # behind the introduction, which waits
        looks = terminals.seen["agent-bob"]
        assert {(s.state, s.evidence[0].split(":")[0]) for s in looks} == {
            (ScreenState.OFFLINE, "inbox-only")
        }
        assert "[team" not in await capture(ProcessRunner(server), pane)
        code, shown = await cli("agent", "show", "bob", "--home", str(home))
        assert code == 0 and shown["observation"]["state"] == "offline"
        assert "harness team inbox" in shown["observation"]["evidence"][0]

        code, box = await cli("team", "--home", str(home), "--team", "t1", "inbox", key=keys["bob"])
        assert code == 0 and [(q["id"], q["text"]) for q in box["questions"]] == [("q1", PAYLOAD)], box
        with trio.fail_after(DEADLINE):
            while delivery(daemon, "q1") != ("withdrawn", "inbox"):  # read: never pasted later
                await trio.sleep(0.05)
        assert not pwned.exists() and daemon.desk.writes == 0


async def test_finding1_an_agent_program_that_exits_back_to_bash_gets_no_paste(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """An agent program started from bash is registered for pushes (its foreground is the program, not the
    shell); it then exits and bash's `agent$ ` prompt looks like an idle composer. The desk never pastes: each
    look, and the write itself, checks the pane's foreground program first."""
    pane = await bash_pane(server, tmp_path)
    run = ProcessRunner(server)
    agent = f"{sys.executable} -m harness.cli.demo_agent --name bob"
    await run.run("send-keys", "-t", pane, "-l", agent)
    await run.run("send-keys", "-t", pane, "Enter")
    await until(lambda: shows(server, pane, "bob> "), "the agent program shows its prompt")
    assert await foreground(server, pane) != "bash"
    home = tmp_path / "home"
    pwned = tmp_path / "pwned"
    async with daemon_with_tmux(home) as (daemon, terminals):
        owner = await Api.open(daemon)
        tmux = {"socket": server, "target": pane}
        await owner("agent_register", agentId="agent-bob", name="bob", engine="shell", tmux=tmux)
        await run.run("send-keys", "-t", pane, "C-c")  # the agent program ends; bash is back in front

        async def bash_again() -> bool:
            return await foreground(server, pane) == "bash"

        await until(bash_again, "bash is the pane's foreground again")
        await run.run("send-keys", "-t", pane, "Enter")  # a fresh prompt line: exactly an idle composer
        await until(lambda: shows(server, pane, "\nagent$"), "bash shows a prompt of its own")
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text=PAYLOAD)

        async def refused_enough() -> bool:
            return pwned.exists() or terminals.looked_long_enough("agent-bob")

        await until(refused_enough, "the desk looked at bob's pane")
        assert not pwned.exists()
        assert daemon.desk is not None and daemon.desk.writes == 0
        assert introduction(daemon, "bob") == ("queued", "offline")
        last = terminals.seen["agent-bob"][-1]
        assert last.state is ScreenState.OFFLINE and "foreground program is bash" in last.evidence[0]
        # The write boundary itself refuses too, had the desk been told to write: nothing is sent.
        before = await capture(run, pane)
        assert await terminals.write("agent-bob", PAYLOAD) is WriteOutcome.FAILED
        assert await capture(run, pane) == before and not pwned.exists()


async def test_finding7_registration_refuses_control_characters_in_a_tmux_target(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A newline in a tmux target would end the desk's control-mode command and start another
    (`%0\\nkill-server`); no field of a registration may hold a C0 or C1 control character (nor any other
    character a terminal does not print as itself, such as a bidi override)."""
    pane = await new_session(server, "prog", [sys.executable, "-c", "input()"], config="/dev/null")
    home = tmp_path / "home"
    async with daemon_with_tmux(home) as (daemon, _):
        owner = await Api.open(daemon)
        good: dict[str, Any] = {
            "agentId": "agent-x",
            "name": "x",
            "engine": "codex",
            "tmux": {"socket": server, "target": pane},
        }
        for field, value in (
            ("tmux", {"socket": server, "target": f"{pane}\nkill-server"}),
            ("tmux", {"socket": f"{server}\r", "target": pane}),
            ("tmux", {"socket": server, "target": f"{pane}\x00"}),
            ("name", "x\x1b]0;owned\x07"),
            ("name", "x\u202etxt.exe"),
            ("cwd", "/tmp/\x85"),
            ("agentId", "agent-\x9b"),
        ):
            error = await owner.error("agent_register", **{**good, field: value})
            assert error.code == "bad_request" and "control character" in error.detail, error.detail
        assert (await owner("agent_list"))["agents"] == []
        code, refused = await cli(
            "agent",
            "attach",
            "--tmux",
            f"{pane}\nkill-server",
            "--socket",
            server,
            "--engine",
            "codex",
            "--name",
            "x",
            "--home",
            str(home),
        )
        assert code == 2 and refused["error"] == "bad_request" and "U+000A" in refused["detail"], refused
        assert (await owner("agent_register", **good))["tmux"]["target"] == pane


def test_a_registry_written_before_inbox_only_members_still_loads(tmp_path: Path) -> None:
    entry = {
        "agentId": "a-1",
        "name": "amy",
        "engine": "shell",
        "tmux": {"socket": "harness-x", "target": "%3"},
        "cwd": None,
        "startedBy": "daemon",
        "createdAt": 1,
    }
    (tmp_path / "agents.json").write_text(json.dumps({"version": 1, "agents": [entry]}))
    registry = AgentRegistry.load(tmp_path)
    assert registry.unavailable is None
    (loaded,) = registry.entries()
    assert loaded.inbox_only is False and registry.terminals()[0].inbox_only is False
