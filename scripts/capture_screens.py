# Captures the real screens of each pinned engine CLI (Claude Code, Codex, Gemini CLI) in every state the
# delivery desk must tell apart, as versioned fixtures: engines change their screens between versions, and
# each engine profile is tested against real captures rather than against what we remember a screen looked
# like. Each engine is driven offline (tests/engines/launch.py: private network namespace, own tmux server,
# scripted fake model) through: starting, idle, draft, busy (the model holds its answer), busy with a draft,
# a queued message, the finished turn, a permission dialog, a finished tool turn, a long folded paste, exit;
# plus the folder-trust dialog of an untrusted workdir. Writes tests/engines/captures/<engine>-<version>/
# <state>.ansi.txt (capture-pane -p -e) and <state>.txt (plain), and manifest.json with the expected
# observation of each (idle | busy | draft | dialog | offline | starting).
#
#   .venv/bin/python scripts/capture_screens.py [claude codex gemini] [--out DIR]
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "engines" / "captures"

# The keys a person presses to approve each engine's permission dialog (first option, "yes, once").
APPROVE = {"claude": "1", "codex": "y", "gemini": "1"}
# The key that queues a draft typed while the engine works.
QUEUE_KEY = {"claude": "Enter", "codex": "Tab", "gemini": "Enter"}

LONG_PASTE = "\n".join(
    f"Line {n}: the quick brown fox jumps over the lazy dog while the daemon waits for a safe moment to "
    f"write; this paste is long enough that every engine folds it into a placeholder. ({n})"
    for n in range(1, 13)
)


@dataclass
class Recorder:
    engine: str
    version: str
    folder: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    def save(
        self, run: Any, name: str, state: str, note: str, *, screen: tuple[str, str] | None = None
    ) -> str:
        ansi, plain = screen if screen is not None else _snapshot(run)
        (self.folder / f"{name}.ansi.txt").write_text(ansi, encoding="utf-8")
        (self.folder / f"{name}.txt").write_text(plain, encoding="utf-8")
        entry: dict[str, Any] = {
            "name": name,
            "state": state,
            "note": note,
            "plain": f"{name}.txt",
            "ansi": f"{name}.ansi.txt",
        }
        if state == "starting" and plain.strip():
            # A start-up screen can look like idle; the launcher's stable-for-2-s wait tells it apart.
            from tests.engines.launch import looks_idle

            entry["looks_idle_to_simple_check"] = looks_idle(self.engine, plain)
        self.entries.append(entry)
        print(f"  {self.engine} {name:<16} {state:<8} {note}", flush=True)
        return plain

    def manifest(self) -> dict[str, Any]:
        from tests.engines.launch import HEIGHT, PACKAGES, WIDTH

        return {
            "engine": self.engine,
            "package": PACKAGES[self.engine],
            "version": self.version,
            "captured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "size": {"width": WIDTH, "height": HEIGHT},
            "tool": "scripts/capture_screens.py (tmux capture-pane -p -e / -p)",
            "states": ["idle", "busy", "draft", "dialog", "offline", "starting"],
            "captures": self.entries,
        }


def _snapshot(run: Any) -> tuple[str, str]:
    """Both forms of one moment of the screen (retaken while a spinner ticks between the two captures)."""
    for _ in range(10):
        ansi, plain = run.capture(ansi=True), run.capture()
        if run.capture(ansi=True) == ansi:
            break
    return ansi, plain


def _script() -> dict[str, Any]:
    return {
        "rules": [
            {"when": "slow-turn", "text": "Finished the slow turn.", "gate": "slow", "gate_timeout": 60},
            {"when": "queued-note", "text": "Read the queued note."},
            {
                "when": "write-token",
                "run": "echo captured > out.txt",
                "final": "Wrote out.txt.",
                "description": "Write a token to out.txt",
                "escalate": True,
                "delay": 0.3,
            },
            {"when": "Line 1:", "text": "Read the long paste."},
        ],
        "default": "Nothing is scripted for that.",
    }


def _clear_draft(run: Any, text: str) -> None:
    for _ in range(len(text)):
        run.send_keys("BSpace")
    time.sleep(0.3)


