# Issue 14, finding 6: "Viewers print what peers wrote." A question, an answer, a name or a role holding
# escape sequences set the viewer's terminal title and its clipboard (OSC 52) and hid text; rich read
# `[link=…]` in it as markup. Now every viewer shows peer text through core.terminal_text. Against a real
# daemon started by the CLI: the readable CLI output holds no control character and shows each removed one
# visibly; `--json` output is the exact text, escaped so that it is inert on a terminal; `get` and `watch` in
# a real tmux pane set no title and no paste buffer and hide nothing; the web page in a real headless
# Chromium shows the same visible signs and never reads peer text as HTML.
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from harness.core.terminal_text import SHOWN_AS_CODE_POINTS, terminal_safe
from harness.io import home as homes
from harness.io.tmux import ProcessRunner, new_session
from tests.test_tmux import server  # noqa: F401  (the fixture: a private tmux server per test)
from tests.test_web import browser, tab  # noqa: F401  (the fixture: one headless Chromium per module)

HARNESS = [sys.executable, "-m", "harness.cli.main"]
DEADLINE = 60.0

# The payloads of finding 6, each between spaces so that a wrapping viewer keeps each one on one line: the
# end of a bracketed paste, OSC 52 (clipboard) and OSC 0 (title) ended by BEL, the same ended by ST (which
# survives rich's own stripping of BEL), a C1 CSI, CR, Ctrl-C, a bidi override, NUL, rich markup and an emoji
# code, and HTML for the page.
ATTACKS = (
    "\x1b[201~ \x1b]52;c;SGVsbG8=\x07 \x1b]0;pwned-title\x07 \x1b]2;pwned-title\x1b\\ "
    "\x1b]52;c;SGVsbG8=\x1b\\ \x9b31m \r \x03 \u202eevil \x7f [bold]b[/bold] "
    "[link=https://example.invalid]l[/link] :smile: <img src=x onerror=window.pwned=1>"
)
QUESTION = "question \x00 " + ATTACKS + " end-of-question"
CONTEXT = "context " + ATTACKS  # given on the command line, which cannot carry NUL
ANSWER = "answer \x00 " + ATTACKS
EVIDENCE = "evidence " + ATTACKS
TEAM_NAME = "team \x1b]2;pwned-title\x1b\\ \x1b]52;c;SGVsbG8=\x1b\\ \x9b \u202e \x00 [bold]t[/bold]"
NAME = "ann \x1b]2;pwned-title\x1b\\ \x1b]52;c;SGVsbG8=\x1b\\ \x9b \u202e \x00 [bold]n[/bold]"
ROLE = "role \x1b]2;pwned-title\x1b\\ \x1b]52;c;SGVsbG8=\x1b\\ \x9b \u202e \x00 [bold]r[/bold]"
# How the viewers show the attacks: each removed character as a visible sign, markup as the words it is.
VISIBLE = (
    "␛[201~",
    "␛]52;c;SGVsbG8=^G",
    "␛]0;pwned-title^G",
    "␛]2;pwned-title␛\\",
    "\\u009b31m",
    "^M",
    "^C",
    "\\u202eevil",
    "^?",
    "[bold]b[/bold]",
    "[link=https://example.invalid]l[/link]",
    ":smile:",
    "<img src=x onerror=window.pwned=1>",
)


def inert(text: str, *, tabs: bool = False) -> list[str]:
    """The characters of `text` that a terminal would not print as themselves (line breaks aside)."""
    return sorted(
        {
            c
            for c in text
            if c != "\n" and not (tabs and c == "\t") and (not c.isprintable() or c in SHOWN_AS_CODE_POINTS)
        }
    )


