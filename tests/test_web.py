# The team page in a real headless Chromium, driven over the DevTools protocol by a small client on
# trio-websocket. The browser reaches nothing but loopback (a dead proxy and a resolver that finds no name
# catch anything else). One browser serves the module; each test opens its own tab.
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from harness.core.terminal_text import terminal_safe
from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.listeners import Listener, ListenerLimits, Slot, local_listener
from harness.io.rpc import PROTOCOL, result_frame, snapshot_frame
from harness.io.web import PAGE_ACTIONS, WebServer

ROOT = Path(__file__).resolve().parent.parent
TEAM = "t1"
MEMBERS = [
    {"id": "m-ann", "machineId": "machine-1", "agentId": "agent-ann", "name": "ann", "role": "Daemon APIs"},
    {"id": "m-bob", "machineId": "machine-1", "agentId": "agent-bob", "name": "bob", "role": "Phone client"},
]
SHOTS = Path(tempfile.gettempdir()) / "harness-web-shots"
DEADLINE = 60.0  # generous: Chromium and the daemon share a loaded two-core machine
# The elements a person needs at every width: who, the state of the link, the roster, the exchanges with
# both states, the selected exchange and its answer, and the owner's actions.
KEY_ELEMENTS = (
    "#team-name",
    "#team-state",
    "#link",
    "#btn-pause",
    "#btn-check-connection",
    "#roster .member",
    ".exchange",
    ".exchange .q-state",
    ".exchange .d-state",
    "#detail",
    "#detail-question-state",
    "#detail-delivery-state",
    "#answer-text",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[str]:
    """The DevTools WebSocket URL of a fresh headless Chromium."""
    if shutil.which("chromium") is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "install_browser.sh")], check=True)
    profile = tempfile.mkdtemp(prefix="harness-chromium-")
    process = subprocess.Popen(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--proxy-server=http://127.0.0.1:9",  # loopback bypasses it; anything else goes nowhere
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not active.exists() or len(active.read_text().splitlines()) < 2:
            assert process.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.05)
        port, path = active.read_text().splitlines()[:2]
        yield f"ws://127.0.0.1:{port}{path}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


class Tab:
    """One page target over the browser's DevTools connection (flat sessions)."""

    def __init__(self, ws: WebSocketConnection, session: str) -> None:
        self.ws = ws
        self.session = session
        self._ids = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        return await _call(self.ws, method, params, self.session)

    async def js(self, expression: str) -> Any:
        reply = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return reply["result"].get("value")

    async def until(self, expression: str, seconds: float = DEADLINE) -> Any:
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (error) {{ return false; }} }})()"
        with trio.fail_after(seconds):
            while True:
                value = await self.js(guarded)
                if value:
                    return value
                await trio.sleep(0.05)

    async def text(self, selector: str) -> str:
        value = await self.js(f"document.querySelector({json.dumps(selector)})?.textContent ?? ''")
        return str(value)

    async def click(self, selector: str) -> None:
        assert await self.js(
            f"(() => {{ const b = document.querySelector({json.dumps(selector)}); "
            "if (!b) return false; b.click(); return true; })()"
        ), selector

    async def shoot(
        self, width: int, height: int, name: str, elements: tuple[str, ...] = KEY_ELEMENTS
    ) -> Path:
        """Resize to `width`, check every key element is on screen, and save a PNG."""
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        await self.until(f"window.innerWidth === {width}")
        boxes = await self.js(
            "(" + "(selectors) => selectors.map((s) => { const e = document.querySelector(s); "
            "if (!e) return [s, null]; const r = e.getBoundingClientRect(); const st = getComputedStyle(e); "
            "return [s, {x: r.x, y: r.y, w: r.width, h: r.height, shown: st.visibility !== 'hidden' "
            "&& st.display !== 'none'}]; })" + f")({json.dumps(elements)})"
        )
        for selector, box in boxes:
            assert box is not None, f"{selector} is missing at {width} px"
            assert box["shown"] and box["w"] > 0 and box["h"] > 0, f"{selector} is invisible at {width} px"
            assert box["x"] >= 0 and box["x"] + box["w"] <= width + 0.5, f"{selector} overflows at {width} px"
        assert await self.js("document.documentElement.scrollWidth") <= width, f"sideways scroll at {width}"
        full = await self.js("Math.ceil(document.documentElement.scrollHeight)")
        shot = await self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": max(height, full), "scale": 1},
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / name
        path.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot: {path}")
        return path


