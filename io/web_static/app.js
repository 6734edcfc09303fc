// The team page: a projection of the daemon's ledger, rebuilt from each snapshot it pushes. Only a newer
// revision replaces what is shown, so a late or replayed frame never rolls the page back. Question state and
// delivery state are separate facts and stay side by side. An owner action whose answer was lost is kept
// (for this browser tab's session) with its target and offers checks that re-read the ledger; nothing here
// resends. The page holds no owner token: the server trades the one-time ticket in the URL fragment for a
// session and adds the token itself.
//
// The team's board is shown read-only beside it: tasks by state with what they wait on, and each member's
// unread notes. The daemon pushes no board snapshot (the board has its own revision), so the page reads
// `board_get` on each team snapshot and every BOARD_MS, and only a newer (generation, revision) replaces it.
//
// A notice that needs a person says what they can do, as text only (cli/watch.py's delivery_advice): an
// `unconfirmed` one names the owner's next step in a terminal (inspect, then resolve it landed or lost), and
// one `queued` behind a crash `leftover` names the notice left in the composer and the two safe human
// actions. The page stays read-only for both: resolving is the owner's explicit step, never a button here.
//
// Every word from the daemon reaches the page through `shown`, and only as text (text nodes, textContent,
// never HTML): a name or a question may hold markup, escape sequences or bidi overrides, and none of them may
// act on the page or reorder and hide what a person reads.

const SESSION_KEY = "harness.session";
const ATTEMPTS_KEY = "harness.attempts";
const RETRY_MS = 1000;
const EXCERPT = 120;
const BOARD_MS = 2000;
// Tasks by state: what is moving first, what is over last (spec/board-v1.md's task states).
const TASK_STATES = ["in_progress", "ready", "pending", "blocked", "done", "cancelled"];

const view = {
  teamId: null,
  team: null,
  revision: -1,
  selected: null,
  board: null,
  boardNote: "Not read yet.", // why no board is shown, while none is
  machineId: null,
  link: { state: "connecting", detail: "connecting…" },
  checks: new Map(), // what the last check of an exchange or attempt found, by its key
  attempts: JSON.parse(sessionStorage.getItem(ATTEMPTS_KEY) || "[]"),
};
let socket = null;
let subscription = null;
let refused = false;
let counter = 0;
let boardReading = false;
const pending = new Map();

const $ = (selector) => document.querySelector(selector);

// What core/terminal_text.py's terminal_safe(text, tabs=True) shows a terminal, for the page: each control
// character, bidi control and invisible separator is replaced by a visible sign (␛, ^C, \u202e), so a reader
// sees that it was there. tests/test_viewer_escaping.py keeps the two equal over every code point.
const BIDI_CONTROLS = new Set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069");
// Printable to Unicode, yet nothing on screen: variation selectors, fillers, the grapheme joiner, blank braille.
const EMOJI_PRESENTATION = new Set("\ufe0e\ufe0f");
const INVISIBLE = /^[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u2800\u3164\uffa0\ufe00-\ufe0f\u{e0100}-\u{e01ef}]$/u;
const NOT_PRINTED = /^[\p{C}\p{Z}]$/u; // Other (control, format, surrogate, private, unassigned), Separator

function visible(char) {
  const code = char.codePointAt(0);
  if (code === 0x1b) return "\u241b";
  if (code < 0x20) return `^${String.fromCharCode(code + 0x40)}`;
  if (code === 0x7f) return "^?";
  return code <= 0xffff ? `\\u${code.toString(16).padStart(4, "0")}` : `\\U${code.toString(16).padStart(8, "0")}`;
}

export function shown(value) {
  const text = String(value).replaceAll("\r\n", "\n");
  const printed = (char) => !(NOT_PRINTED.test(char) || BIDI_CONTROLS.has(char) || INVISIBLE.test(char));
  // One presentation selector right after a non-ASCII symbol draws it as an emoji (⚠️): kept, as in core.
  const presents = (char, before) => EMOJI_PRESENTATION.has(char) && before > "\x7f" && printed(before);
  const kept = (char, before) => char === "\n" || char === "\t" || char === " " || printed(char) || presents(char, before);
  const chars = Array.from(text);
  return chars.map((char, i) => (kept(char, i ? chars[i - 1] : "") ? char : visible(char))).join("");
}

function put(node, text) {
  node.textContent = shown(text);
}

function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "data") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child instanceof Node ? child : shown(child));
  }
  return node;
}

// --- the connection ---------------------------------------------------------------------------------------

