# `harness eval run`: prove an agent change by running task families N times per engine and judging each
# run by a script, not by reading transcripts (seed 004's benchmark CLI). A family is a directory with
# brief.md (the task), `setup` (run first in a fresh, empty working copy) and `judge` (run there last; exit 0
# is a pass). Each run gets its own temporary working copy, so no run sees another's leftovers, and leaves a
# record (OUT/runs/FAMILY/ENGINE/N.json) and a trace (OUT/runs/FAMILY/ENGINE/N.trace/, the trace-v1 line
# format, redacted, readable with `harness trace`) of every step's exit status, time and output.
#
# An engine is run non-interactively through a small adapter: `claude -p`, `codex exec`, `gemini -p` (the
# user's providers; `claude=BIN` names the binary), or `script:PATH`, a shell script standing in for an
# engine (it gets the brief on stdin). `--offline` runs the engine step inside a private network namespace
# (`unshare -n`, loopback only); `--model-server CMD` starts a model server there first (a scripted model
# for offline runs) and waits until it listens on loopback, and the end of the step ends it.
#
# `--mode session` (the default; issue 22: "each run is a coordination session of its own") runs the engine
# step as a `run` session instead (spec/session-v1.md section 9): the eval starts a daemon on a private data
# directory (OUT/daemon) and stops it at the end; each run starts its engine with `harness agent start` in
# that directory's own tmux server, its cwd the run's working copy, then `harness session run --mode run`
# gives it the family's brief until it concludes. The session's trace stays in OUT/daemon (its path in the
# record), the run's time is the session's, start to summary, and its turns the session's prompts that
# reached the engine. `--mode process` keeps the plain non-interactive adapters above.
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from harness.core.bounded_json import JsonRefused, parse_json
from harness.core.delivery import DeliveryState
from harness.core.eval_stats import RunOutcome, summarize
from harness.core.redaction import Redactor
from harness.io.fileops import FileOps, UnfitFile, replace_durably
from harness.io.trace_files import encode_line, file_name, read_trace, session_trace_dir, team_trace_dir

BRIEF: Final = "brief.md"
SETUP: Final = "setup"
JUDGE: Final = "judge"
RUNS_DIR: Final = "runs"
SETUP_TIMEOUT: Final = 300.0
JUDGE_TIMEOUT: Final = 300.0
MAX_BRIEF_BYTES: Final = 256 * 1024
MAX_RECORD_BYTES: Final = 1 << 20
# The turns a run may have and the seconds it may take, as a record holds them: an engine prints what it
# likes ({"turns": 10**3999} once ended every report with an OverflowError, as a mean is a float), and a
# record may be edited, so anything outside is unknown turns from an engine, and no run record at all.
MAX_TURNS: Final = 10**6
MAX_SECONDS: Final = 10**9
# The tail of each step's output the trace keeps: enough to see why a run failed, bounded per run.
KEPT_OUTPUT: Final = 64 * 1024
_SLUG: Final = re.compile(r"[^A-Za-z0-9._-]+")
# Real engines, run the way each documents for scripts; "{brief}" is replaced by the task.
ADAPTERS: Final[Mapping[str, tuple[str, ...]]] = {
    "claude": ("claude", "-p", "{brief}", "--output-format", "json", "--dangerously-skip-permissions"),
    "codex": (
        "codex",
        "exec",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "{brief}",
    ),
    "gemini": ("gemini", "-p", "{brief}", "--yolo"),
}
SCRIPT_PREFIX: Final = "script:"
MODEL_READY_TIMEOUT: Final = 30
# The engine step inside its own network namespace with only loopback up; with a model server, that first,
# until it accepts connections on its port (bash's /dev/tcp), its output in a log beside the run's record.
_OFFLINE: Final = """\
ip link set lo up 2>/dev/null
if [ -n "${HARNESS_EVAL_MODEL_SERVER:-}" ]; then
  bash -c "$HARNESS_EVAL_MODEL_SERVER" >"$HARNESS_EVAL_MODEL_LOG" 2>&1 </dev/null &
  for _ in $(seq $((HARNESS_EVAL_MODEL_WAIT * 20))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$HARNESS_EVAL_MODEL_PORT") 2>/dev/null && break
    sleep 0.05
  done
fi
exec "$@"
"""
OFFLINE_WRAPPER: Final = ("unshare", "-n", "--", "bash", "-c", _OFFLINE, "engine")
MODES: Final = ("session", "process")
DAEMON_DIR: Final = "daemon"
HARNESS: Final = (sys.executable, "-m", "harness.cli.main")
HARNESS_TIMEOUT: Final = 120.0  # a daemon or agent start, stop or removal on a loaded machine
# A desk trace event of a question notice that reached a pane (the engine's when `memberId` names it).
DELIVERED: Final = {"type": "notice", "kind": "question", "state": "delivered"}
SCRIPTED: Final = "scripted"  # the agent engine a script:PATH engine runs as in a session
AGENT_CRASHED: Final = "agent_crashed:"  # how a session's reason says its engine ended (spec/session-v1.md)
# Delivery states of a notice the desk never wrote into the terminal (delivery-v1).
NEVER_WRITTEN: Final = frozenset(
    state.value
    for state in (
        DeliveryState.QUEUED,
        DeliveryState.HELD,
        DeliveryState.REJECTED,
        DeliveryState.WITHDRAWN,
        DeliveryState.EXPIRED,
    )
)
# The run variables a session's engine gets on its command line: its tmux server's environment is the one
# the first run started it with.
RUN_VARIABLES: Final = ("HARNESS_EVAL_FAMILY", "HARNESS_EVAL_RUN", "HARNESS_EVAL_ENGINE")


