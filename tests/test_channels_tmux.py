# Tab channels against real parts (issue 22, spec/channels-v1.md): a `harness daemon start` on its own data
# directory, a tmux server of this test only (its own -L socket) whose windows are the tabs, the fake TUI of
# tests/fake_tui.py in each pane (the real `claude` profile reads it, so it registers as an engine and takes
# pasted notices), and the CLI as a user runs it.
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HARNESS = [sys.executable, "-m", "harness.cli.main"]
FAKE_TUI = Path(__file__).with_name("fake_tui.py")
DEADLINE = 60.0  # generous: the suite runs on a loaded two-core machine

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def harness(home: Path, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["HARNESS_CHECK_INVARIANTS"] = "1"  # the daemon stops on the first broken ledger or desk invariant
    argv = [*HARNESS, *args, "--home", str(home), "--json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, check=False)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def ok(result: tuple[int, Any]) -> Any:
    assert result[0] == 0, result
    return result[1]


def until(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Tabs:
    """A tmux server of this test: one session, windows as tabs, a fake TUI per pane."""

    def __init__(self, directory: Path) -> None:
        self.socket = f"harness-chan-{os.getpid()}-{secrets.token_hex(4)}"
        self.directory = directory
        self.started = False

    def tmux(self, *args: str) -> str:
        argv = ["tmux", "-f", "/dev/null", "-L", self.socket, *args]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    def _program(self, name: str) -> list[str]:
        control = self.directory / f"{name}.control"
        os.mkfifo(control)
        return [sys.executable, str(FAKE_TUI), "--control", str(control), "--log", str(self.log(name))]

    def log(self, name: str) -> Path:
        return self.directory / f"{name}.jsonl"

    def window(self, name: str) -> tuple[str, str]:
        """A new window running agent `name`'s TUI: (window id, pane id)."""
        program = self._program(name)
        if self.started:
            made = self.tmux(
                "new-window", "-d", "-t", "work", "-P", "-F", "#{window_id} #{pane_id}", *program
            )
        else:
            size = ["-x", "100", "-y", "30"]
            made = self.tmux(
                "new-session", "-d", "-s", "work", *size, "-P", "-F", "#{window_id} #{pane_id}", *program
            )
            self.started = True
        window, pane = made.split()
        return window, pane

    def split(self, window: str, name: str) -> str:
        return self.tmux("split-window", "-d", "-t", window, "-P", "-F", "#{pane_id}", *self._program(name))

    def pastes(self, name: str) -> list[str]:
        if not self.log(name).exists():
            return []
        events = [json.loads(line) for line in self.log(name).read_text().splitlines()]
        return [str(event["paste"]) for event in events if "paste" in event]

    def stop(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    ok(harness(home, "daemon", "start"))
    try:
        yield home
    finally:
        harness(home, "daemon", "stop")


@pytest.fixture
def tabs(tmp_path: Path) -> Iterator[Tabs]:
    tabs = Tabs(tmp_path)
    try:
        yield tabs
    finally:
        tabs.stop()


def attach(home: Path, tabs: Tabs, pane: str, name: str) -> str:
    fields = ok(
        harness(
            home,
            "agent",
            "attach",
            "--tmux",
            pane,
            "--socket",
            tabs.socket,
            "--engine",
            "claude",
            "--name",
            name,
        )
    )
    return str(fields["agentId"])


def channels(home: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok(harness(home, "channels", "status"))["channels"]
    return found


def rosters(home: Path) -> dict[frozenset[str], str]:
    """The current channels as {member names: team id}."""
    return {frozenset(m["name"] for m in c["members"]): c["teamId"] for c in channels(home) if c["members"]}


def key(home: Path, team: str, member: str) -> str:
    return str(ok(harness(home, "team", "--team", team, "key", member))["memberKey"])


def standalone(home: Path, agents: dict[str, str]) -> str:
    machine = (home / "machine-id").read_text().strip()
    members = [{"machineId": machine, "agentId": agent_id, "name": name} for name, agent_id in agents.items()]
    spec = home.parent / "team.json"
    spec.write_text(json.dumps({"id": "standalone", "name": "by hand", "members": members}))
    return str(ok(harness(home, "team", "create", "--file", str(spec)))["id"])


def test_windows_form_channels_that_follow_their_panes(home: Path, tabs: Tabs) -> None:
    """Seed 000: "existing tab membership replaces manual team setup; swarm collaboration is off by default;
    once enabled, agents consult peers in their tab automatically; questions stay inside the tab; departure
    lets already-started exchanges finish." """
    first, alpha_pane = tabs.window("alpha")
    tabs.split(first, "beta")
    second, gamma_pane = tabs.window("gamma")
    panes = {
        "alpha": alpha_pane,
        "beta": tabs.tmux("display-message", "-p", "-t", f"{first}.1", "#{pane_id}"),
    }
    panes["gamma"] = gamma_pane
    agents = {name: attach(home, tabs, pane, name) for name, pane in panes.items()}
    team = standalone(home, {"alpha": agents["alpha"], "gamma": agents["gamma"]})

    # Off by default: registered agents in windows form no team until channels are enabled.
    status = ok(harness(home, "channels", "status"))
    assert (status["enabled"], status["channels"]) == (False, [])
    enabled = ok(harness(home, "channels", "enable"))
    assert (enabled["enabled"], enabled["changed"]) == (True, True)
    assert (home / "channels.json").stat().st_mode & 0o777 == 0o600
    formed = until("two channels", lambda: len(rosters(home)) == 2 and rosters(home))
    assert set(formed) == {frozenset({"alpha", "beta"}), frozenset({"gamma"})}
    tab_one, tab_two = formed[frozenset({"alpha", "beta"})], formed[frozenset({"gamma"})]
    assert tab_one.startswith("tab:1:") and tab_two.startswith("tab:1:")
    # A pane that joins gets an introduction: it reaches the TUI as one paste naming the channel.
    until(
        "alpha's introduction", lambda: any("You joined team 'tab work:0'" in p for p in tabs.pastes("alpha"))
    )

    # Questions stay inside the tab: gamma is not a member of alpha's channel.
    alpha_key = key(home, tab_one, "alpha")
    code, refused = harness(home, "team", "--team", tab_one, "--key", alpha_key, "ask", "gamma", "where?")
    assert code == 1 and refused["error"] == "not_found", refused
    assert refused["detail"] == f"no active member 'gamma' in team {tab_one!r}"

    # Standalone teams keep working beside channels: there the same two agents may ask each other.
    lone_key = key(home, team, "alpha")
    crossed = ok(
        harness(home, "team", "--team", team, "--key", lone_key, "ask", "gamma", "in the standalone?")
    )
    assert crossed["state"] == "open"

    # An exchange started in a tab, then alpha's pane moves to the other window.
    asked = ok(
        harness(
            home,
            "team",
            "--team",
            tab_one,
            "--key",
            alpha_key,
            "ask",
            "beta",
            "which port?",
            "--id",
            "q-move",
        )
    )
    tabs.tmux("join-pane", "-d", "-s", alpha_pane, "-t", second)
    moved = until(
        "alpha in gamma's channel",
        lambda: (r := rosters(home)).get(frozenset({"alpha", "gamma"})) == tab_two and r,
    )
    assert moved[frozenset({"beta"})] == tab_one
    until(
        "alpha's new introduction",
        lambda: any("You joined team 'tab work:1'" in p for p in tabs.pastes("alpha")),
    )

    # Departure lets the started exchange finish: beta's answer is recorded, attributable to alpha's old
    # membership, while alpha's old key no longer acts in the tab it left.
    beta_key = key(home, tab_one, "beta")
    ok(harness(home, "team", "--team", tab_one, "--key", beta_key, "reply", "q-move", "8080"))
    done = ok(harness(home, "team", "--team", tab_one, "status", "q-move"))
    assert done["state"] == "answered" and done["answer"]["text"] == "8080"
    roster = ok(harness(home, "team", "--team", tab_one, "members"))["members"]
    by_id = {member["id"]: member for member in roster}
    assert by_id[asked["from"]]["agentId"] == agents["alpha"] and by_id[asked["from"]]["state"] == "removed"
    assert by_id[done["answer"]["author"]]["name"] == "beta"
    code, revoked = harness(home, "team", "--team", tab_one, "--key", alpha_key, "ask", "beta", "again?")
    assert code == 1 and revoked["error"] == "unauthorized", revoked
    # In its new tab alpha consults its new peer.
    new_key = key(home, tab_two, "alpha")
    ok(harness(home, "team", "--team", tab_two, "--key", new_key, "ask", "gamma", "hello, neighbour?"))

    # Disable dissolves the channel teams without deleting their history; the standalone team stays.
    ok(harness(home, "channels", "disable"))
    until(
        "both channels archived",
        lambda: all(c["state"] == "archived" for c in channels(home)) and len(channels(home)) == 2,
    )
    kept = ok(harness(home, "team", "--team", tab_one, "status", "q-move"))
    assert kept["state"] == "answered" and kept["answer"]["text"] == "8080"
    assert ok(harness(home, "team", "--team", team, "get"))["state"] == "active"
    # Enabling again starts a new epoch: fresh channel teams beside the archived ones.
    ok(harness(home, "channels", "enable"))
    again = until("channels of epoch 2", lambda: len(rosters(home)) == 2 and rosters(home))
    assert all(team_id.startswith("tab:2:") for team_id in again.values())
    assert set(again) == {frozenset({"alpha", "gamma"}), frozenset({"beta"})}


def test_a_damaged_setting_is_reported_and_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "channels.json").write_text('{"version": 1, "enabled": "yes", "epoch": 1}')
    for command in ("status", "enable", "disable"):
        code, refused = harness(home, "channels", command)
        assert code == 1 and refused["error"] == "corrupt_state", refused
        assert "channels.json is damaged" in refused["detail"]
    assert json.loads((home / "channels.json").read_text())["enabled"] == "yes"