function connect() {
  const ws = new WebSocket(`ws://${location.host}/ws`);
  socket = ws;
  ws.addEventListener("open", () => ws.send(JSON.stringify(hello())));
  ws.addEventListener("message", (event) => receive(JSON.parse(event.data)));
  ws.addEventListener("close", () => {
    socket = null;
    subscription = null;
    for (const settle of pending.values()) {
      settle({ uncertain: true, detail: "the connection closed before the daemon answered" });
    }
    pending.clear();
    if (refused) return;
    if (view.link.state === "live" || view.link.state === "connecting") {
      setLink("gone", "lost the connection to the page server");
    }
    setTimeout(connect, RETRY_MS);
  });
}

function hello() {
  const ticket = new URLSearchParams(location.hash.slice(1)).get("ticket");
  if (ticket) {
    history.replaceState(null, "", location.pathname); // spent: keep it out of history and bookmarks
    return { type: "hello", ticket };
  }
  return { type: "hello", session: sessionStorage.getItem(SESSION_KEY) || "" };
}

function receive(frame) {
  if (frame.type === "web_hello") {
    sessionStorage.setItem(SESSION_KEY, frame.session);
    view.teamId = frame.teamId;
    if (!view.team) put($("#team-name"), `Team ${frame.teamId}`);
  } else if (frame.type === "web_refused") {
    refused = true;
    setLink("refused", frame.detail);
  } else if (frame.type === "web_link") {
    setLink(frame.state, frame.detail);
    if (frame.state === "live") start();
  } else if (frame.type === "team_snapshot" && frame.requestId === subscription) {
    apply(frame.team);
  } else if (frame.type === "team_delta" && frame.requestId === subscription) {
    applyDelta(frame.delta);
  } else if (frame.type === "team_result" && pending.has(frame.requestId)) {
    const settle = pending.get(frame.requestId);
    pending.delete(frame.requestId);
    settle(frame);
  }
}

function send(action, fields, settle) {
  const requestId = `page-${Date.now().toString(36)}-${++counter}`;
  pending.set(requestId, settle);
  socket.send(JSON.stringify({ type: "team", requestId, action, ...fields }));
  return requestId;
}

// One request: resolves to the daemon's frame, or {unsent} (never left this page), or {uncertain}.
function request(action, fields = {}) {
  return new Promise((resolve) => {
    if (!socket || socket.readyState !== WebSocket.OPEN || view.link.state !== "live") {
      resolve({ unsent: true, detail: "not connected to the daemon" });
      return;
    }
    send(action, fields, resolve);
  });
}

function start() {
  subscription = send("subscribe", { deltas: true }, (frame) => {
    if (frame.error) setLink("refused", `${frame.error}: ${frame.detail}`);
    else if (frame.result) apply(frame.result);
  });
  request("capabilities").then((frame) => {
    if (frame.result) view.machineId = frame.result.machineId;
  });
  readBoard();
}

// One `board_get` at a time; a failed read keeps the board shown (or says why there is none).
async function readBoard() {
  if (boardReading || view.link.state !== "live") return;
  boardReading = true;
  const reply = await request("board_get");
  boardReading = false;
  if (reply.result) applyBoard(reply.result);
  else if (reply.error) {
    view.boardNote = `The board could not be read: ${reply.error}: ${reply.detail}`;
    renderBoard();
  }
}

function applyBoard(board) {
  if (!board || board.teamId !== view.teamId || !Number.isInteger(board.generation) || !Number.isInteger(board.revision)) return;
  const last = view.board;
  if (last && (board.generation < last.generation || (board.generation === last.generation && board.revision <= last.revision))) return;
  view.board = board;
  document.documentElement.dataset.boardRevision = `${board.generation}.${board.revision}`;
  renderBoard();
  if (view.team) renderRoster(view.team);
}

function apply(team) {
  if (!team || team.id !== view.teamId || !(team.revision > view.revision)) return;
  view.team = team;
  view.revision = team.revision;
  document.documentElement.dataset.revision = String(team.revision);
  render();
  readBoard();
}

