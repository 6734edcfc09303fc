# A scripted stand-in for a coding agent's TUI, run inside a real tmux pane by the terminal tests. It draws a
# Claude-Code-like screen (rules around a prompt sign, a spinner line and `esc to interrupt` while busy, a
# permission dialog with option 1 preselected), so the real `claude` profile classifies it, and it records
# every input it gets (one JSON line per paste or key) so a test can assert what reached the "engine": one
# bracketed paste, Enter as its own key, never an interrupt. The test steers it through a control fifo:
#   busy | idle | dialog | type TEXT | hold | auto SECONDS | quit
#   onpaste COMMAND (run COMMAND right after the next paste: a dialog or a person typing races the write)
#   swallow N (the next N Enters do nothing, as when a completion popup takes them)
# Standard library only: it runs as `python fake_tui.py --control FIFO --log FILE`.
from __future__ import annotations

import argparse
import json
import os
import select
import sys
import termios
import time
import tty

RULE = "\x1b[38;5;244m{}\x1b[39m"
GREY = "\x1b[38;5;246m{}\x1b[39m"
PROMPT = "\u276f"  # the heavy angle quotation mark Claude Code uses
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
FOLD_LINES = 4  # like Claude: a paste of this many lines or more shows as one marker


class Tui:
    def __init__(self, log_path: str) -> None:
        self.log = open(log_path, "a", buffering=1)  # noqa: SIM115 (lives as long as the program)
        self.mode = "idle"
        self.draft: list[str] = []  # pieces: typed text, or a folded paste marker
        self.pastes: dict[str, str] = {}
        self.transcript: list[str] = []
        self.turn_seconds: float | None = 0.3  # a submitted turn ends by itself after this long (None: hold)
        self.busy_until: float | None = None
        self.queued: list[str] = []
        self.on_paste: str | None = None
        self.swallow = 0

    def record(self, **event: object) -> None:
        self.log.write(json.dumps({"t": time.monotonic(), **event}) + "\n")

    def draft_text(self) -> str:
        return "".join(self.pastes.get(piece, piece) for piece in self.draft)

    # --- input ---

    def paste(self, text: str) -> None:
        self.record(paste=text)
        if self.mode == "dialog":
            return  # a dialog has no prompt: the paste is lost (as with the real engines)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if len(lines) >= FOLD_LINES:
            marker = f"[Pasted text #{len(self.pastes) + 1} +{len(lines) - 1} lines]"
            self.pastes[marker] = text
            self.draft.append(marker)
        else:
            self.draft.append(text)
        if self.on_paste is not None:
            command, self.on_paste = self.on_paste, None
            self.control(command)

    def key(self, key: str) -> None:
        self.record(key=key)
        if key == "Enter" and self.swallow:
            self.swallow -= 1
        elif key == "Enter":
            self.enter()
        elif key == "BSpace":
            if self.draft:
                self.draft[-1] = self.draft[-1][:-1]
                if not self.draft[-1]:
                    self.draft.pop()
        elif len(key) == 1 and key.isprintable():
            self.draft.append(key)

    def enter(self) -> None:
        if self.mode == "dialog":
            self.transcript.append("● approved")
            self.start_turn()
            return
        text = self.draft_text()
        if not text.strip():
            return
        self.draft.clear()
        if self.mode == "busy":
            self.queued.append(text)
            return
        self.submit(text)

    def submit(self, text: str) -> None:
        self.record(submitted=text)
        first, *rest = text.split("\n")
        self.transcript.append(f"\x1b[48;5;237m{PROMPT} {first}\x1b[49m")
        self.transcript.extend(f"  {line}" for line in rest)
        self.start_turn()

    def start_turn(self) -> None:
        self.mode = "busy"
        self.busy_until = None if self.turn_seconds is None else time.monotonic() + self.turn_seconds

    def finish_turn(self) -> None:
        self.mode = "idle"
        self.busy_until = None
        self.transcript.append("● done")
        self.transcript.append(GREY.format("✻ Cogitated for 1s"))
        if self.queued:
            self.submit(self.queued.pop(0))

    def control(self, line: str) -> None:
        verb, _, arg = line.partition(" ")
        if verb == "busy":
            self.mode, self.busy_until = "busy", None
        elif verb == "idle":
            self.finish_turn()
        elif verb == "dialog":
            self.mode = "dialog"
        elif verb == "type":
            self.draft.append(arg)
        elif verb == "hold":
            self.turn_seconds = None
        elif verb == "auto":
            self.turn_seconds = float(arg)
        elif verb == "onpaste":
            self.on_paste = arg
        elif verb == "swallow":
            self.swallow = int(arg)
        elif verb == "quit":
            raise SystemExit(0)

    # --- output ---

    def render(self) -> str:
        width = os.get_terminal_size(sys.stdout.fileno()).columns
        out = [" ▐▛███▜▌   \x1b[1mFake Code\x1b[0m " + GREY.format("v0.0.1"), "", *self.transcript[-20:], ""]
        if self.mode == "dialog":
            out += [
                RULE.format("─" * width),
                " Bash command",
                "",
                "   echo hello > ~/out.txt",
                "",
                " Do you want to proceed?",
                f" \x1b[38;5;153m{PROMPT}\x1b[39m 1. Yes",
                "   2. No",
                "",
                GREY.format(" Esc to cancel"),
            ]
            return "\r\n".join(out)
        if self.mode == "busy":
            out += ["\x1b[38;5;174m✻\x1b[39m Working…", ""]
        shown = "".join(self.draft).split("\n")
        out += [RULE.format("─" * width), PROMPT + "\xa0" + shown[0], *("  " + line for line in shown[1:])]
        out.append(RULE.format("─" * width))
        footer = "esc to interrupt" if self.mode == "busy" else "? for shortcuts"
        if self.queued:
            out.append(GREY.format("  Press up to edit queued messages"))
        out.append(GREY.format(f"  {footer}"))
        return "\r\n".join(out)