class EvalError(Exception):
    """Input that cannot be evaluated: a family without its files, an unknown engine, a used --out."""


@dataclass(frozen=True)
class Family:
    name: str
    root: Path
    brief: str


@dataclass(frozen=True)
class Engine:
    """How one engine is run: `name` as reports show it, the argv (with "{brief}" for the task), and
    whether the brief also comes on stdin (a script engine reads it there)."""

    name: str
    argv: tuple[str, ...]
    brief_on_stdin: bool
    agent_engine: str  # what `harness agent start --engine` runs it as in a session
    custom_binary: bool = False

    def command(self, brief: str) -> list[str]:
        return [brief if word == "{brief}" else word for word in self.argv]


@dataclass(frozen=True)
class Step:
    """One process of a run: its exit status (None when it timed out or could not start)."""

    exit: int | None
    seconds: float
    stdout: str
    stderr: str
    error: str | None = None

    def event(self, kind: str) -> dict[str, object]:
        return {
            "type": kind,
            "exit": self.exit,
            "seconds": round(self.seconds, 3),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "error": self.error,
        }


def load_family(path: Path) -> Family:
    root = path.resolve()
    if not root.is_dir():
        raise EvalError(f"no task family at {path} (a directory with {BRIEF}, {SETUP} and {JUDGE})")
    for name in (SETUP, JUDGE):
        if not os.access(root / name, os.X_OK) or not (root / name).is_file():
            raise EvalError(f"task family {path} has no executable `{name}` script")
    try:
        data = (root / BRIEF).read_bytes()
    except OSError as error:
        raise EvalError(f"task family {path} has no readable {BRIEF}: {error.strerror}") from None
    if len(data) > MAX_BRIEF_BYTES:
        raise EvalError(f"{root / BRIEF} is larger than {MAX_BRIEF_BYTES} bytes")
    return Family(root.name, root, data.decode("utf-8", errors="replace"))