// A delta carries the records changed since `baseRevision` (changed ones replace theirs, new ones are
// appended); one that does not follow the view shown (another read moved it) is replaced by a whole read.
function applyDelta(delta) {
  if (!delta || delta.id !== view.teamId || !(delta.revision > view.revision)) return;
  if (!view.team || delta.baseRevision !== view.revision) {
    request("get").then((frame) => apply(frame.result));
    return;
  }
  const team = { ...view.team };
  for (const field of ["id", "name", "state", "revision", "createdAt"]) team[field] = delta[field];
  for (const field of ["members", "exchanges"]) {
    const records = [...view.team[field]];
    const where = new Map(records.map((record, index) => [record.id, index]));
    for (const record of delta[field]) {
      if (where.has(record.id)) records[where.get(record.id)] = record;
      else records.push(record);
    }
    team[field] = records;
  }
  apply(team);
  const root = document.documentElement.dataset;
  root.deltas = String(Number(root.deltas || 0) + 1); // how the page followed: tests read it
}

function setLink(state, detail) {
  view.link = { state, detail };
  const node = $("#link");
  node.className = `link link-${state}`;
  const last = view.team ? ` Showing revision ${view.revision} as last known.` : "";
  put(node, {
    connecting: `Connecting: ${detail}`,
    live: `Live: ${detail}`,
    gone: `Daemon not reachable: ${detail}. Reconnecting…${last}`,
    incompatible: `The daemon is too old for this page: ${detail}`,
    refused: `Refused: ${detail}`,
  }[state] ?? detail);
  renderActions();
}

// --- owner actions and checks -----------------------------------------------------------------------------

function notice(text) {
  const node = $("#notice");
  put(node, text);
  node.hidden = false;
}

function saveAttempts() {
  sessionStorage.setItem(ATTEMPTS_KEY, JSON.stringify(view.attempts));
  renderAttempts();
}

async function act(action, fields, label) {
  const reply = await request(action, fields);
  if (reply.uncertain) {
    const key = `attempt-${Date.now().toString(36)}-${++counter}`;
    view.attempts.push({ key, action, fields, label, at: Date.now() });
    saveAttempts();
    notice(`${label}: the outcome is unknown (${reply.detail}). Check it below; do not repeat it blindly.`);
  } else if (reply.unsent) notice(`${label} was not sent: ${reply.detail}.`);
  else if (reply.error) notice(`${label} failed: ${reply.error}: ${reply.detail}`);
  else notice(`${label}: done.`);
}

async function checkConnection(key) {
  const reply = await request("capabilities");
  let text;
  if (reply.result) {
    view.machineId = reply.result.machineId;
    text = `The daemon answers: ${reply.result.protocol} revision ${reply.result.protocolRevision}, machine ${reply.result.machineId}.`;
  } else text = `No answer from the daemon: ${reply.detail || reply.error}.`;
  report(key, text);
}

// Re-read what an attempt or a notice was about, by its operation id (the question id) or the team.
async function checkSend(key, questionId) {
  if (!questionId) {
    const reply = await request("get");
    report(key, reply.result ? `The team is now ${reply.result.state} (revision ${reply.result.revision}).` : failure(reply));
    return;
  }
  const reply = await request("status", { questionId });
  if (!reply.result) {
    report(key, failure(reply));
    return;
  }
  const delivery = reply.result.delivery;
  report(
    key,
    `Question ${questionId} is ${reply.result.state}; its delivery is ${deliveryText(delivery)}` +
      (delivery && delivery.updatedAt ? ` (as of ${clock(delivery.updatedAt)}).` : "."),
  );
}

async function checkTeammate(key, memberId) {
  const members = await request("members");
  if (!members.result) {
    report(key, failure(members));
    return;
  }
  const member = members.result.members.find((m) => m.id === memberId);
  if (!member) {
    report(key, `No member ${memberId} in the roster.`);
    return;
  }
  let text = `${member.name} is ${member.state}; introduction ${deliveryText(member.introduction)}.`;
  const shown = await request("agent_show", { agentId: member.agentId });
  const desk = shown.result && shown.result.delivery;
  if (desk) {
    text += ` Its terminal looks ${desk.observed || "unobserved so far"}; ${desk.queued} queued, ${desk.held} held,`;
    text += desk.writing ? " a write in progress." : " no write in progress.";
  } else if (shown.error === "not_found") {
    text += view.machineId && member.machineId !== view.machineId
      ? ` Its terminal is on machine ${member.machineId}; ask it to run inbox or status.`
      : " No terminal is registered for it on this machine.";
  } else text += ` Terminal state unknown (${shown.detail || shown.error}).`;
  report(key, text);
}

function failure(reply) {
  return reply.error ? `${reply.error}: ${reply.detail}` : `No answer: ${reply.detail}.`;
}

function report(key, text) {
  if (key === null) {
    notice(text);
    return;
  }
  view.checks.set(key, `${clock(Date.now())}: ${text}`);
  render();
}