_counter = iter(range(1, 1 << 30))


async def _call(ws: WebSocketConnection, method: str, params: dict[str, Any], session: str | None) -> Any:
    call_id = next(_counter)
    message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
    if session is not None:
        message["sessionId"] = session
    await ws.send_message(json.dumps(message))
    while True:
        reply = json.loads(await ws.get_message())
        if reply.get("id") == call_id:
            assert "error" not in reply, (method, reply["error"])
            return reply["result"]


@asynccontextmanager
async def tab(browser: str, url: str) -> AsyncIterator[Tab]:
    async with open_websocket_url(browser, max_message_size=64 * 1024 * 1024) as ws:
        target = (await _call(ws, "Target.createTarget", {"url": "about:blank"}, None))["targetId"]
        attached = await _call(ws, "Target.attachToTarget", {"targetId": target, "flatten": True}, None)
        page = Tab(ws, attached["sessionId"])
        await page.call("Page.navigate", url=url)
        try:
            yield page
        finally:
            await _call(ws, "Target.closeTarget", {"targetId": target}, None)


def owner_call(home: Path, action: str, *, key: str | None = None, **fields: Any) -> Any:
    """One `team` request as the owner, or as the member whose key is `key`."""
    token = None if key else homes.read_owner_token(home)
    with Client(home / homes.SOCKET_FILE) as client:
        return client.request(action, team_id=TEAM, owner_token=token, member_key=key, fields=fields)


_ENDED: dict[int, trio.Event] = {}  # id of a daemon of `daemon()` -> set once its `run` has returned


