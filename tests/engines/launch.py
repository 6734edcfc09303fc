# Starts one real engine CLI (claude | codex | gemini | grok) the way shared/design/engines.md found works
# offline: inside its own network namespace that has only loopback (so nothing it tries can leave the
# machine), with its own tmux server, its own temporary HOME and config pointing it at the scripted fake
# model (tests/engines/fake_model.py), which runs in the same namespace. The test process outside drives
# tmux through the server's socket file and the fake model through its Unix control socket; neither needs
# the network. `stop()` ends every process in that private namespace by PID and removes the temporary tree.
#
# The screen checks here are deliberately simple (enough to wait for a stable idle screen and to spot a
# permission dialog); the real engine profiles live in harness.io.profiles.
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.engines.fake_model import FakeModelClient

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
FAKE_MODEL = HERE / "fake_model.py"
INSTALL = HERE / "install.sh"
ENGINES = ("claude", "codex", "gemini", "grok")
FAKE_PORT = 8765  # inside the private namespace, so it never collides with anything on the machine
WIDTH, HEIGHT = 160, 50

CLAUDE_BIN = NODE_MODULES / "@anthropic-ai/claude-code-linux-x64/claude"
CODEX_BIN = NODE_MODULES / "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
GEMINI_JS = NODE_MODULES / "@google/gemini-cli/bundle/gemini.js"
GROK_JS = NODE_MODULES / "@vibe-kit/grok-cli/dist/index.js"
ENTRY_POINTS = {"claude": CLAUDE_BIN, "codex": CODEX_BIN, "gemini": GEMINI_JS, "grok": GROK_JS}
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "grok": "@vibe-kit/grok-cli",
}

TMUX_CONF = """\
set -g default-terminal "tmux-256color"
set -g history-limit 5000
set -g remain-on-exit on
set -g status off
set -s escape-time 10
set -g focus-events on
"""


class EngineError(RuntimeError):
    """An engine did not start, or did not reach the state a caller waited for."""


def engine_version(engine: str) -> str:
    """The pinned version of `engine` as installed (from its package.json)."""
    manifest = NODE_MODULES / PACKAGES[engine] / "package.json"
    return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])