KEYS = {b"\r": "Enter", b"\n": "Enter", b"\x7f": "BSpace", b"\x03": "C-c", b"\x1b": "Escape"}


def feed(tui: Tui, data: bytes, pending: bytearray) -> None:
    pending += data
    while pending:
        if pending.startswith(PASTE_START):
            end = pending.find(PASTE_END)
            if end < 0:
                return  # wait for the rest of the paste
            tui.paste(pending[len(PASTE_START) : end].decode(errors="replace"))
            del pending[: end + len(PASTE_END)]
        elif pending[:1] == b"\x1b" and PASTE_START.startswith(bytes(pending[: len(PASTE_START)])):
            if len(pending) < len(PASTE_START):
                return  # maybe the start of a paste
            tui.key("Escape")
            del pending[:1]
        else:
            byte = bytes(pending[:1])
            if byte in KEYS:
                tui.key(KEYS[byte])
                del pending[:1]
            else:
                size = 1
                while size <= 4:
                    try:
                        char = bytes(pending[:size]).decode()
                        break
                    except UnicodeDecodeError:
                        size += 1
                else:
                    char, size = "?", 1
                if size > len(pending):
                    return
                tui.key(char)
                del pending[:size]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    control = os.open(args.control, os.O_RDWR | os.O_NONBLOCK)  # RDWR: no EOF when a writer closes
    tui = Tui(args.log)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    tty.setraw(stdin)
    sys.stdout.write("\x1b[?2004h")  # bracketed paste, as every engine asks for
    pending, commands, done = bytearray(), b"", []
    try:
        while True:
            sys.stdout.write("\x1b[H\x1b[2J" + tui.render())
            sys.stdout.flush()
            for line in done:  # acknowledged once its effect is on the screen
                tui.record(control=line)
            done.clear()
            timeout = None if tui.busy_until is None else max(0.0, tui.busy_until - time.monotonic())
            ready, _, _ = select.select([stdin, control], [], [], timeout)
            if stdin in ready:
                feed(tui, os.read(stdin, 65536), pending)
            if control in ready:
                commands += os.read(control, 65536)
                *lines, commands = commands.split(b"\n")
                for line in lines:
                    tui.control(line.decode())
                    done.append(line.decode())
            if tui.busy_until is not None and time.monotonic() >= tui.busy_until:
                tui.finish_turn()
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    main()