function checks(key, questionId, memberId) {
  return h(
    "div",
    { class: "checks" },
    h("button", { type: "button", class: "check", onclick: () => checkConnection(key) }, "Check connection"),
    h("button", { type: "button", class: "check", onclick: () => checkSend(key, questionId) }, "Check send"),
    memberId
      ? h("button", { type: "button", class: "check", onclick: () => checkTeammate(key, memberId) }, "Check teammate")
      : null,
    view.checks.has(key) ? h("p", { class: "check-result", role: "status" }, view.checks.get(key)) : null,
  );
}

// --- rendering --------------------------------------------------------------------------------------------

function clock(ms) {
  return typeof ms === "number" ? new Date(ms).toLocaleString() : "-";
}

function deliveryText(delivery) {
  if (!delivery) return "-";
  return delivery.reason ? `${delivery.state} (${delivery.reason})` : delivery.state;
}

function isUnconfirmed(delivery) {
  return Boolean(delivery) && delivery.state === "unconfirmed";
}

function isLeftover(delivery) {
  return Boolean(delivery) && delivery.state === "queued" && delivery.reason === "leftover";
}

// The team's notices to `memberId` whose delivery is unconfirmed (its introduction, questions to it, answers
// to its questions): the ones a crash may have left in its composer (cli/watch.py's unconfirmed_notices).
function unconfirmedNotices(team, memberId) {
  const found = team.members.filter((m) => m.id === memberId && isUnconfirmed(m.introduction)).map((m) => `${team.id}/${m.id}/introduction`);
  for (const e of team.exchanges) {
    if (e.to === memberId && isUnconfirmed(e.delivery)) found.push(`${team.id}/${e.id}/question`);
    if (e.from === memberId && isUnconfirmed(e.answerDelivery)) found.push(`${team.id}/${e.id}/answer`);
  }
  return found;
}

function command(teamId, words) {
  return h("code", { class: "mono" }, `harness team --team ${teamId} ${words}`);
}

// The owner's resolution of an unconfirmed notice, as the commands to run: never a button on this page.
function resolveSteps(teamId, noticeId) {
  return [
    "Owner's next step, in a terminal on the machine that runs the agent: ",
    command(teamId, `inspect ${noticeId}`),
    " looks for the notice in the agent's pane; then ",
    command(teamId, `resolve ${noticeId} --landed`),
    " if it reached the agent, or ",
    command(teamId, `resolve ${noticeId} --lost`),
    " to have it written once more (once, under a new write id). Never automatic.",
  ];
}

// A notice waiting behind a crash leftover: which notice sits in the composer, and the two safe actions.
function leftoverAdvice(team, memberId, id) {
  const held = unconfirmedNotices(team, memberId);
  const name = names().get(memberId) || memberId;
  return h(
    "div",
    { class: "warning leftover", id },
    h(
      "p",
      {},
      `Waiting on a leftover: ${name}'s composer holds `,
      held.length ? held.flatMap((noticeId, n) => [n ? ", " : "", h("code", { class: "mono leftover-notice" }, noticeId)]) : "a notice of another team",
      ", pasted by a write that a crash cut off before its Enter. Nothing is written to that terminal while it is there, and the daemon touches neither action.",
    ),
    h("p", {}, "A person at that terminal can:"),
    h(
      "ul",
      { class: "leftover-actions" },
      h("li", {}, "submit it: press Enter in the agent's pane (the notice then shows as accepted);"),
      h("li", {}, "or clear it: empty the agent's composer (the owner may then resolve that notice as lost)."),
    ),
  );
}

function excerpt(text) {
  const flat = shown(text || "").split(/\s+/).join(" ").trim(); // shown first: no separator vanishes
  return flat.length <= EXCERPT ? flat : `${flat.slice(0, EXCERPT - 1)}…`;
}

function names() {
  return new Map((view.team ? view.team.members : []).map((m) => [m.id, m.name]));
}

function render() {
  const team = view.team;
  if (!team) return;
  document.title = shown(`${team.name} · harness`);
  put($("#team-name"), team.name);
  const state = $("#team-state");
  put(state, team.state);
  state.className = `badge team-${team.state}`;
  put($("#revision"), `revision ${team.revision}`);
  renderActions();
  renderRoster(team);
  renderExchanges(team);
  renderDetail(team);
  renderBoard();
  renderAttempts();
}

