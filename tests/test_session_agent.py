# A scripted session member for tests/test_session_run.py (not a test module: it holds no tests). It runs in
# a tmux pane as engine `scripted`, like cli/demo_agent.py, takes each notice as one bracketed paste then
# Enter, and acts with the team commands its introduction taught, as a model would:
#   lead     on its brief, asks each --ask NAME one question, waits until each has ended (answered or
#            released), then concludes by replying to its brief with a summary;
#   answer   replies to every question from a session member (the session's own notices need no reply);
#   ignore   never replies to anything: the participant that owes an ask and lets it lapse.
#   tools    a lead that, on its brief, runs the session tools its introduction taught (`harness session`):
#            announces, asks for comment (a facilitator may not), asks each --ask NAME, calls the roll, and
#            concludes with what each returned.
# Standard library only, plus the `harness` command it runs.
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

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
WAIT_SECONDS = 240.0


class Member:
    def __init__(self, name: str, behaviour: str, ask: list[str]) -> None:
        self.name, self.behaviour, self.ask = name, behaviour, ask
        self.prefix: list[str] | None = None
        self.early: str | None = None  # a notice that came before the introduction taught the commands
        self.session: list[str] | None = None  # `harness session` as the session's introduction taught it
        self.where: list[str] = []  # and the options each session tool takes after its arguments

    def say(self, text: str) -> None:
        sys.stdout.write(text.replace("\n", "\r\n") + "\r\n")
        sys.stdout.flush()

    def run(self, *args: str, command: list[str] | None = None) -> dict[str, object]:
        assert self.prefix is not None
        tail = self.where if command else []
        argv = [
            sys.executable,
            "-m",
            "harness.cli.main",
            *(command or self.prefix)[1:],
            *args,
            *tail,
            "--json",
        ]
        self.say(f"$ {' '.join(args)}")
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        try:
            result = json.loads(done.stdout)
        except ValueError:
            result = {"output": (done.stdout + done.stderr)[-300:]}
        self.say(f"  -> {json.dumps(result)[:200]}")
        return result if isinstance(result, dict) else {}

    def handle(self, notice: str) -> None:
        use = re.search(r"Use: (\S*harness team .*?) members \|", notice)
        question = re.search(r"Question (\S+) from (\S+):", notice)
        tools = re.search(r"`([^`]*?) announce \S+ 'NOTE' ([^`]*)`", notice)
        if tools:
            self.session, self.where = shlex.split(tools.group(1)), shlex.split(tools.group(2))
        if use:
            self.prefix = shlex.split(use.group(1))
            self.say(f"{self.name}: I know my team commands now.")
            early, self.early = self.early, None
            if early is not None:
                self.handle(early)
        elif question and self.prefix is None:
            self.early = notice
        elif question and self.prefix and self.behaviour == "lead" and "Brief:" in notice:
            self.lead(question.group(1))
        elif question and self.prefix and self.behaviour == "tools" and "Brief:" in notice:
            self.tools(question.group(1))
        elif question and self.prefix and self.behaviour == "answer" and question.group(2) != "session":
            self.run("reply", question.group(1), f"{self.name} says: the endpoint is GET /v1/state")
        else:
            self.say(f"{self.name}: (not answering that)")

    def lead(self, brief_id: str) -> None:
        asked = [f"q-{to}" for to in self.ask]
        for to, question_id in zip(self.ask, asked, strict=True):
            self.run("ask", to, f"{to}, which endpoint returns the daemon state?", "--id", question_id)
        states: dict[str, object] = {}
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            for question_id in asked:
                states[question_id] = self.run("status", question_id).get("state")
            if all(state not in (None, "open") for state in states.values()):
                break
            time.sleep(1.0)
        summary = "; ".join(f"{q} {state}" for q, state in states.items())
        self.run("reply", brief_id, f"concluded: {summary}")

    def tools(self, brief_id: str) -> None:
        sid = brief_id.removesuffix(".brief")
        assert self.session is not None, "the introduction taught no session tools"
        said = self.run("announce", sid, "kickoff: read the board", "--id", "a1", command=self.session)
        rfc = self.run("rfc", sid, "a new thread?", command=self.session)
        for to in self.ask:
            self.run("ask", to, f"{to}, are you there?", "--id", f"q-{to}")
        roll = self.run("rollcall", sid, command=self.session)
        members = roll.get("members")
        owed = {m["name"]: m["owed"] for m in members} if isinstance(members, list) else {}
        summary = {"announce": said.get("recipients"), "rfc": rfc.get("error"), "owed": owed}
        self.run("reply", brief_id, json.dumps(summary, sort_keys=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--behaviour", choices=("lead", "answer", "ignore", "tools"), required=True)
    parser.add_argument("--ask", action="append", default=[])
    args = parser.parse_args()
    member = Member(args.name, args.behaviour, args.ask)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    tty.setraw(stdin)
    sys.stdout.write("\x1b[?2004h")
    member.say(f"session member {args.name} ({args.behaviour})")
    sys.stdout.write(f"{args.name}> ")
    sys.stdout.flush()
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
                    sys.stdout.write(text.replace("\n", " "))  # the draft shows on the prompt line
                elif pending[0] in "\r\n":
                    pending = pending[1:]
                    sys.stdout.write("\r\n")
                    if line.strip():
                        member.handle(line)
                    line = ""
                    sys.stdout.write(f"{args.name}> ")
                elif pending[0] == "\x03":
                    return
                else:
                    line += pending[0]
                    sys.stdout.write(pending[0])
                    pending = pending[1:]
                sys.stdout.flush()
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    main()
