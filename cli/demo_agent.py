# A scripted, model-free stand-in for a coding agent, for `harness demo`: a Python program in a tmux pane (its
# foreground is never a shell, which the desk never writes to) that shows a prompt (`NAME> `, which the
# generic prompt profile of engine `scripted` reads), takes the daemon's notices the way a real agent TUI does
# (one bracketed paste, then Enter), and acts on them with the same shell commands a real agent would run: it
# learns its team commands from the introduction, asks its scripted question, answers a question with
# `reply`, and continues when the answer arrives. Standard library only, plus the `harness` command it runs
# and the one escaping function (core/terminal_text) through which it echoes any peer text.
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import termios
import time
import tty
from functools import partial

from harness.core.terminal_text import terminal_safe

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
# What the agent echoes of its input or of a peer's text is shown, never interpreted by its terminal.
_safe = partial(terminal_safe, line_breaks=False)
CYAN, GREEN, DIM, RESET = "\x1b[36m", "\x1b[32m", "\x1b[2m", "\x1b[0m"


class Agent:
    def __init__(self, name: str, ask: str | None, to: str | None, answer: str) -> None:
        self.name = name
        self.ask, self.to, self.answer = ask, to, answer
        self.prefix: list[str] | None = None

    def say(self, text: str) -> None:
        sys.stdout.write(text.replace("\n", "\r\n") + "\r\n")
        sys.stdout.flush()

    def prompt(self) -> None:
        sys.stdout.write(f"{self.name}> ")
        sys.stdout.flush()

    def run(self, *args: str) -> None:
        """Run a `harness team` command with the prefix the introduction taught; show it like a tool call."""
        assert self.prefix is not None
        shown = re.sub(r"--key \S+", "--key ***", shlex.join([*self.prefix, *args]))
        self.say(f"{GREEN}● Bash{RESET}({_safe(shown)})")
        done = subprocess.run([*_executable(self.prefix), *args], capture_output=True, text=True, check=False)
        try:
            result = json.loads(done.stdout)
            summary = {key: result.get(key) for key in ("id", "state", "error", "detail") if key in result}
        except ValueError:
            summary = {"output": (done.stdout or done.stderr).strip()[:200]}
        self.say(f"{DIM}  ⎿ {_safe(json.dumps(summary))}{RESET}")

    def handle(self, notice: str) -> None:
        self.say(f"{DIM}thinking…{RESET}")
        time.sleep(0.3)  # a turn takes a moment; the pane shows no prompt meanwhile (busy)
        use = re.search(r"Use: (\S*harness team .*?) members \|", notice)
        question = re.search(r"Question (\S+) from (\S+):", notice)
        answered = re.search(r"(\S+) answered your question (\S+):\n(.*?)\n", notice + "\n", re.S)
        if use:
            self.prefix = shlex.split(use.group(1))
            self.say(f"{CYAN}● I know my team commands now.{RESET}")
            if self.ask and self.to:
                self.say(f"{CYAN}● Asking {self.to}: {self.ask}{RESET}")
                self.run("ask", self.to, self.ask, "--id", f"q-{self.name}", "--json")
        elif question and self.prefix:
            self.say(f"{CYAN}● {_safe(question.group(2))} asks me something; answering with reply.{RESET}")
            self.run("reply", question.group(1), self.answer, "--evidence", "demo:1", "--json")
        elif answered and self.prefix:
            self.say(
                f"{CYAN}● {_safe(answered.group(1))} answered: {_safe(answered.group(3).strip())}{RESET}"
            )
            self.say(f"{CYAN}● Continuing my task with that answer. Done.{RESET}")
        else:
            self.say(f"{CYAN}● (nothing to do with that){RESET}")


def _executable(argv: list[str]) -> list[str]:
    """`harness ...` as this Python runs it when no `harness` is on PATH (a fresh checkout)."""
    if (
        argv
        and argv[0] == "harness"
        and not any(
            os.access(os.path.join(d, "harness"), os.X_OK)
            for d in os.environ.get("PATH", "").split(os.pathsep)
        )
    ):
        return [sys.executable, "-m", "harness.cli.main", *argv[1:]]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--ask")
    parser.add_argument("--to")
    parser.add_argument("--answer", default="I do not know yet.")
    args = parser.parse_args()
    agent = Agent(args.name, args.ask, args.to, args.answer)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    tty.setraw(stdin)
    sys.stdout.write("\x1b[?2004h")  # ask for bracketed pastes, as the real engines do
    agent.say(f"{CYAN}demo agent {args.name}: waiting for notices{RESET}")
    agent.prompt()
    line, pending = "", ""
    try:
        while True:
            pending += os.read(stdin, 65536).decode(errors="replace")
            while pending:
                if pending.startswith(PASTE_START):
                    end = pending.find(PASTE_END)
                    if end < 0:
                        break
                    text = pending[len(PASTE_START) : end].replace("\r", "\n")
                    pending = pending[end + len(PASTE_END) :]
                    line += text
                    sys.stdout.write(_safe(text.replace("\n", " ")))  # the draft shows on the prompt line
                elif pending[0] in "\r\n":
                    pending = pending[1:]
                    sys.stdout.write("\r\n")
                    if line.strip():
                        agent.handle(line)
                    line = ""
                    agent.prompt()
                elif pending[0] == "\x03":
                    return
                else:
                    line += pending[0]
                    sys.stdout.write(_safe(pending[0]))
                    pending = pending[1:]
                sys.stdout.flush()
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    main()