def install_problem() -> str | None:
    """Why the engines cannot run here, or None. Runs the idempotent install script once."""
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    if subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode != 0:
        return "cannot create a network namespace (`unshare -n` needs root)"
    result = subprocess.run(["bash", str(INSTALL), "--quiet"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"tests/engines/install.sh failed: {(result.stderr or result.stdout).strip()[-800:]}"
    missing = [str(p) for p in ENTRY_POINTS.values() if not p.exists()]
    return f"engine entry points missing: {missing}" if missing else None


# --------------------------------------------------------------------------------------- simple screens

SPINNER_BUSY = re.compile(r"esc to (interrupt|cancel)", re.IGNORECASE)
DIALOG = re.compile(
    r"Do you want to proceed( with this operation)?\?|Would you like to run the following command\?"
    r"|Allow execution of"
    r"|Trust this folder\?|Do you trust the files in this folder\?|Do you trust|custom API key"
    r"|Bypass Permissions mode|Yes, I trust this folder"
)


def looks_idle(engine: str, plain: str) -> bool:
    """A coarse idle check (empty prompt, nothing running, no dialog); harness.io.profiles does it right."""
    if SPINNER_BUSY.search(plain) or DIALOG.search(plain) or "Pane is dead" in plain:
        return False
    if engine == "claude":
        spinner = re.search("^[\u00b7\u2722\u2733\u2736\u273b\u273d*] \\S+\u2026", plain, re.MULTILINE)
        return spinner is None and re.search("^\u276f[\xa0 ]\\s*$", plain, re.MULTILINE) is not None
    if engine == "codex":
        return re.search("^\u203a ", plain, re.MULTILINE) is not None
    if engine == "grok":
        return "\u276f Ask me anything..." in plain
    return "Type your message" in plain


def looks_dialog(plain: str) -> bool:
    return DIALOG.search(plain) is not None


def looks_busy(plain: str) -> bool:
    return SPINNER_BUSY.search(plain) is not None


# ------------------------------------------------------------------------------------------- per engine


def _claude_setup(
    home: Path, workdir: Path, env: dict[str, str], skip_permissions: bool, trusted: bool, *, port: int
) -> list[str]:
    config = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "bypassPermissionsModeAccepted": True,
        "autoUpdates": False,
        "projects": {
            str(workdir): {"hasTrustDialogAccepted": trusted, "hasCompletedProjectOnboarding": True}
        },
    }
    (home / ".claude.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (home / ".claude").mkdir(exist_ok=True)
    env.update(
        {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
            "ANTHROPIC_AUTH_TOKEN": "fake-token-for-loopback",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    command = [str(CLAUDE_BIN)]
    if skip_permissions:
        env["IS_SANDBOX"] = "1"
        command.append("--dangerously-skip-permissions")
    return command


def _codex_setup(
    home: Path, workdir: Path, env: dict[str, str], skip_permissions: bool, trusted: bool, *, port: int
) -> list[str]:
    codex_home = home / ".codex"
    codex_home.mkdir()
    approval = "never" if skip_permissions else "on-request"
    sandbox = "danger-full-access" if skip_permissions else "workspace-write"
    trust = f'[projects."{workdir}"]\ntrust_level = "trusted"\n' if trusted else ""
    # Codex asks about trust only for a folder with settings of its own (.codex/config.toml) and no explicit
    # policy, so an untrusted run gives the workdir such settings and leaves the policy unset.
    policy = f'approval_policy = "{approval}"\nsandbox_mode = "{sandbox}"\n' if trusted else ""
    if not trusted:
        (workdir / ".codex").mkdir()
        (workdir / ".codex" / "config.toml").write_text('model_reasoning_effort = "low"\n', encoding="utf-8")
    (codex_home / "config.toml").write_text(
        f"""\
model = "fake-model"
model_provider = "fake"
{policy}check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:{port}/v1"
env_key = "FAKE_MODEL_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

{trust}
[features]
daemon_auto_start = false
apps = false
plugins = false
remote_plugin = false
in_app_updates = false
tool_suggest = false
""",
        encoding="utf-8",
    )
    env.update({"CODEX_HOME": str(codex_home), "FAKE_MODEL_API_KEY": "fake-key-for-loopback"})
    return [str(CODEX_BIN)]


def _gemini_setup(
    home: Path, workdir: Path, env: dict[str, str], skip_permissions: bool, trusted: bool, *, port: int
) -> list[str]:
    settings_dir = home / ".gemini"
    settings_dir.mkdir()
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": not trusted}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
    }
    (settings_dir / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    env.update(
        {
            "GEMINI_API_KEY": "fake-key-for-loopback",
            "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }
    )
    command = [shutil.which("node") or "node", str(GEMINI_JS)]
    if skip_permissions:
        command.append("--yolo")
    return command


def _grok_setup(
    home: Path, workdir: Path, env: dict[str, str], skip_permissions: bool, trusted: bool, *, port: int
) -> list[str]:
    # Grok CLI has no folder trust, and it asks before every shell command until its auto-edit mode is on;
    # interactively only Shift+Tab turns that on (`after_idle`). It reads ~/.grok/user-settings.json (a
    # current settingsVersion, else it migrates) and prefers GROK_API_KEY / GROK_BASE_URL from the env.
    settings_dir = home / ".grok"
    settings_dir.mkdir()
    base_url = f"http://127.0.0.1:{port}/v1"
    settings = {"baseURL": base_url, "defaultModel": "grok-code-fast-1", "settingsVersion": 2}
    (settings_dir / "user-settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    env.update({"GROK_API_KEY": "fake-key-for-loopback", "GROK_BASE_URL": base_url})
    return [shutil.which("node") or "node", str(GROK_JS)]


class Setup(Protocol):
    def __call__(
        self,
        home: Path,
        workdir: Path,
        env: dict[str, str],
        skip_permissions: bool,
        trusted: bool,
        *,
        port: int,
    ) -> list[str]:
        """Write the engine's config under `home`, extend `env`, return its argv (fake model on `port`)."""
        ...


SETUP: dict[str, Setup] = {
    "claude": _claude_setup,
    "codex": _codex_setup,
    "gemini": _gemini_setup,
    "grok": _grok_setup,
}


# ---------------------------------------------------------------------------------------------- the run


@dataclass
class EngineRun:
    """A started engine: its tmux server (socket file), pane target, fake model, temporary tree and PIDs."""

    engine: str
    version: str
    root: Path
    home: Path
    workdir: Path
    socket: Path
    target: str
    fake: FakeModelClient
    pids: dict[str, int]
    netns: str
    seconds_to_idle: float = 0.0
    stopped: bool = field(default=False)

    # -- tmux

    def tmux(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        )
        if check and result.returncode != 0:
            raise EngineError(f"tmux {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def capture(self, *, ansi: bool = False) -> str:
        flags = ["-p", "-e"] if ansi else ["-p"]
        return self.tmux("capture-pane", *flags, "-t", self.target)

    def pane_dead(self) -> bool:
        return self.tmux("display-message", "-p", "-t", self.target, "#{pane_dead}").strip() == "1"

    def send_keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.target, *keys)

    def type_text(self, text: str) -> None:
        """Types literally, as a person would (no Enter)."""
        self.tmux("send-keys", "-t", self.target, "-l", text)

    def paste(self, text: str, *, submit: bool = True, enter_delay: float = 0.5) -> None:
        """One bracketed paste, then Enter as a separate key about half a second later."""
        buffer = f"harness-{os.getpid()}"
        self.tmux("load-buffer", "-b", buffer, "-", input_text=text)
        self.tmux("paste-buffer", "-p", "-d", "-b", buffer, "-t", self.target)
        if submit:
            time.sleep(enter_delay)
            self.send_keys("Enter")

    # -- waiting

    def wait_for(
        self, predicate: Callable[[str], bool], *, timeout: float, what: str, interval: float = 0.2
    ) -> str:
        deadline = time.monotonic() + timeout
        plain = ""
        while time.monotonic() < deadline:
            plain = self.capture()
            if predicate(plain):
                return plain
            time.sleep(interval)
        raise EngineError(f"{self.engine}: no {what} within {timeout:.0f} s; screen:\n{plain}")

    def wait_stable(
        self,
        predicate: Callable[[str], bool],
        *,
        timeout: float,
        what: str,
        stable_for: float = 2.0,
        interval: float = 0.2,
    ) -> str:
        """Waits until the screen satisfies `predicate` and stays unchanged for `stable_for` seconds."""
        deadline = time.monotonic() + timeout
        last = ""
        since = time.monotonic()
        while time.monotonic() < deadline:
            screen = self.capture(ansi=True)
            now = time.monotonic()
            if screen != last:
                last, since = screen, now
            elif predicate(self.capture()) and now - since >= stable_for:
                return self.capture()
            time.sleep(interval)
        raise EngineError(
            f"{self.engine}: no stable {what} within {timeout:.0f} s; screen:\n{self.capture()}"
        )

    def wait_idle(self, *, timeout: float = 60.0, stable_for: float = 2.0) -> str:
        return self.wait_stable(
            lambda s: looks_idle(self.engine, s), timeout=timeout, what="idle screen", stable_for=stable_for
        )

    # -- stopping

    def processes(self) -> list[int]:
        """Every process in this run's private network namespace (all of them were started by this run)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "net") == self.netns:
                    found.append(int(entry.name))
        return found

    def stop(self, *, keep_files: bool = False) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.netns != os.readlink("/proc/self/ns/net"):  # never sweep the machine's own namespace
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in self.processes():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                deadline = time.monotonic() + 3
                while self.processes() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self.processes():
                    break
        else:
            for pid in self.pids.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> EngineRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(
    engine: str,
    *,
    script: Mapping[str, Any] | None = None,
    skip_permissions: bool = False,
    trusted: bool = True,
    width: int = WIDTH,
    height: int = HEIGHT,
    idle_timeout: float = 60.0,
    stable_for: float = 2.0,
    wait: bool = True,
    extra_env: Mapping[str, str] | None = None,
) -> EngineRun:
    """Starts `engine` against a fresh fake model running `script`; waits for a stable idle screen."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; one of {ENGINES}")
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"harness-{engine}-"))
    home = root / "home"
    workdir = home / "project"
    workdir.mkdir(parents=True)
    socket_path = root / "tmux.sock"
    ready_file = root / "fake.ready"
    (root / "tmux.conf").write_text(TMUX_CONF, encoding="utf-8")
    (root / "script.json").write_text(json.dumps(script or {"rules": []}), encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/bash",
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": str(root / "tmp"),
        "COLORTERM": "truecolor",
        "NO_UPDATE_NOTIFIER": "1",
    }
    (root / "tmp").mkdir()
    command = SETUP[engine](home, workdir, env, skip_permissions, trusted, port=FAKE_PORT)
    env.update(extra_env or {})
    fake = [
        sys.executable,
        str(FAKE_MODEL),
        "--port",
        str(FAKE_PORT),
        "--unix",
        str(root / "fake.sock"),
        "--ready-file",
        str(root / "fake.ready"),
        "--script",
        str(root / "script.json"),
    ]
    inner = "\n".join(
        [
            "set -e",
            "ip link set lo up",
            f"{_quote(fake)} >{_quote([str(root / 'fake.log')])} 2>&1 </dev/null &",
            f"for _ in $(seq 200); do [ -f {_quote([str(ready_file)])} ] && break; sleep 0.025; done",
            f"exec tmux -S {_quote([str(socket_path)])} -f {_quote([str(root / 'tmux.conf')])} new-session -d"
            f" -s engine -x {width} -y {height} -c {_quote([str(workdir)])} -- {_quote(command)}",
        ]
    )
    result = subprocess.run(
        ["unshare", "-n", "--", "bash", "-c", inner],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    run = EngineRun(
        engine=engine,
        version=engine_version(engine),
        root=root,
        home=home,
        workdir=workdir,
        socket=socket_path,
        target="engine:0.0",
        fake=FakeModelClient(unix_path=root / "fake.sock"),
        pids={},
        netns="",
    )
    if ready_file.exists():
        fake_pid = int(json.loads(ready_file.read_text(encoding="utf-8"))["pid"])
        run.pids["fake_model"] = fake_pid
        with contextlib.suppress(OSError):
            run.netns = os.readlink(f"/proc/{fake_pid}/ns/net")
    if result.returncode != 0 or not run.netns:
        run.stop(keep_files=True)
        log = (root / "fake.log").read_text(encoding="utf-8") if (root / "fake.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise EngineError(
            f"{engine}: could not start (rc={result.returncode}): {result.stderr.strip()} {log}"
        )
    try:
        server_pid, pane_pid = run.tmux(
            "display-message", "-p", "-t", run.target, "#{pid} #{pane_pid}"
        ).split()
        run.pids.update({"tmux_server": int(server_pid), "pane": int(pane_pid)})
        if wait:
            run.wait_idle(timeout=idle_timeout, stable_for=stable_for)
            # the screen was already idle `stable_for` seconds before the wait returned
            run.seconds_to_idle = time.monotonic() - started - stable_for
            if skip_permissions:
                turn_permissions_off(run)
    except BaseException:
        run.stop()
        raise
    return run


def turn_permissions_off(run: EngineRun) -> None:
    """For an engine whose permission-skipping mode only a key turns on (Grok CLI: Shift+Tab toggles its
    auto-edit mode, which approves every command), press it on the idle screen and wait until it shows."""
    if run.engine != "grok":
        return
    run.send_keys("BTab")
    run.wait_stable(
        lambda s: "auto-edit: on" in s and looks_idle(run.engine, s),
        timeout=15,
        what="auto-edit on",
        stable_for=1.0,
    )


def _quote(words: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(w) for w in words)


@contextlib.contextmanager
def running(engine: str, **kwargs: Any) -> Iterator[EngineRun]:
    run = launch(engine, **kwargs)
    try:
        yield run
    finally:
        run.stop()


if __name__ == "__main__":  # python -m tests.engines.launch claude  -> starts, prints the idle screen, stops
    for name in sys.argv[1:] or list(ENGINES):
        with running(name) as engine_run:
            print(f"== {name} {engine_run.version}: idle after {engine_run.seconds_to_idle:.1f} s")
            print(engine_run.capture())