function renderActions() {
  const live = view.link.state === "live" && view.team;
  const state = view.team && view.team.state;
  $("#btn-pause").disabled = !live || state !== "active";
  $("#btn-resume").disabled = !live || state !== "paused";
  $("#btn-archive").disabled = !live || state === "archived";
}

function renderRoster(team) {
  const unread = new Map((view.board ? view.board.members : []).map((m) => [m.id, m.unread]));
  $("#roster").replaceChildren(
    ...team.members.map((m) =>
      h(
        "li",
        { class: `member member-${m.state}`, data: { member: m.id } },
        h("div", { class: "member-head" }, h("strong", {}, m.name), h("span", { class: `badge member-state` }, m.state)),
        h("div", { class: "muted" }, m.role || "no role"),
        h("div", { class: "small" }, `introduction: ${deliveryText(m.introduction)}`),
        isUnconfirmed(m.introduction)
          ? h("div", { class: "small intro-next" }, resolveSteps(team.id, `${team.id}/${m.id}/introduction`))
          : null,
        isLeftover(m.introduction) ? leftoverAdvice(team, m.id, null) : null,
        unread.has(m.id) ? h("div", { class: "small member-notes" }, `board notes: ${unread.get(m.id)} unread`) : null,
        h("div", { class: "small muted" }, `${m.machineId} / ${m.agentId}`),
      ),
    ),
  );
}

function renderExchanges(team) {
  const who = names();
  const exchanges = [...team.exchanges].reverse();
  if (!exchanges.some((e) => e.id === view.selected)) view.selected = exchanges.length ? exchanges[0].id : null;
  $("#exchanges").replaceChildren(
    ...exchanges.map((e) =>
      h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            class: "exchange",
            "aria-pressed": String(e.id === view.selected),
            data: { exchange: e.id },
            onclick: () => select(e.id),
          },
          h(
            "span",
            { class: "states" },
            h("span", { class: `q-state q-${e.state}`, title: "question state" }, e.state),
            h("span", { class: `d-state d-${e.delivery ? e.delivery.state : "none"}`, title: "delivery state" }, deliveryText(e.delivery)),
          ),
          h("span", { class: "who" }, `${who.get(e.from) || e.from} → ${who.get(e.to) || e.to}`),
          h("span", { class: "excerpt" }, excerpt(e.text)),
        ),
      ),
    ),
  );
  if (!exchanges.length) $("#exchanges").append(h("li", { class: "muted" }, "No exchanges yet."));
}

function renderDetail(team) {
  const node = $("#detail");
  const e = team.exchanges.find((x) => x.id === view.selected);
  if (!e) {
    node.replaceChildren(h("p", { class: "muted" }, "No exchange selected."));
    return;
  }
  const who = names();
  const unconfirmed = isUnconfirmed(e.delivery);
  const answer = e.answer;
  const parts = [
    h("h2", {}, `${who.get(e.from) || e.from} → ${who.get(e.to) || e.to}`),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Question"),
      h("dd", {}, h("span", { class: `q-state q-${e.state}`, id: "detail-question-state" }, e.state)),
      h("dt", {}, "Delivery"),
      h("dd", {}, h("span", { class: `d-state d-${e.delivery ? e.delivery.state : "none"}`, id: "detail-delivery-state" }, deliveryText(e.delivery))),
      h("dt", {}, "Operation id"),
      h("dd", { class: "mono" }, e.id),
      h("dt", {}, "Asked"),
      h("dd", {}, clock(e.createdAt)),
      h("dt", {}, "Deadline"),
      h("dd", {}, clock(e.deadlineAt)),
    ),
    unconfirmed
      ? h(
          "div",
          { class: "warning", id: "unconfirmed" },
          h("p", {}, "Delivery unconfirmed: the notice might have reached the terminal. Do not resend; check instead."),
          h("p", { id: "unconfirmed-next" }, resolveSteps(team.id, e.id)),
          checks(`exchange-${e.id}`, e.id, e.to),
        )
      : null,
    isLeftover(e.delivery) ? leftoverAdvice(team, e.to, "leftover") : null,
    h("h3", {}, "Question"),
    h("p", { class: "text", id: "question-text" }, e.text),
    e.context ? h("h3", {}, "Context") : null,
    e.context ? h("p", { class: "text" }, e.context) : null,
    h("h3", {}, "Answer"),
    answer
      ? h(
          "div",
          { id: "answer" },
          h("p", { class: "muted" }, `by ${who.get(answer.author) || answer.author} at ${clock(answer.at)}${answer.late ? " (late)" : ""}`),
          h("p", { class: "text", id: "answer-text" }, answer.text),
          answer.evidence && answer.evidence.length
            ? h("ul", { class: "evidence", id: "evidence" }, answer.evidence.map((ref) => h("li", { class: "mono" }, ref)))
            : null,
        )
      : h("p", { class: "muted", id: "no-answer" }, "No answer yet."),
    e.state === "open"
      ? h(
          "div",
          { class: "actions" },
          h("button", { type: "button", id: "btn-cancel", onclick: () => act("cancel", { questionId: e.id }, `Cancel ${e.id}`) }, "Cancel question"),
        )
      : null,
  ];
  node.replaceChildren(...parts.filter((part) => part));
}