@asynccontextmanager
async def daemon(home: Path) -> AsyncIterator[Daemon]:
    """A real daemon for the body of the block; it has stopped (cleanly) when the block ends."""
    running = Daemon(home, log=lambda line: None)
    ended = _ENDED[id(running)] = trio.Event()

    async def run(task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await running.run(task_status=task_status)
        finally:
            ended.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        try:
            yield running
        finally:
            running.stop()
    assert running.internal_errors == 0
    del _ENDED[id(running)]


async def stopped(running: Daemon) -> None:
    """Stop a daemon of `daemon()` and wait until it has (its journals closed, its lock on the data
    directory released): only then may another start there."""
    running.stop()
    with trio.fail_after(DEADLINE):
        await _ENDED[id(running)].wait()


async def test_the_page_shows_a_team_live_acts_and_survives_a_daemon_restart(
    browser: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    token = None

    async def owner(action: str, **fields: Any) -> Any:
        return await trio.to_thread.run_sync(partial(owner_call, home, action, **fields))

    async with trio.open_nursery() as nursery:
        server = WebServer(home, TEAM)
        await nursery.start(server.run, 0)
        url = server.url(server.mint_ticket())
        async with daemon(home):
            await owner("create", id=TEAM, name="Build", members=MEMBERS)
            token = homes.read_owner_token(home)
            await owner(
                "ask",
                id="q1",
                to="bob",
                text="Which endpoint returns daemon state?",
                context="Phone daemon list",
                **{"from": "m-ann"},
            )
            # The board (issue 20): a task in progress, one waiting on it, and a note for bob. A title is a
            # member's words: markup and a bidi override in it are shown as text.
            ann = (await owner("key", memberId="m-ann"))["memberKey"]

            async def board(kind: str, op: str, key: str | None = None, **command: Any) -> None:
                await owner("board", key=key, id=op, command={"type": kind, **command})

            await board("add_task", "api", title="Write the state API")
            await board(
                "add_task", "ui", title="<img src=x onerror=alert(1)>Phone \u202eview", dependencies=["api"]
            )
            await board("claim", "c1", key=ann, taskId="api")
            await board("start", "c2", key=ann, taskId="api")
            await board("send_note", "n1", to={"kind": "member", "name": "bob"}, text="API lands today")
        async with tab(browser, url) as page, daemon(home) as second:
            await page.until("document.querySelector('#team-name').textContent === 'Build'")
            assert await page.text("#link") == f"Live: daemon pid {os.getpid()}"
            assert await page.js("location.hash") == ""  # the spent ticket left the address bar
            assert await page.text(".exchange .q-state") == "open"
            assert (await page.text(".exchange .d-state")).split()[0] in {"queued", "held"}
            assert await page.text("#question-text") == "Which endpoint returns daemon state?"
            assert await page.text("#no-answer") == "No answer yet."
            page_text = await page.js("document.documentElement.outerHTML + JSON.stringify(sessionStorage)")
            assert token is not None and token not in page_text

            # An answer arrives: the page follows without a reload.
            revision = int(await page.js("document.documentElement.dataset.revision"))
            await owner(
                "reply",
                questionId="q1",
                text="GET /v1/daemon/state",
                evidence=["io/daemon.py:42"],
                memberId="bob",
            )
            await page.until("document.querySelector('#answer-text')?.textContent === 'GET /v1/daemon/state'")
            assert int(await page.js("document.documentElement.dataset.revision")) > revision
            assert int(await page.js("document.documentElement.dataset.deltas")) > 0  # followed by deltas
            assert await page.text(".exchange .q-state") == "answered"
            assert await page.text("#evidence") == "io/daemon.py:42"
            assert "null" not in await page.text("main") and "undefined" not in await page.text("main")

            # The board, read-only: tasks by state with what they wait on and who claimed them, and each
            # member's unread notes beside the member.
            await page.until("document.querySelectorAll('#tasks .task').length === 2")
            tasks = "[...document.querySelectorAll('#tasks .task')]"
            assert await page.js(f"{tasks}.map((t) => t.dataset.task)") == ["api", "ui"]
            assert await page.text("[data-task='api'] .t-state") == "in_progress"
            assert await page.text("[data-task='api'] .task-who") == "may claim: anyone · claimant: ann"
            assert await page.text("[data-task='ui'] .t-state") == "pending"
            assert await page.text("[data-task='ui'] .task-after") == "after: Write the state API"
            assert (
                await page.text("[data-task='ui'] .task-title")
                == "<img src=x onerror=alert(1)>Phone \\u202eview"
            )
            assert await page.js("document.querySelectorAll('#tasks img').length") == 0
            assert await page.text("[data-member='m-bob'] .member-notes") == "board notes: 1 unread"
            assert await page.text("[data-member='m-ann'] .member-notes") == "board notes: 0 unread"
            # ann finishes: the page follows the board by itself (the ledger's revision does not move).
            ledger = await page.js("document.documentElement.dataset.revision")
            await owner("board", key=ann, id="c3", command={"type": "done", "taskId": "api"})
            await page.until("document.querySelector(\"[data-task='ui'] .t-state\")?.textContent === 'ready'")
            assert await page.js(f"{tasks}.map((t) => t.dataset.task)") == ["ui", "api"]
            assert await page.js("document.documentElement.dataset.revision") == ledger

            phone = await page.shoot(390, 844, "team-phone-390.png", (*KEY_ELEMENTS, "#tasks .task"))
            desktop = await page.shoot(1280, 800, "team-desktop-1280.png", (*KEY_ELEMENTS, "#tasks .task"))
            assert phone.stat().st_size > 10_000 and desktop.stat().st_size > 10_000

            # An owner action goes through the page server, which holds the owner token.
            await page.click("#btn-pause")
            await page.until("document.querySelector('#team-state').textContent === 'paused'")
            # The team's new state is pushed by the subscription, the notice by the action's own answer:
            # either may come first (a fresh clone's CI run saw the state first), so each is waited for.
            await page.until("document.querySelector('#notice').textContent === 'Pause: done.'")
            assert await page.js("document.querySelector('#btn-resume').disabled") is False
            shown = await page.js("document.documentElement.dataset.revision")

            # The daemon goes away: the page says so and keeps the last state...
            await stopped(second)
            await page.until("document.querySelector('#link').textContent.startsWith('Daemon not reachable')")
            assert f"Showing revision {shown} as last known" in await page.text("#link")
            assert await page.text("#answer-text") == "GET /v1/daemon/state"
            assert await page.js("document.querySelector('#btn-resume').disabled") is True
            # ...and when it is back (a new process), reconnects with its session, not the spent ticket.
            async with daemon(home):
                live = f"Live: daemon pid {os.getpid()}"
                await page.until(f"document.querySelector('#link').textContent === '{live}'")
                await owner("resume")
                await page.until("document.querySelector('#team-state').textContent === 'active'")

        # The ticket was for one page load only.
        async with tab(browser, url) as again:
            await again.until("document.querySelector('#link').textContent.startsWith('Refused')")
            assert await again.text("#team-name") == "Team"
        nursery.cancel_scope.cancel()


class FakeDaemon:
    """Enough of a daemon to push frames a real one would only push in a race (an older revision), to hold
    an exchange whose delivery is unconfirmed, and to record every action the page asks for."""

    def __init__(self, home: Path, protocol_revision: int = 99) -> None:
        self.home = home
        self.protocol_revision = protocol_revision
        self.actions: list[str] = []
        self.page: WebSocketConnection | None = None
        self.subscription = ""
        self.push_older_first = False
        self.bob: dict[str, Any] = {}  # what to change of bob's membership
        self.more: list[dict[str, Any]] = []  # exchanges after q1

    def team(self, revision: int, name: str) -> dict[str, Any]:
        exchange = {
            "id": "q1",
            "from": "m-ann",
            "to": "m-bob",
            "text": "Which endpoint?",
            "context": None,
            "parentId": None,
            "createdAt": 1_700_000_000_000,
            "deadlineAt": 1_700_000_900_000,
            "state": "open",
            "answer": None,
            "delivery": {"state": "unconfirmed", "reason": "no_turn_seen", "updatedAt": 1_700_000_001_000},
        }
        members = [{**m, "state": "active", "introduction": None} for m in MEMBERS]
        members[1].update(self.bob)
        return {
            "id": TEAM,
            "name": name,
            "state": "active",
            "revision": revision,
            "createdAt": 1,
            "members": members,
            "exchanges": [exchange, *self.more],
        }

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        homes.ensure_home(self.home)
        homes.owner_token(self.home)
        path = self.home / homes.SOCKET_FILE
        guard = Listener("fake daemon", ListenerLimits(), lambda line: None)
        listener = local_listener(path)
        async with trio.open_nursery() as nursery:
            await nursery.start(guard.serve, listener, guard.websockets(self._handle, 1 << 20))
            homes.write_private_json(self.home / homes.DAEMON_FILE, {"pid": os.getpid(), "socket": str(path)})
            task_status.started()

    async def _handle(self, ws: WebSocketConnection, slot: Slot) -> None:
        async for message in _messages(ws):
            frame = json.loads(message)
            action, request_id = frame["action"], frame["requestId"]
            if action != "capabilities":  # the page server adds the owner token it holds; the page has none
                assert frame.get("ownerToken") == homes.read_owner_token(self.home)
            if not request_id.startswith("web-"):
                self.actions.append(action)
            if action == "capabilities":
                if self.push_older_first and self.subscription:
                    await ws.send_message(snapshot_frame(self.subscription, self.team(3, "three")))
                result: Any = {
                    "protocol": PROTOCOL,
                    "protocolRevision": self.protocol_revision,
                    "machineId": "machine-1",
                }
            elif action == "subscribe":
                self.page, self.subscription = ws, request_id
                result = self.team(5, "five")
            elif action == "status":
                result = self.team(5, "five")["exchanges"][0]
            elif action == "members":
                result = {"teamId": TEAM, "revision": 5, "members": self.team(5, "five")["members"]}
            else:
                await ws.send_message(
                    json.dumps(
                        {
                            "type": "team_result",
                            "requestId": request_id,
                            "error": "not_found",
                            "detail": "no such agent",
                        }
                    )
                )
                continue
            await ws.send_message(result_frame(request_id, result))


async def _messages(ws: WebSocketConnection) -> AsyncIterator[str | bytes]:
    from trio_websocket import ConnectionClosed

    try:
        while True:
            yield await ws.get_message()
    except ConnectionClosed:
        return


async def test_an_older_revision_is_ignored_and_uncertain_delivery_is_checked_not_resent(
    browser: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    fake = FakeDaemon(home)
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        server = WebServer(home, TEAM)
        await nursery.start(server.run, 0)
        async with tab(browser, server.url(server.mint_ticket())) as page:
            await page.until("document.documentElement.dataset.revision === '5'")
            assert await page.text("#detail-delivery-state") == "unconfirmed (no_turn_seen)"
            assert await page.js("document.querySelectorAll('#unconfirmed button.check').length") == 3
            assert await page.js("document.body.textContent.includes('Resend')") is False

            # The daemon sends revision 3 just before the answer to this check: the page has read it by
            # the time the answer shows, and kept revision 5.
            fake.push_older_first = True
            await page.click("#unconfirmed button.check:nth-of-type(1)")
            await page.until(
                "document.querySelector('#unconfirmed .check-result')?.textContent"
                ".includes('The daemon answers')"
            )
            assert await page.js("document.documentElement.dataset.revision") == "5"
            assert await page.text("#team-name") == "five"

            await page.click("#unconfirmed button.check:nth-of-type(2)")
            await page.until(
                "document.querySelector('#unconfirmed .check-result')?.textContent"
                ".includes('Question q1 is open; its delivery is unconfirmed (no_turn_seen)')"
            )
            await page.click("#unconfirmed button.check:nth-of-type(3)")
            await page.until(
                "document.querySelector('#unconfirmed .check-result')?.textContent.includes('bob is active')"
            )
            checks = (*KEY_ELEMENTS[:-1], "#unconfirmed", "#unconfirmed .check-result", "#btn-cancel")
            await page.shoot(390, 844, "unconfirmed-phone-390.png", checks)
            # Checks re-read the ledger; nothing was sent again.
            reads = {"subscribe", "capabilities", "status", "members", "agent_show", "board_get"}
            assert set(fake.actions) <= reads
            assert {"status", "members", "agent_show"} <= set(fake.actions)

            # A newer revision still comes through.
            assert fake.page is not None
            await fake.page.send_message(snapshot_frame(fake.subscription, fake.team(6, "six")))
            await page.until("document.querySelector('#team-name').textContent === 'six'")
        nursery.cancel_scope.cancel()


# A teammate's name as a hostile peer would set it: a title and a clipboard escape, a bidi override, NUL and
# markup for the page. The advice that names the teammate shows it as text, with the terminal's signs.
HOSTILE_NAME = (
    "bob \x1b]2;pwned-title\x1b\\ \x1b]52;c;SGVsbG8=\x07 \u202e \x00 <img src=x onerror=window.pwned=1>"
)


async def test_a_notice_that_needs_a_person_shows_the_next_step_as_text_and_writes_nothing(
    browser: str, tmp_path: Path
) -> None:
    """Seed: "offline, unpaired, busy, draft, expired, cancelled, and uncertain states are visible and
    actionable" (issue 16, items 3 and 4, on the page): an `unconfirmed` notice (q1, and bob's introduction)
    names the owner's next step, `inspect` then `resolve --landed|--lost`, as commands to run; a notice
    `queued` behind a crash `leftover` (q2) names the unconfirmed notices that may sit in bob's composer and
    the two safe human actions. The page offers no button for any of them and relays no write; the hostile
    teammate name in the advice stays text."""
    home = tmp_path / "home"
    fake = FakeDaemon(home)
    fake.bob = {"name": HOSTILE_NAME, "introduction": {"state": "unconfirmed", "reason": "restart"}}
    waiting = {"state": "queued", "reason": "leftover", "updatedAt": 1_700_000_002_000}
    fake.more = [
        {**fake.team(5, "five")["exchanges"][0], "id": "q2", "text": "Which port?", "delivery": waiting}
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        server = WebServer(home, TEAM)
        await nursery.start(server.run, 0)
        async with tab(browser, server.url(server.mint_ticket())) as page:
            await page.until("document.querySelector('#leftover') !== null")  # the newest exchange, q2
            assert await page.text("#detail-delivery-state") == "queued (leftover)"
            leftover = await page.text("#leftover")
            bob = terminal_safe(HOSTILE_NAME, tabs=True)
            held = "t1/m-bob/introduction, t1/q1/question"
            assert f"Waiting on a leftover: {bob}'s composer holds {held}, pasted by a write" in leftover
            assert "submit it: press Enter in the agent's pane" in leftover
            assert "or clear it: empty the agent's composer" in leftover
            assert "the daemon touches neither" in leftover
            assert await page.js("document.querySelectorAll('img').length") == 0
            assert await page.js("window.pwned === undefined")

            steps = await page.text("[data-member='m-bob'] .intro-next")
            assert "harness team --team t1 inspect t1/m-bob/introduction" in steps
            assert "harness team --team t1 resolve t1/m-bob/introduction --lost" in steps

            await page.click('[data-exchange="q1"]')
            await page.until("document.querySelector('#unconfirmed-next') !== null")
            assert await page.text("#unconfirmed-next") == (
                "Owner's next step, in a terminal on the machine that runs the agent: "
                "harness team --team t1 inspect q1 looks for the notice in the agent's pane; then "
                "harness team --team t1 resolve q1 --landed if it reached the agent, or "
                "harness team --team t1 resolve q1 --lost to have it written once more (once, under a new "
                "write id). Never automatic."
            )
            assert await page.js("document.querySelector('#leftover')") is None
            # Read-only: the only buttons are the checks, cancel, the team's actions and navigation.
            labels = await page.js(
                "[...document.querySelectorAll('button:not(.exchange)')].map((b) => b.textContent)"
            )
            assert labels and not [
                label for label in labels if re.search(r"resolve|landed|lost|submit", label, re.I)
            ]
            await page.click('[data-exchange="q2"]')
            await page.until("document.querySelector('#leftover') !== null")
            checks = (*KEY_ELEMENTS[:-1], "#leftover", ".leftover-actions", ".intro-next")
            await page.shoot(390, 844, "leftover-phone-390.png", checks)
            assert bob in await page.js("document.body.textContent")
        assert set(fake.actions) <= {"subscribe", "capabilities", "board_get"}
        assert not PAGE_ACTIONS & {"delivery_inspect", "delivery_resolve"}  # nor could the page ask
        nursery.cancel_scope.cancel()


async def test_an_old_daemon_is_explained(browser: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    fake = FakeDaemon(home, protocol_revision=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        server = WebServer(home, TEAM)
        await nursery.start(server.run, 0)
        async with tab(browser, server.url(server.mint_ticket())) as page:
            await page.until("document.querySelector('#link').textContent.includes('too old')")
            assert "protocol revision 1" in await page.text("#link")
            assert await page.js("document.querySelector('#btn-pause').disabled") is True
        nursery.cancel_scope.cancel()