def run(*args: str, key: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
    env["COLUMNS"] = "300"  # wide tables: a cell is folded only where the viewer cuts it
    if key is not None:
        env["HARNESS_MEMBER_KEY"] = key
    return subprocess.run(
        [*HARNESS, *args],
        env=env,
        capture_output=True,
        input=None if stdin is None else stdin.encode(),
        timeout=DEADLINE,
        check=False,
    )


def team(
    home: Path, *args: str, key: str | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    return run("team", "--home", str(home), "--team", "t1", *args, key=key, stdin=stdin)


def _json(done: subprocess.CompletedProcess[bytes]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return set().union(*(_strings(item) for item in items))


@dataclass
class Hostile:
    home: Path
    keys: dict[str, str]  # member keys: "ann" (the asker, with the hostile name and role) and "bob"
    ask: subprocess.CompletedProcess[bytes]  # the readable output of `ask` and of `reply`
    reply: subprocess.CompletedProcess[bytes]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """A daemon (started and stopped by the CLI) with a team whose name, a member's name and role, two
    questions, a context, an answer and its evidence hold every payload. q1 (ann -> bob) is answered, q2 is
    open."""
    tmp = tmp_path_factory.mktemp("hostile")
    home = tmp / "home"
    _json(run("daemon", "start", "--home", str(home), "--json"))
    try:
        members = [
            {"machineId": "m1", "agentId": "a-ann", "name": NAME, "role": ROLE},
            {"machineId": "m1", "agentId": "a-bob", "name": "bob", "role": "builds"},
        ]
        (tmp / "team.json").write_text(json.dumps({"id": "t1", "name": TEAM_NAME, "members": members}))
        _json(run("team", "--home", str(home), "create", "--file", str(tmp / "team.json"), "--json"))
        ids = {m["agentId"]: m["id"] for m in _json(team(home, "members", "--json"))["members"]}
        ann, bob = ids["a-ann"], ids["a-bob"]
        keys = {
            name: _json(team(home, "key", ids[f"a-{name}"], "--json"))["memberKey"] for name in ("ann", "bob")
        }
        ask = ("ask", bob, "--from", ann, "--text-file", "-", "--context", CONTEXT)
        asked = team(home, *ask, "--id", "q1", stdin=QUESTION)
        assert asked.returncode == 0, asked.stderr
        reply = ("reply", "q1", "--member", bob, "--text-file", "-", "--evidence", EVIDENCE)
        replied = team(home, *reply, stdin=ANSWER)
        assert replied.returncode == 0, replied.stderr
        _json(team(home, *ask, "--id", "q2", "--json", stdin=QUESTION))
        yield Hostile(home, keys, asked, replied)
    finally:
        stopped = run("daemon", "stop", "--home", str(home), "--json")
        info = homes.read_daemon_info(home)
        if stopped.returncode != 0 and info is not None and homes.pid_alive(int(info["pid"])):
            os.kill(int(info["pid"]), signal.SIGKILL)  # the daemon this fixture started


# Every readable team view; the views of one exchange show all of its text, the tables an excerpt of it.
READABLE = {
    "get": (("get",), None),
    "members": (("members",), None),
    "list": (("list",), None),
    "status": (("status",), None),
    "status q1": (("status", "q1"), None),
    "inbox of the asker": (("inbox",), "ann"),
    "inbox of the asked": (("inbox",), "bob"),
    "wait": (("wait", "q1", "--seconds", "1"), "ann"),
}
WHOLE = {"status q1", "wait", "ask", "reply"}


@pytest.mark.parametrize("view", [*READABLE, "ask", "reply"])
def test_finding_6_readable_output_holds_no_control_character_and_shows_each_one(
    hostile: Hostile, view: str
) -> None:
    if view in READABLE:
        args, member = READABLE[view]
        done = team(hostile.home, *args, key=hostile.keys.get(member or ""))
    else:
        done = hostile.ask if view == "ask" else hostile.reply
    assert done.returncode == 0, done.stderr
    out, err = done.stdout.decode(), done.stderr.decode()
    assert inert(out) == [] and inert(err) == [], out
    assert "␛" in out  # shown, not dropped
    if view in WHOLE:
        for sign in VISIBLE:
            assert sign in out, (sign, out)
        assert "^@" in out and "question ^@ ␛[201~" in out  # the NUL of the question text
    if view == "get":
        assert terminal_safe(TEAM_NAME, line_breaks=False) in out  # the heading line, whole
    if view in {"get", "members"}:  # the names and roles, whole, never markup
        assert terminal_safe(NAME, line_breaks=False) in out and terminal_safe(ROLE, line_breaks=False) in out


@pytest.mark.parametrize("view", READABLE)
def test_finding_6_json_output_is_the_exact_text_and_inert_on_a_terminal(hostile: Hostile, view: str) -> None:
    """json.dumps(ensure_ascii=False) escaped C0 only; C1 controls (U+009B is CSI), DEL and bidi overrides
    went out raw."""
    args, member = READABLE[view]
    done = team(hostile.home, *args, "--json", key=hostile.keys.get(member or ""))
    assert done.returncode == 0, done.stdout
    out = done.stdout.decode()
    assert inert(out) == [], out
    assert out.count("\n") == 1  # one document, one line
    body = json.loads(out)
    assert _strings(body) & {QUESTION, TEAM_NAME, NAME, ROLE}  # the exact text, back from the escapes
    if view == "get":
        q1 = next(e for e in body["exchanges"] if e["id"] == "q1")
        assert (q1["text"], q1["context"], q1["answer"]["text"]) == (QUESTION, CONTEXT, ANSWER)
        assert q1["answer"]["evidence"] == [EVIDENCE]
        assert body["name"] == TEAM_NAME and body["members"][0]["name"] == NAME


def test_finding_6_json_output_escapes_astral_and_surrogate_code_points_validly() -> None:
    from harness.cli.output import json_text

    value = {"k": "tag \U000e0001 private \U000f0000 lone \ud800 smile \U0001f600 \u0085 \u2028 é"}
    text = json_text(value)
    assert inert(text) == [] and json.loads(text) == value
    assert "\\udb40\\udc01" in text and "\U0001f600" in text and "é" in text  # printable ones stay raw


# --- a real terminal: tmux ----------------------------------------------------------------------------------


async def _pane(socket: str, tmp_path: Path, argv: list[str]) -> str:
    config = tmp_path / "tmux.conf"
    config.write_text("set -g set-clipboard on\n")  # tmux takes OSC 52 from its panes into paste buffers
    size = {"COLUMNS": "400", "LINES": "60"}  # rich and Textual prefer these to the terminal's own size
    return await new_session(
        socket, "viewer", argv, width=400, height=60, env=size, config=str(config), cwd=str(tmp_path)
    )


async def _screen(runner: ProcessRunner, pane: str, until: str) -> str:
    with trio.fail_after(DEADLINE):
        while True:
            # with the scrollback: tmux may push the first line there while it sizes a new pane
            screen = "\n".join(await runner.run("capture-pane", "-p", "-S", "-200", "-t", pane))
            if until in screen:
                return screen
            await trio.sleep(0.1)


@pytest.mark.parametrize("viewer", ["get", "watch"])
async def test_finding_6_in_a_real_terminal_a_peer_sets_no_title_writes_no_clipboard_and_hides_nothing(
    hostile: Hostile,
    server: str,  # noqa: F811
    tmp_path: Path,
    viewer: str,
) -> None:
    argv = [*HARNESS, "team", "--home", str(hostile.home), "--team", "t1", viewer]
    runner = ProcessRunner(server)
    pane = await _pane(server, tmp_path, argv)
    if viewer == "get":
        with trio.fail_after(DEADLINE):  # the pane stays after `get` exits (remain-on-exit)
            while (await runner.run("display-message", "-p", "-t", pane, "#{pane_dead}")) != ["1"]:
                await trio.sleep(0.05)
        screen = await _screen(runner, pane, "Exchanges")
        shown = ("␛]2;pwned-title␛\\", "␛]52;c;SGVsbG8=␛\\", "\\u009b", "\\u202e", "[bold]t[/bold]")
    else:  # the newest question is selected: its whole text shows in the detail pane
        screen = await _screen(runner, pane, "end-of-question")
        shown = VISIBLE
    title = await runner.run("display-message", "-p", "-t", pane, "#{pane_title}")
    assert not any("pwned" in line for line in title), title
    assert await runner.run("list-buffers") == []  # no OSC 52 reached tmux
    for sign in shown:
        assert sign in screen, (sign, screen)
    assert "team ␛]2;pwned-title␛\\" in screen and "ann ␛]2;pwned-title␛\\" in screen


# --- the web page -------------------------------------------------------------------------------------------


async def test_finding_6_the_page_shows_peer_text_as_text_with_the_terminal_signs(
    hostile: Hostile,
    browser: str,  # noqa: F811
) -> None:
    """The page inserts peer text only as text (markup in it stays words) and shows each control, bidi or
    invisible character with the sign core.terminal_text uses: a name cannot reorder or hide what follows."""
    argv = [*HARNESS, "web", "--team", "t1", "--home", str(hostile.home), "--json"]
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            partial(trio.run_process, argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False)
        )
        try:
            with trio.fail_after(DEADLINE):
                line = b""
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive_some(4096)
            url = json.loads(line)["url"]
            async with tab(browser, url) as page:
                await page.until("document.querySelector('#question-text')?.textContent.includes('end-of')")
                assert await page.text("#question-text") == terminal_safe(QUESTION, tabs=True)
                assert await page.text("#team-name") == terminal_safe(TEAM_NAME, tabs=True)
                assert await page.js("document.querySelectorAll('img').length") == 0
                assert await page.js("window.pwned === undefined")
                await page.click('[data-exchange="q1"]')
                await page.until("document.querySelector('#answer-text') !== null")
                assert await page.text("#answer-text") == terminal_safe(ANSWER, tabs=True)
                assert await page.text("#evidence") == terminal_safe(EVIDENCE, tabs=True)
                everything = await page.js("document.title + document.body.textContent")
                assert inert(everything, tabs=True) == []
                for sign in VISIBLE:
                    assert sign in everything, sign
                # The page's `shown` is core's terminal_safe(text, tabs=True), for every code point both
                # Unicode versions assign (Chromium's may know newer ones), lone surrogates and CR LF.
                corpus = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) not in {"Cn", "Cs"}]
                corpus += ["\ud800", "\udfff", "a\r\nb", "a\rb", QUESTION]
                corpus += ["\u26a0\ufe0f", "a\ufe0f", "\u26a0\ufe0f\ufe0f", "\U0001f600\ufe0e", " \ufe0f"]
                got = await page.js(f"import('/app.js').then((app) => {json.dumps(corpus)}.map(app.shown))")
                wrong = [(c, g) for c, g in zip(corpus, got, strict=True) if g != terminal_safe(c, tabs=True)]
                assert wrong == []
        finally:
            process.terminate()