function renderBoard() {
  const board = view.board;
  if (!board) {
    put($("#board-summary"), view.boardNote);
    $("#tasks").replaceChildren();
    return;
  }
  const who = names();
  const titles = new Map(board.tasks.map((t) => [t.id, t.title || t.id]));
  const rank = (task) => (TASK_STATES.includes(task.state) ? TASK_STATES.indexOf(task.state) : TASK_STATES.length);
  const tasks = [...board.tasks].sort((a, b) => rank(a) - rank(b)); // stable: board order within a state
  put($("#board-summary"), `Revision ${board.revision}: ${board.tasks.length} tasks, ${board.notes} notes. Read-only here.`);
  const owner = (task) => {
    if (!task.owner) return "anyone";
    return task.owner.kind === "role" ? `role:${task.owner.name}` : who.get(task.owner.name) || task.owner.name;
  };
  $("#tasks").replaceChildren(
    ...tasks.map((t) =>
      h(
        "li",
        { class: "task", data: { task: t.id } },
        h("span", { class: `t-state t-${t.state}`, title: "task state" }, t.state),
        h("span", { class: "task-title" }, excerpt(t.title)),
        h("span", { class: "small task-who" }, `may claim: ${owner(t)} · claimant: ${t.claimant ? who.get(t.claimant) || t.claimant : "none"}`),
        (t.dependencies || []).length
          ? h("span", { class: "small muted task-after" }, `after: ${t.dependencies.map((d) => excerpt(titles.get(d) || d)).join(", ")}`)
          : null,
        h("span", { class: "small muted mono" }, t.id),
      ),
    ),
  );
  if (!tasks.length) $("#tasks").append(h("li", { class: "muted" }, "No tasks yet."));
}

function renderAttempts() {
  const section = $("#attempts");
  section.hidden = view.attempts.length === 0;
  $("#attempt-list").replaceChildren(
    ...view.attempts.map((a) => {
      const questionId = a.fields.questionId || null;
      const exchange = view.team && questionId ? view.team.exchanges.find((x) => x.id === questionId) : null;
      return h(
        "li",
        { class: "attempt", data: { attempt: a.key } },
        h("p", {}, h("strong", {}, a.label), ` at ${clock(a.at)}: outcome unknown.`),
        checks(a.key, questionId, exchange ? exchange.to : null),
        h("button", { type: "button", class: "dismiss", onclick: () => dismiss(a.key) }, "Dismiss"),
      );
    }),
  );
}

function dismiss(key) {
  view.attempts = view.attempts.filter((a) => a.key !== key);
  saveAttempts();
}

function select(id) {
  view.selected = id;
  render();
  const button = document.querySelector(`[data-exchange="${CSS.escape(id)}"]`);
  if (button) button.focus();
}

function step(delta) {
  if (!view.team) return;
  const ids = [...view.team.exchanges].reverse().map((e) => e.id);
  const at = ids.indexOf(view.selected);
  const next = ids[Math.min(ids.length - 1, Math.max(0, at + delta))];
  if (next) select(next);
}

document.addEventListener("keydown", (event) => {
  if (event.target.closest && event.target.closest("input, textarea")) return;
  if (event.key === "j" || event.key === "ArrowDown") step(1);
  else if (event.key === "k" || event.key === "ArrowUp") step(-1);
  else return;
  event.preventDefault();
});

$("#btn-pause").addEventListener("click", () => act("pause", {}, "Pause"));
$("#btn-resume").addEventListener("click", () => act("resume", {}, "Resume"));
$("#btn-archive").addEventListener("click", () => {
  if (confirm("Archive this team? Its record stays; pending work is cancelled.")) act("archive", {}, "Archive");
});
$("#btn-check-connection").addEventListener("click", () => checkConnection(null));

renderAttempts();
setInterval(readBoard, BOARD_MS);
connect();