def capture_engine(engine: str, out: Path) -> Path:
    from tests.engines import launch as engines

    version = engines.engine_version(engine)
    folder = out / f"{engine}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.txt"):
        old.unlink()
    rec = Recorder(engine, version, folder)
    idle: Callable[[str], bool] = lambda s: engines.looks_idle(engine, s)  # noqa: E731

    # -- an untrusted folder: the engine starts in its trust dialog
    with engines.running(engine, trusted=False, wait=False) as run:
        run.wait_stable(engines.looks_dialog, timeout=60, what="trust dialog", stable_for=1.0)
        rec.save(run, "trust-dialog", "dialog", "folder-trust dialog of an untrusted workdir")

    # -- permissions skipped (Claude --dangerously-skip-permissions, Codex never/full access, Gemini --yolo)
    with engines.running(engine, skip_permissions=True) as run:
        rec.save(run, "yolo-idle", "idle", "idle with permission prompts turned off")

    run = engines.launch(engine, script=_script(), wait=False)
    try:
        screen = (run.capture(ansi=True), run.capture())
        if not screen[1].strip():
            rec.save(
                run,
                "starting-blank",
                "starting",
                "the pane right after start, nothing drawn yet",
                screen=screen,
            )
        run.wait_for(lambda s: s.strip() != "", timeout=30, what="first output", interval=0.02)
        rec.save(run, "starting", "starting", "first non-empty screen after start")
        run.wait_idle(timeout=60)
        rec.save(run, "idle", "idle", "stable idle screen after start (2 s unchanged)")

        draft = "a draft the human has not sent yet"
        run.type_text(draft)
        run.wait_stable(lambda s: draft in s, timeout=15, what="draft", stable_for=1.0)
        rec.save(run, "draft", "draft", "typed text, not submitted")
        _clear_draft(run, draft)
        run.wait_idle(timeout=15, stable_for=1.0)

        run.paste("please do the slow-turn now")
        run.wait_for(engines.looks_busy, timeout=30, what="busy screen")
        time.sleep(1.5)
        rec.save(run, "busy", "busy", "model answer held by the fake model (gate)")

        busy_draft = "queued-note typed while busy"
        run.type_text(busy_draft)
        run.wait_for(lambda s: busy_draft in s, timeout=15, what="draft while busy")
        time.sleep(0.5)
        rec.save(run, "busy-draft", "busy", "a draft typed while the engine works")

        # Codex sends Enter-while-busy into the running turn ("steer"); Tab queues it as a message.
        run.send_keys(QUEUE_KEY[engine])
        time.sleep(1.5)
        rec.save(run, "queued", "busy", f"the draft queued while busy ({QUEUE_KEY[engine]})")

        run.fake.release("slow")
        run.wait_stable(
            lambda s: idle(s) and "Read the queued note" in s,
            timeout=60,
            what="idle after the slow and queued turns",
        )
        rec.save(run, "done", "idle", "finished turn (the slow turn, then the queued note)")

        run.paste("now write-token please")
        run.wait_stable(engines.looks_dialog, timeout=30, what="permission dialog", stable_for=1.0)
        rec.save(run, "permission", "dialog", "permission dialog for the scripted shell command")
        run.send_keys(APPROVE[engine])
        run.wait_stable(lambda s: idle(s) and "Wrote out.txt" in s, timeout=60, what="idle after the tool")
        rec.save(run, "done-tool", "idle", "finished turn after an approved shell command")

        run.paste(LONG_PASTE, submit=False)
        run.wait_stable(
            lambda s: not idle(s) or "[Past" in s, timeout=15, what="folded paste", stable_for=1.0
        )
        rec.save(run, "paste-folded", "draft", f"a {len(LONG_PASTE)}-character, 12-line paste, not submitted")
        run.send_keys("Enter")
        run.wait_stable(
            lambda s: idle(s) and "Read the long paste" in s, timeout=60, what="idle after the long paste"
        )
        rec.save(run, "done-paste", "idle", "finished turn after the long paste was submitted")

        run.send_keys("C-c")
        time.sleep(0.4)
        if not run.pane_dead():
            run.send_keys("C-c")
        deadline = time.monotonic() + 20
        while not run.pane_dead() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not run.pane_dead():
            raise engines.EngineError(f"{engine}: still running after two Ctrl-C:\n{run.capture()}")
        time.sleep(0.5)
        rec.save(run, "exit", "offline", "after two Ctrl-C: the engine exited, the pane is dead")
    finally:
        run.stop()
    (folder / "manifest.json").write_text(json.dumps(rec.manifest(), indent=2) + "\n", encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="capture real engine screens as versioned fixtures")
    parser.add_argument("engines", nargs="*", default=["claude", "codex", "gemini"])
    parser.add_argument("--out", type=Path, default=CAPTURES)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.engines.launch import install_problem

    problem = install_problem()
    if problem is not None:
        print(f"cannot capture: {problem}", file=sys.stderr)
        return 2
    for engine in args.engines:
        started = time.monotonic()
        folder = capture_engine(engine, args.out)
        print(
            f"{engine}: {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}"
            f" in {time.monotonic() - started:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