def engine(spec: str) -> Engine:
    """The Engine an --engines entry names: claude, codex, gemini or script:PATH."""
    name, _, binary = spec.partition("=")
    if name in ADAPTERS:
        argv = ADAPTERS[name]
        return Engine(name, (binary, *argv[1:]) if binary else argv, False, name, custom_binary=bool(binary))
    if spec.startswith(SCRIPT_PREFIX):
        script = Path(spec[len(SCRIPT_PREFIX) :]).resolve()
        if not (script.is_file() and os.access(script, os.X_OK)):
            raise EvalError(f"{spec}: not an executable script")
        return Engine(f"{SCRIPT_PREFIX}{script.stem}", (str(script),), True, SCRIPTED)
    raise EvalError(f"unknown engine {spec!r}; one of {', '.join(ADAPTERS)} (=BIN) or {SCRIPT_PREFIX}PATH")


def slug(name: str) -> str:
    return _SLUG.sub("-", name).strip("-") or "engine"


def run_step(argv: Sequence[str], cwd: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> Step:
    """Run one process in its own process group. The group is killed at the timeout, and when the process
    ends, so nothing it started in the background (a model server, a stray child) outlives the step. Its
    output goes to files, of which the step keeps the tails: an engine that prints without end costs disk,
    not memory, and a background child holding the output open cannot stall the step."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
        given.write(stdin)
        given.seek(0)
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=given,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as error:
            return Step(None, time.monotonic() - started, "", "", f"cannot start {argv[0]}: {error.strerror}")
        try:
            status: int | None = process.wait(timeout=timeout)
            problem = None
        except subprocess.TimeoutExpired:
            _end_group(process.pid)
            process.wait()
            status, problem = None, f"timed out after {timeout:g} s"
        _end_group(process.pid)
        return Step(status, time.monotonic() - started, _tail(out), _tail(err), problem)


def _tail(handle: IO[bytes]) -> str:
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - KEPT_OUTPUT))
    return handle.read().decode("utf-8", errors="replace")


def _end_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def turns(stdout: str) -> int | None:
    """The turns an engine reported: the last JSON object line of its output with `num_turns` (claude -p
    --output-format json) or `turns` (script engines); None (unknown) when that count is outside
    0..MAX_TURNS, which no run has."""
    for line in reversed(stdout.strip().split("\n")):  # not splitlines: JSON may hold a raw U+2028
        value = parse_json(line.strip(), max_bytes=KEPT_OUTPUT) if line.strip().startswith("{") else None
        if isinstance(value, dict):
            for key in ("num_turns", "turns"):
                count = value.get(key)
                if isinstance(count, int) and not isinstance(count, bool):
                    return count if 0 <= count <= MAX_TURNS else None
    return None


@dataclass(frozen=True)
class Plan:
    """What `harness eval run` runs, and how."""

    families: tuple[Family, ...]
    engines: tuple[Engine, ...]
    runs: int
    out: Path
    engine_timeout: float
    offline: bool
    model_server: str | None = None
    model_port: int = 8765
    mode: str = "session"

    @property
    def home(self) -> Path:
        """The eval's private data directory (session mode): its daemon, tmux server and session traces."""
        return self.out / DAEMON_DIR


def make_plan(
    family_dirs: Sequence[Path],
    specs: Sequence[str],
    *,
    runs: int,
    out: Path,
    engine_timeout: float,
    offline: bool,
    model_server: str | None = None,
    model_port: int = 8765,
    mode: str = "session",
) -> Plan:
    if mode not in MODES:
        raise EvalError(f"unknown --mode {mode!r}; one of {', '.join(MODES)}")
    if mode == "session" and offline:
        raise EvalError("--offline runs one engine process in a namespace: add --mode process")
    if runs < 1:
        raise EvalError("--runs must be at least 1")
    if model_server is not None and not offline:
        raise EvalError("--model-server runs inside the private network namespace: add --offline")
    if not 0 < model_port < 65536:
        raise EvalError("--model-port must be a TCP port")
    if not (math.isfinite(engine_timeout) and engine_timeout > 0):  # NaN compares false with everything
        raise EvalError("--timeout must be a positive number of seconds")
    families = tuple(load_family(path) for path in family_dirs)
    if not families:
        raise EvalError("name at least one task family")
    names = [family.name for family in families]
    if len(set(names)) != len(names):
        raise EvalError(f"task families need distinct directory names: {', '.join(names)}")
    engines = tuple(engine(spec) for spec in specs)
    if not engines:
        raise EvalError("name at least one engine with --engines")
    if len({slug(e.name) for e in engines}) != len(engines):
        raise EvalError("engines need distinct names")
    if mode == "session" and any(e.custom_binary for e in engines):
        raise EvalError("NAME=BIN names a binary for --mode process; a session starts the installed engine")
    if (out / RUNS_DIR).exists():
        raise EvalError(f"{out} already holds an eval; give a new --out")
    return Plan(
        families, engines, runs, out.resolve(), engine_timeout, offline, model_server, model_port, mode
    )


class _Trace:
    """The trace of one run, as trace-v1 lines, redacted; written whole at the end of the run."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.lines: list[bytes] = []

    def emit(self, event: Mapping[str, object]) -> None:
        redacted = self.redactor.value(dict(event))
        assert isinstance(redacted, dict)
        self.lines.append(encode_line("orchestrator", len(self.lines) + 1, redacted))

    def write(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, parents=True)
        path = directory / file_name(1)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"".join(self.lines))


def run_one(plan: Plan, family: Family, which: Engine, index: int, redactor: Redactor) -> dict[str, object]:
    """One run of `family` by `which` in a fresh working copy; returns (and writes) its record."""
    base = plan.out / RUNS_DIR / family.name / slug(which.name)
    trace = _Trace(redactor)
    workdir = Path(tempfile.mkdtemp(prefix=f"harness-eval-{family.name}-"))
    base.mkdir(parents=True, exist_ok=True)
    model_log = base / f"{index}.model.log"
    env = {
        **os.environ,
        "HARNESS_EVAL_FAMILY": str(family.root),
        "HARNESS_EVAL_RUN": str(index),
        "HARNESS_EVAL_ENGINE": which.name,
    }
    if plan.model_server is not None:
        env |= {
            "HARNESS_EVAL_MODEL_SERVER": plan.model_server,
            "HARNESS_EVAL_MODEL_PORT": str(plan.model_port),
            "HARNESS_EVAL_MODEL_LOG": str(model_log),
            "HARNESS_EVAL_MODEL_WAIT": str(MODEL_READY_TIMEOUT),
        }
    trace.emit({"type": "run_start", "family": family.name, "engine": which.name, "run": index})
    try:
        setup = run_step([str(family.root / SETUP)], workdir, env, b"", SETUP_TIMEOUT)
        trace.emit(setup.event("setup"))
        engine_step = judge = None
        session: dict[str, object] = {}
        if setup.exit == 0 and plan.mode == "session":
            engine_step, session = run_session(plan, family, which, index=index, workdir=workdir, env=env)
            trace.emit({**engine_step.event("engine"), "session": session})
            if engine_step.exit is not None:
                judge = run_step([str(family.root / JUDGE)], workdir, env, b"", JUDGE_TIMEOUT)
                trace.emit(judge.event("judge"))
        elif setup.exit == 0:
            argv = which.command(family.brief)
            if plan.offline:
                argv = [*OFFLINE_WRAPPER, *argv]
            stdin = family.brief.encode() if which.brief_on_stdin else b""
            engine_step = run_step(argv, workdir, env, stdin, plan.engine_timeout)
            event = engine_step.event("engine")
            if model_log.exists():
                with open(model_log, "rb") as log:
                    event["modelLog"] = _tail(log)
            trace.emit(event)
            if engine_step.exit is not None:
                judge = run_step([str(family.root / JUDGE)], workdir, env, b"", JUDGE_TIMEOUT)
                trace.emit(judge.event("judge"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    status, reason = _verdict(setup, engine_step, judge)
    if plan.mode == "session" and engine_step is not None and engine_step.exit is not None and not session:
        status, reason = "error", f"no session: {_last_line(engine_step)}"
    record: dict[str, object] = {
        "family": family.name,
        "engine": which.name,
        "run": index,
        "status": status,
        "reason": reason,
        "seconds": round(engine_step.seconds, 3) if engine_step else 0.0,
        "turns": turns(engine_step.stdout) if engine_step else None,
        "setupExit": setup.exit,
        "engineExit": engine_step.exit if engine_step else None,
        "judgeExit": judge.exit if judge else None,
        "trace": str(base / f"{index}.trace"),
        **session_fields(plan, session),
    }
    trace.emit({"type": "summary", **{key: record[key] for key in ("status", "reason", "seconds", "turns")}})
    trace.write(base / f"{index}.trace")
    path = base / f"{index}.json"
    data = (json.dumps(record, indent=2) + "\n").encode()
    replace_durably(FileOps(), path, data, path.with_name(path.name + ".tmp"), mode=None)
    return record


def _harness(plan: Plan, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Step:
    """One `harness` command on the eval's data directory (its options before a `--` that ends them);
    variables naming another directory or daemon are left out, the run's own kept."""
    own = {k: v for k, v in env.items() if not k.startswith("HARNESS_") or k in RUN_VARIABLES}
    cut = argv.index("--") if "--" in argv else len(argv)
    words = [*HARNESS, *argv[:cut], "--home", str(plan.home), "--json", *argv[cut:]]
    return run_step(words, plan.out, own, b"", timeout)


def _document(step: Step) -> dict[str, object]:
    value = parse_json(step.stdout.strip(), max_bytes=KEPT_OUTPUT) if step.stdout.strip() else None
    return value if isinstance(value, dict) else {}


def _last_line(step: Step) -> str:
    detail = _document(step).get("detail")
    lines = (step.stderr or step.stdout or step.error or "no output").strip().splitlines()
    return str(detail) if detail else lines[-1] if lines else "no output"


def session_id(family: Family, which: Engine, index: int) -> str:
    """The run's session id, also its agent's name: short (a session id is at most 48 characters), and
    distinct per family, engine and run."""
    digest = hashlib.sha256(f"{family.name}\0{which.name}".encode()).hexdigest()[:12]
    return f"eval-{digest}-{index}"


def run_session(
    plan: Plan, family: Family, which: Engine, *, index: int, workdir: Path, env: Mapping[str, str]
) -> tuple[Step, dict[str, object]]:
    """The engine step as a `run` session: the engine started in the eval's tmux server with the working
    copy as its cwd, then `harness session run --mode run` with the family's brief until the session ends
    or the engine's timeout. The step and the session's view (empty when no session ended); the agent is
    removed, its tmux session ended, whatever happened."""
    sid = session_id(family, which, index)
    program = ["--", "env", *(f"{k}={env[k]}" for k in RUN_VARIABLES), which.argv[0]]
    start = ["agent", "start", "--engine", which.agent_engine, "--name", sid, "--cwd", str(workdir)]
    started = _harness(
        plan, [*start, *(program if which.agent_engine == SCRIPTED else [])], env, HARNESS_TIMEOUT
    )
    if started.exit != 0:
        return Step(None, started.seconds, "", "", f"cannot start {which.name}: {_last_line(started)}"), {}
    try:
        argv = ["session", "run", "--mode", "run", "--lead", f"{sid}={which.agent_engine}", "--id", sid]
        step = _harness(plan, [*argv, "--brief", str(family.root / BRIEF)], env, plan.engine_timeout)
        view = _document(step) if step.exit is not None else {}
        crashed = view.get("termination") == "stopped" and str(view.get("reason")).startswith(AGENT_CRASHED)
        if crashed and _brief_never_written(plan, sid, env):
            ended = f"cannot start {which.name}: it ended before its brief reached it ({view.get('reason')})"
            return Step(None, step.seconds, step.stdout, step.stderr, ended), {}
    finally:
        _harness(plan, ["agent", "remove", sid], env, HARNESS_TIMEOUT)
    return step, (view if "termination" in view else {})


def _brief_never_written(plan: Plan, sid: str, env: Mapping[str, str]) -> bool:
    """Whether the session's desk certainly never wrote the brief into the engine's terminal, as the desk
    itself says: an engine that ended (its session stopped `agent_crashed`) before then never got its task,
    whenever it ended (at once, or after it joined), so its run is an error rather than a failure. A notice
    that may have reached it (written, unconfirmed, delivered), or a desk that cannot say, is a judged run;
    so is an engine alive but never ready for its brief (a session bound stops it): that is a failure."""
    asked = ["team", "--team", sid, "delivery", f"{sid}.brief"]
    checked = _document(_harness(plan, asked, env, HARNESS_TIMEOUT))
    delivery = checked.get("delivery")
    state = delivery.get("state") if isinstance(delivery, dict) else None
    return checked.get("held") is True and state in NEVER_WRITTEN


def session_fields(plan: Plan, session: Mapping[str, object]) -> dict[str, object]:
    """What a run record takes from its session: the session's time from its start to its summary, its
    turns, how it ended, and where its trace is kept."""
    if not session:
        return {}
    sid = str(session["sessionId"])
    started, ended = session.get("startedAt"), session.get("endedAt")
    # Wall-clock times: a clock stepped back between them is no negative run, which a record never holds.
    seconds = max(0, ended - started) / 1000 if isinstance(started, int) and isinstance(ended, int) else 0.0
    return {
        "seconds": round(seconds, 3),
        "turns": session_turns(
            plan.home, sid, wait=30.0 if session.get("termination") == "concluded" else 0.0
        ),
        "session": {key: session.get(key) for key in ("sessionId", "termination", "reason", "summary")},
        "sessionTrace": str(session_trace_dir(plan.home, sid)),
    }


def session_turns(home: Path, sid: str, *, wait: float) -> int:
    """The session's prompts that reached its engine, each a turn: the brief and any reminder, as the
    delivery desk recorded them in the session team's trace. The daemon writes its trace in the background,
    so the brief's delivery is waited for up to `wait` seconds (it is there once the engine concluded on the
    brief's notice; a session that stopped may have ended before it)."""
    brief = f"{sid}.brief"
    deadline = time.monotonic() + wait
    while True:
        delivered = set()
        with contextlib.suppress(FileNotFoundError):
            for line in read_trace(team_trace_dir(home, sid)):
                event = line.event
                if event.items() >= DELIVERED.items() and event.get("memberId") == sid:
                    delivered.add(str(event.get("exchangeId")))
        if brief in delivered or time.monotonic() > deadline:
            return len(delivered)
        time.sleep(0.2)


def _verdict(setup: Step, engine_step: Step | None, judge: Step | None) -> tuple[str, str]:
    """`passed` or `failed` (the engine's result, judged), or `error` when the run never got to be judged
    fairly (its setup failed, the engine could not start): errors do not count as runs in pass@k."""
    if setup.exit != 0:
        return "error", f"setup failed ({setup.error or f'exit {setup.exit}'})"
    assert engine_step is not None
    if engine_step.exit is None:
        if engine_step.error and engine_step.error.startswith("cannot start"):
            return "error", engine_step.error
        return "failed", f"engine {engine_step.error}"
    if judge is None or judge.exit is None:
        return "error", f"judge {judge.error if judge else 'did not run'}"
    return ("passed", "judge exit 0") if judge.exit == 0 else ("failed", f"judge exit {judge.exit}")


def run_eval(
    plan: Plan, redactor: Redactor, progress: Callable[[dict[str, object]], None]
) -> list[dict[str, object]]:
    """Every run of the plan, family by family, engine by engine; `progress` sees each record."""
    (plan.out / RUNS_DIR).mkdir(parents=True)
    records = []
    with _daemon(plan):
        for family in plan.families:
            for which in plan.engines:
                for index in range(plan.runs):
                    record = run_one(plan, family, which, index, redactor)
                    progress(record)
                    records.append(record)
    return records


@contextlib.contextmanager
def _daemon(plan: Plan) -> Iterator[None]:
    """In session mode, the eval's own daemon on its private data directory, stopped with its agents (and
    their tmux server) at the end, whatever happened."""
    if plan.mode != "session":
        yield
        return
    started = _harness(plan, ["daemon", "start"], os.environ, HARNESS_TIMEOUT)
    if started.exit != 0:
        raise EvalError(f"cannot start the eval's daemon in {plan.home}: {_last_line(started)}")
    try:
        yield
    finally:
        _harness(plan, ["daemon", "stop", "--agents"], os.environ, HARNESS_TIMEOUT)


def read_records(out: Path) -> Iterator[dict[str, object]]:
    """The run records under OUT/runs; a record that is not one is an EvalError naming the file. An OUT may
    come from elsewhere: a record is read only if it is a regular file of at most MAX_RECORD_BYTES, known
    before it is read (a FIFO blocked the report forever, a sparse 3 GiB file cost its size in memory)."""
    runs = out / RUNS_DIR
    if not runs.is_dir():
        raise EvalError(f"no eval at {out} (no {RUNS_DIR}/ directory)")
    ops = FileOps()
    for path in sorted(runs.glob("*/*/*.json")):
        try:
            data = ops.read_bytes(path, MAX_RECORD_BYTES)
        except UnfitFile as error:
            raise EvalError(f"{path} is not a run record: {error.reason}") from None
        value = parse_json(data, max_bytes=MAX_RECORD_BYTES)
        if isinstance(value, JsonRefused) or not isinstance(value, dict):
            raise EvalError(f"{path} is not a run record")
        if (why := _unfit_figures(value)) is not None:
            raise EvalError(f"{path} is not a run record: {why}")
        yield value


def _unfit_figures(record: Mapping[str, object]) -> str | None:
    """Why the record's seconds or turns are none a run has, or None when they are fit to average."""
    seconds, count = record.get("seconds"), record.get("turns")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "its seconds are not a number"
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        return f"its seconds are not within 0..{MAX_SECONDS}"
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
        return "its turns are not a whole number"
    if count is not None and not 0 <= count <= MAX_TURNS:
        return f"its turns are not within 0..{MAX_TURNS}"
    return None


def _outcome(record: Mapping[str, object]) -> RunOutcome:
    """A record `read_records` checked: its seconds a finite number and its turns a count, both in range."""
    seconds, count = record["seconds"], record.get("turns")
    assert isinstance(seconds, int | float) and (count is None or isinstance(count, int))
    return RunOutcome(record.get("status") == "passed", float(seconds), count)


def report(out: Path, ks: Sequence[int] | None = None) -> dict[str, object]:
    """Per family and engine: pass@1 and pass@k (unbiased, exact), the Wilson interval of pass@1, mean
    time and turns, and the traces of the failing runs."""
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for record in read_records(out):
        groups.setdefault((str(record.get("family")), str(record.get("engine"))), []).append(record)
    rows: list[dict[str, object]] = []
    for (family, engine_name), records in sorted(groups.items()):
        judged = [r for r in records if r.get("status") in ("passed", "failed")]
        row: dict[str, object] = {
            "family": family,
            "engine": engine_name,
            "n": len(judged),
            "passed": sum(r.get("status") == "passed" for r in judged),
            "errors": len(records) - len(judged),
            "failingTraces": [
                trace
                for r in records
                if r.get("status") != "passed"
                for trace in (r.get("trace"), r.get("sessionTrace"))
                if trace is not None
            ],
        }
        if judged:
            summary = summarize([_outcome(r) for r in judged], ks)
            row["passAtK"] = {
                str(k): {"value": float(value), "exact": str(value)} for k, value in summary.pass_at.items()
            }
            row["pass1Interval"] = [round(bound, 4) for bound in summary.pass1_interval]
            row["meanSeconds"] = round(summary.mean_seconds, 3)
            row["meanTurns"] = summary.mean_turns
        rows.append(row)
    return {"out": str(out), "groups": rows}
