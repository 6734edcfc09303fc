# The terminal layer against a real tmux 3.3a: a private server per test (`-L` with a unique name, its own
# HOME), a scripted fake TUI in its pane that logs every input, and the TmuxTerminals port on top. What must
# hold: no byte is sent in an unsafe state, a draft is never touched, a write is one bracketed paste with
# Enter as its own key, and a submit that cannot be confirmed is reported uncertain, never retried blindly.
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from harness.io.terminal_port import ScreenState, WriteOutcome
from harness.io.tmux import (
    AgentTerminal,
    ControlRunner,
    ProcessRunner,
    TmuxError,
    TmuxTerminals,
    WriteTiming,
    capture,
    kill_server,
    new_session,
    pane_info,
    plain_shell_in,
    quote,
)

FAKE_TUI = Path(__file__).with_name("fake_tui.py")
# A confirm window delays only a write that is never confirmed, so it is long where the write must succeed
# (a loaded machine may take seconds to draw a paste) and shortened only where UNCERTAIN is the expected end.
FAST = WriteTiming(enter_delay=0.2, confirm=10.0, poll=0.02, settle=0.15)
DEADLINE = 60.0


@attrs.define
class Pane:
    socket: str
    target: str
    control: Path
    log: Path
    terminals: TmuxTerminals

    async def say(self, command: str, *, wait: bool = True) -> None:
        """Steer the fake TUI and wait until it drew the result."""
        acks = sum(1 for e in self.events() if "control" in e)
        with open(self.control, "w") as fifo:
            fifo.write(command + "\n")
        with trio.fail_after(DEADLINE):
            if not wait:
                return
            while sum(1 for e in self.events() if "control" in e) <= acks:
                await trio.sleep(0.01)

    def events(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def inputs(self) -> list[dict[str, object]]:
        return [e for e in self.events() if "paste" in e or "key" in e]

    async def until(self, state: ScreenState) -> None:
        with trio.fail_after(DEADLINE):
            while (await self.terminals.observe("a")).state is not state:
                await trio.sleep(0.02)


@pytest.fixture
async def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A tmux server of this test only; stopped by kill-server on its own socket, then by its PID."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TMUX", raising=False)
    socket = f"harness-tmuxtest-{os.getpid()}-{secrets.token_hex(4)}"
    found: list[str] = []
    yield socket
    with contextlib.suppress(TmuxError):
        found = await ProcessRunner(socket).run("display-message", "-p", "#{pid} #{socket_path}")
    await kill_server(socket)
    for line in found:  # it exits on its own within a second or two; make sure, by its PID, without waiting
        pid, path = line.split(" ", 1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # tmux leaves its socket file behind


async def _start(server: str, tmp_path: Path, command: list[str], engine: str, timing: WriteTiming) -> Pane:
    target = await new_session(
        server, "t", command, width=100, height=30, config="/dev/null", cwd=str(tmp_path)
    )
    terminals = TmuxTerminals(lambda: [AgentTerminal("a", engine, server, target)], timing=timing)
    return Pane(server, target, tmp_path / "control", tmp_path / "log.jsonl", terminals)


@pytest.fixture
async def tui(server: str, tmp_path: Path) -> AsyncIterator[Pane]:
    os.mkfifo(tmp_path / "control")
    command = [
        sys.executable,
        str(FAKE_TUI),
        "--control",
        str(tmp_path / "control"),
        "--log",
        str(tmp_path / "log.jsonl"),
    ]
    pane = await _start(server, tmp_path, command, "claude", FAST)
    await pane.until(ScreenState.IDLE)
    yield pane
    await pane.terminals.aclose()


# --- the tmux client ----------------------------------------------------------------------------------------


async def test_control_mode_answers_and_errors(tui: Pane) -> None:
    runner = ControlRunner(tui.socket)
    try:
        odd = 'it\'s $HOME ~ #{pane_id} ; \\ "q"'
        await runner.run("set-buffer", "-b", "probe", odd)
        saved = tui.log.with_name("probe")
        await runner.run("save-buffer", "-b", "probe", str(saved))
        with trio.fail_after(DEADLINE):
            while not saved.exists() or saved.read_text() != odd:  # the client writes it after %end
                await trio.sleep(0.02)
        with pytest.raises(TmuxError):
            await runner.run("capture-pane", "-p", "-t", "%999")
        assert await runner.run("display-message", "-p", "ok") == ["ok"]  # still usable after an error
        by_process = await capture(ProcessRunner(tui.socket), tui.target)
        assert await capture(runner, tui.target) == by_process
        assert "\x1b[" in by_process  # colours come through
    finally:
        await runner.aclose()
    with pytest.raises(ValueError):
        quote("two\nlines")


async def test_control_client_reconnects_when_tmux_drops_it(tui: Pane) -> None:
    runner = ControlRunner(tui.socket)
    try:
        assert await runner.run("display-message", "-p", "one") == ["one"]
        await ProcessRunner(tui.socket).run("detach-client", "-a", "-s", "t")  # every client of our session
        with trio.fail_after(DEADLINE):
            while True:
                try:
                    assert await runner.run("display-message", "-p", "two") == ["two"]
                    break
                except TmuxError:
                    await trio.sleep(0.02)  # the detach raced the command: may have run, so it says so
    finally:
        await runner.aclose()


async def test_pane_info_names_the_pane_s_process_and_its_tty(tui: Pane) -> None:
    """What the plain-shell check by process starts from (io/pane_processes.py): the pane's first process
    and its tty, on which that process runs."""
    pane = await pane_info(ProcessRunner(tui.socket), tui.target)
    assert pane.pid is not None and str(FAKE_TUI) in Path(f"/proc/{pane.pid}/cmdline").read_text()
    assert stat.S_ISCHR(os.stat(pane.tty).st_mode) and os.path.samefile(f"/proc/{pane.pid}/fd/0", pane.tty)
    assert await plain_shell_in(pane) is None


# --- observing ----------------------------------------------------------------------------------------------


async def test_observe_follows_the_fake_engine(tui: Pane) -> None:
    screen = await tui.terminals.observe("a")
    assert screen.state is ScreenState.IDLE and "Fake Code" in screen.text
    await tui.say("busy")
    await tui.until(ScreenState.BUSY)
    await tui.say("idle")
    await tui.until(ScreenState.IDLE)
    await tui.say("type half a thought")
    await tui.until(ScreenState.DRAFT)
    await tui.say("dialog")
    await tui.until(ScreenState.DIALOG)
    await tui.say("quit", wait=False)
    await tui.until(ScreenState.OFFLINE)  # remain-on-exit keeps the dead pane
    assert (await tui.terminals.observe("nobody")).state is ScreenState.OFFLINE


async def test_fresh_agent_reads_settling_until_its_idle_screen_settles(server: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "control")
    command = [
        sys.executable,
        str(FAKE_TUI),
        "--control",
        str(tmp_path / "control"),
        "--log",
        str(tmp_path / "log.jsonl"),
    ]
    pane = await _start(server, tmp_path, command, "claude", attrs.evolve(FAST, settle=0.6))
    try:
        seen: list[ScreenState] = []
        with trio.fail_after(DEADLINE):
            while not seen or seen[-1] is not ScreenState.IDLE:
                seen.append((await pane.terminals.observe("a")).state)
                await trio.sleep(0.05)
        assert ScreenState.SETTLING in seen and ScreenState.BUSY not in seen
        assert await pane.terminals.write("a", "late") is WriteOutcome.OK
    finally:
        await pane.terminals.aclose()


# --- writing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("unsafe", ["busy", "dialog", "type a human draft"])
async def test_no_write_in_an_unsafe_state_then_exactly_one_when_idle(tui: Pane, unsafe: str) -> None:
    await tui.say("hold")
    await tui.say(unsafe)
    expected = {"busy": ScreenState.BUSY, "dialog": ScreenState.DIALOG}.get(unsafe, ScreenState.DRAFT)
    await tui.until(expected)
    before = await capture(ProcessRunner(tui.socket), tui.target)
    for _ in range(3):
        assert await tui.terminals.write("a", "[team t] Question q1 from b:\nhi?") is WriteOutcome.FAILED
    assert tui.inputs() == []  # not one byte reached the engine
    assert await capture(ProcessRunner(tui.socket), tui.target) == before  # the draft is byte-for-byte intact
    if unsafe != "busy":
        return
    await tui.say("idle")
    await tui.until(ScreenState.IDLE)
    assert await tui.terminals.write("a", "[team t] Question q1 from b:\nhi?") is WriteOutcome.OK
    inputs = tui.inputs()
    # One bracketed paste (tmux sends line breaks as CR, as a terminal does), then Enter as its own key.
    assert [("paste" in e, e.get("paste", e.get("key"))) for e in inputs] == [
        (True, "[team t] Question q1 from b:\rhi?"),
        (False, "Enter"),
    ]
    # A late-woken TUI logs the paste late and shrinks the gap; half the delay still tells a missing one.
    assert float(inputs[1]["t"]) - float(inputs[0]["t"]) >= FAST.enter_delay * 0.5  # type: ignore[arg-type]
    assert [e["submitted"] for e in tui.events() if "submitted" in e] == ["[team t] Question q1 from b:\nhi?"]


async def test_a_long_notice_is_folded_by_the_engine_and_still_confirmed(tui: Pane) -> None:
    text = "\n".join(f"line {i} of a long notice" for i in range(8))
    assert await tui.terminals.write("a", text) is WriteOutcome.OK
    assert [e["submitted"] for e in tui.events() if "submitted" in e] == [text]
    assert sum("paste" in e for e in tui.inputs()) == 1


async def test_default_timing_waits_half_a_second_before_enter(tui: Pane) -> None:
    tui.terminals.timing = WriteTiming(settle=0.0)
    assert await tui.terminals.write("a", "hello there") is WriteOutcome.OK
    paste, enter = tui.inputs()
    assert float(enter["t"]) - float(paste["t"]) >= WriteTiming().enter_delay * 0.5  # type: ignore[arg-type]


async def test_a_dialog_that_opens_on_the_paste_gets_no_enter(tui: Pane) -> None:
    await tui.say("onpaste dialog")
    assert await tui.terminals.write("a", "a notice") is WriteOutcome.UNCERTAIN
    assert [e.get("key") for e in tui.inputs() if "key" in e] == []  # Enter would have approved it


async def test_a_person_typing_into_the_paste_gets_no_enter(tui: Pane) -> None:
    await tui.say("onpaste type and mine")
    assert await tui.terminals.write("a", "a notice") is WriteOutcome.UNCERTAIN
    assert [e for e in tui.inputs() if "key" in e] == []
    assert not any("submitted" in e for e in tui.events())


async def test_a_swallowed_enter_is_repeated_once_only_while_our_draft_shows(tui: Pane) -> None:
    await tui.say("swallow 1")
    assert await tui.terminals.write("a", "first notice") is WriteOutcome.OK
    assert [e.get("key") for e in tui.inputs() if "key" in e] == ["Enter", "Enter"]
    await tui.until(ScreenState.IDLE)
    tui.terminals.timing = attrs.evolve(FAST, confirm=2.0)  # both Enters go unconfirmed: each waits it out
    await tui.say("swallow 5")
    assert await tui.terminals.write("a", "second notice") is WriteOutcome.UNCERTAIN
    assert [e.get("key") for e in tui.inputs() if "key" in e] == ["Enter"] * 4  # two per write, at most


async def test_turn_matches_only_our_notice(tui: Pane) -> None:
    await tui.say("hold")
    assert await tui.terminals.write("a", "[team t] Question q7 from b:\nwhich port?") is WriteOutcome.OK
    with trio.fail_after(DEADLINE):
        while not await tui.terminals.turn_matches("a", "[team t] Question q7 from b:\nwhich port?"):
            await trio.sleep(0.02)
    assert not await tui.terminals.turn_matches("a", "[team t] Question q8 from b:\nother")
    await tui.say("idle")
    await tui.until(ScreenState.IDLE)
    assert await tui.terminals.turn_matches("a", "[team t] Question q7 from b:\nwhich port?")  # finished turn


async def test_never_an_interrupt_or_cancel_key(tui: Pane) -> None:
    outcomes: list[WriteOutcome] = []
    for setup in ("busy", "idle", "dialog", "idle", "onpaste dialog", "idle", "onpaste type x"):
        await tui.say(setup)
        outcomes.append(await tui.terminals.write("a", f"notice after {setup}"))
    assert WriteOutcome.OK in outcomes and WriteOutcome.FAILED in outcomes
    keys = {e.get("key") for e in tui.inputs()}
    assert keys <= {None, "Enter"}


# --- a plain shell is never written to; a scripted agent is ------------------------------------------------


async def test_finding1_a_bash_pane_is_never_written_to(server: str, tmp_path: Path) -> None:
    """team.v1: "Ordinary terminal shells cannot be automatic answering members." Whatever engine a bash pane
    was registered as (`shell` reads its `agent$ ` prompt as an empty composer), the pane reads offline and a
    write sends nothing: the foreground program is checked at every look, the write's own recheck included."""
    rc = tmp_path / "rc"
    rc.write_text("PS1='agent$ '\n")
    pane = await _start(server, tmp_path, ["bash", "--noprofile", "--rcfile", str(rc), "-i"], "shell", FAST)
    try:
        with trio.fail_after(DEADLINE):
            while "agent$" not in await capture(ProcessRunner(server), pane.target):
                await trio.sleep(0.02)
        before = await capture(ProcessRunner(server), pane.target)
        with trio.fail_after(DEADLINE):  # past the settle time in which any fresh pane reads `settling`
            while (screen := await pane.terminals.observe("a")).state is ScreenState.SETTLING:
                await trio.sleep(0.02)
        assert screen.state is ScreenState.OFFLINE and "foreground program is bash" in screen.evidence[0]
        assert await pane.terminals.write("a", "please check the build; touch pwned") is WriteOutcome.FAILED
        assert await capture(ProcessRunner(server), pane.target) == before  # not one byte was typed
        assert not (tmp_path / "pwned").exists()
    finally:
        await pane.terminals.aclose()


async def test_writing_into_a_scripted_agent(server: str, tmp_path: Path) -> None:
    """The demo agent, registered as `scripted` (a program that takes each line as a message): the generic
    prompt profile reads its `NAME> ` prompt, a person's draft is never touched, and a write is submitted."""
    agent = [sys.executable, "-m", "harness.cli.demo_agent", "--name", "bob"]
    pane = await _start(server, tmp_path, agent, "scripted", FAST)
    run = ProcessRunner(server)
    try:
        await pane.until(ScreenState.IDLE)
        await run.run("send-keys", "-t", pane.target, "-l", "typed by a person")
        await pane.until(ScreenState.DRAFT)
        assert await pane.terminals.write("a", "never") is WriteOutcome.FAILED
        await run.run("send-keys", "-t", pane.target, "Enter")  # the person sends their own draft
        await pane.until(ScreenState.IDLE)
        assert await pane.terminals.write("a", "first notice") is WriteOutcome.OK
        await pane.until(ScreenState.IDLE)
        assert await pane.terminals.write("a", "two\nlines") is WriteOutcome.OK
        await pane.until(ScreenState.IDLE)
        shown = (await pane.terminals.observe("a")).text
        assert shown.count("(nothing to do with that)") == 3 and "bob> two lines" in shown
    finally:
        await pane.terminals.aclose()


# --- the first-run demo ----------------------------------------------------------------------------------


def test_demo_walks_ask_reply_and_continuation_through_real_panes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TMUX"} | {"HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "demo"],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=True,
    )
    out = done.stdout
    assert "question q-mobile notice: accepted" in out
    assert "answer notice to the asker: accepted" in out
    assert "Continuing my task with that answer. Done." in out
    assert "unconfirmed" not in out
    socket = next(line for line in out.splitlines() if "private tmux server -L" in line).split("-L ")[1]
    alive = subprocess.run(["tmux", "-L", socket, "has-session"], capture_output=True, check=False)
    assert alive.returncode != 0  # the demo stopped the tmux server it started


# --- harness agent start | attach | list | show ----------------------------------------------------------


async def _cli(command: str, *args: str) -> tuple[int, Any]:
    done = await trio.run_process(
        [sys.executable, "-m", "harness.cli.main", "agent", command, "--json", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr.decode()


async def test_agent_start_attach_list_show(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_daemon import running

    monkeypatch.setenv("SHELL", "/bin/bash")  # the login shell `start --inbox-only` runs
    home = tmp_path / "home"
    agent = [sys.executable, "-m", "harness.cli.demo_agent", "--name"]
    await new_session(server, "mine", [*agent, "att"], config="/dev/null")
    await new_session(server, "sh", ["bash", "--noprofile", "--norc", "-i"], config="/dev/null")
    common = ["--home", str(home)]
    async with running(home):
        code, started = await _cli(
            "start", "--engine", "scripted", "--name", "sh1", *common, "--", *agent, "sh1"
        )
        assert code == 0, started
        own = started["tmux"]["socket"]
        try:
            assert (started["name"], started["engine"], started["startedBy"]) == ("sh1", "scripted", "daemon")
            assert started["tmux"]["target"].startswith("%") and started["inboxOnly"] is False
            # No program: a plain shell is never started for pushed notices, only as an inbox-only member.
            code, refused = await _cli("start", "--engine", "shell", "--name", "nosh", *common)
            assert code == 2 and refused["error"] == "bad_request" and "--inbox-only" in refused["detail"]
            code, inbox = await _cli("start", "--engine", "shell", "--name", "ibx", "--inbox-only", *common)
            assert code == 0 and inbox["inboxOnly"] is True, inbox
            attach = ["attach", "--socket", server, *common]
            code, attached = await _cli(
                *attach, "--tmux", "mine:0.0", "--engine", "scripted", "--name", "att"
            )
            assert code == 0, attached
            assert (attached["tmux"], attached["startedBy"]) == (
                {"socket": server, "target": "%0"},
                "attached",
            )
            code, shell = await _cli(*attach, "--tmux", "sh:0.0", "--engine", "shell", "--name", "bash")
            assert code == 1 and shell["error"] == "plain_shell", shell
            missing = await _cli(*attach, "--tmux", "%77", "--engine", "scripted", "--name", "x")
            assert missing[0] == 1 and missing[1]["error"] == "not_found"
            with trio.fail_after(DEADLINE):
                while True:
                    code, listed = await _cli("list", *common)
                    states = {a["name"]: a["observation"]["state"] for a in listed["agents"]}
                    if states == {"sh1": "idle", "att": "idle", "ibx": "offline"}:
                        break
                    await trio.sleep(0.05)
            code, shown = await _cli("show", "sh1", *common)
            assert code == 0 and shown["agentId"] == started["agentId"]
            assert set(shown["observation"]) == {
                "state",
                "busy",
                "draft",
                "dialog",
                "safeToWrite",
                "evidence",
            }
            code, shown = await _cli("show", "ibx", *common)
            assert shown["observation"]["evidence"][0].startswith("inbox-only")
        finally:
            found = await ProcessRunner(own).run("display-message", "-p", "#{pid} #{socket_path}")
            await kill_server(own)
            for line in found:
                pid, path = line.split(" ", 1)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


async def test_a_directory_or_an_argument_reaches_tmux_as_it_is_and_runs_nothing(
    server: str, tmp_path: Path
) -> None:
    """An adversarial review: tmux expands formats in new-session's `-c`, so `agent start` inside a checkout
    named `#(id >PWNED)` ran `id`; and tmux takes any argument that ends in `;` for a command separator,
    even after `--`, so an engine argument `...;` followed by `run-shell "id > PWNED"` ran `id`. The
    directory and every argument now reach the program exactly as given, and nothing runs."""
    directory = tmp_path / "#(touch PWNED-cwd)" / "x;"
    directory.mkdir(parents=True)
    out = tmp_path / "argv.txt"
    given = ["a;", ";", "#(touch PWNED-arg)", "run-shell", "touch PWNED-run", "b\\;"]
    script = 'pwd > "$0.cwd"; printf "%s\\n" "$@" > "$0"; exec sleep 60'
    target = await new_session(
        server, "lit", ["sh", "-c", script, str(out), *given], config="/dev/null", cwd=str(directory)
    )
    assert target.startswith("%")
    with trio.fail_after(DEADLINE):
        while not (out.exists() and out.read_text().count("\n") == len(given)):
            await trio.sleep(0.02)
    assert out.read_text().splitlines() == given
    assert Path(f"{out}.cwd").read_text().strip() == str(directory)
    assert not [p for p in (tmp_path, directory, Path.cwd()) if any(p.glob("PWNED*"))]
