# `harness eval run` and `harness eval report` as real commands over real processes: two task families
# (tests/fixtures/eval_families) by two shell scripts standing in for engines, five runs each, the engine
# step inside `unshare -n`; pass@k is checked against the estimator computed by hand here. The same families
# and engines run as sessions (the default mode): the eval's own daemon, each engine a scripted member in
# that daemon's tmux server, each run a `run` session whose trace the record keeps.
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from harness.core.eval_stats import wilson
from harness.io import eval_runner
from harness.io.trace_files import read_trace
from tests.test_cli_e2e import HARNESS

FAMILIES = Path(__file__).parent / "fixtures" / "eval_families"
CAREFUL = f"script:{FAMILIES / 'engines' / 'script-careful.sh'}"
HASTY = f"script:{FAMILIES / 'engines' / 'script-hasty.sh'}"


def harness(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return f"script:{path}"


def trace_events(trace_dir: str) -> list[dict[str, object]]:
    lines = (Path(trace_dir) / "trace-000000000001.ndjson").read_text().splitlines()
    return [json.loads(line)["event"] for line in lines]


# By hand, 1 - C(n-c, k) / C(n, k) with n = 5:
#   c = 5: 1 for every k.
#   c = 4: k=1 4/5; k>=2 1 (C(1,2) = 0).
#   c = 2: k=1 2/5; k=2 1 - C(3,2)/C(5,2) = 1 - 3/10; k=3 1 - C(3,3)/C(5,3) = 1 - 1/10; k>=4 1.
ALL_PASS = {1: Fraction(1), 2: Fraction(1), 3: Fraction(1), 4: Fraction(1), 5: Fraction(1)}
EXPECTED = {
    ("fix-typo", "script:script-careful"): (5, ALL_PASS, 2.0),
    ("fix-typo", "script:script-hasty"): (
        4,
        {1: Fraction(4, 5), 2: Fraction(1), 3: Fraction(1), 4: Fraction(1), 5: Fraction(1)},
        (1 + 2 + 2 + 2 + 2) / 5,  # run 0 does nothing: one turn
    ),
    ("add-farewell", "script:script-careful"): (5, ALL_PASS, 3.0),
    ("add-farewell", "script:script-hasty"): (
        2,
        {1: Fraction(2, 5), 2: Fraction(7, 10), 3: Fraction(9, 10), 4: Fraction(1), 5: Fraction(1)},
        (1 + 3 + 2 + 3 + 2) / 5,
    ),
}


def test_two_families_two_engines_five_runs_pass_at_k_by_hand(tmp_path: Path) -> None:
    """Issue 22: "pass@k figures from an offline eval with two families x two engines x 5 runs, checked
    against the estimator computed by hand in the test"."""
    out = tmp_path / "eval"
    ks = [arg for k in range(1, 6) for arg in ("--k", str(k))]
    families = [str(FAMILIES / "fix-typo"), str(FAMILIES / "add-farewell")]
    done = harness(
        "eval", "run", *families, "--runs", "5", "--engines", f"{CAREFUL},{HASTY}", "--out", str(out),
        "--offline", "--mode", "process", "--json", *ks,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    groups = {(g["family"], g["engine"]): g for g in document["groups"]}
    assert set(groups) == set(EXPECTED)
    for key, (passed, pass_at, mean_turns) in EXPECTED.items():
        group = groups[key]
        assert (group["n"], group["passed"], group["errors"]) == (5, passed, 0), key
        assert {int(k): Fraction(v["exact"]) for k, v in group["passAtK"].items()} == pass_at, key
        assert group["meanTurns"] == pytest.approx(mean_turns)
        low, high = wilson(passed, 5)
        assert group["pass1Interval"] == [round(low, 4), round(high, 4)]
        assert len(group["failingTraces"]) == 5 - passed
        for trace in group["failingTraces"]:
            summary = trace_events(trace)[-1]
            assert summary["type"] == "summary" and summary["status"] == "failed"
    # Every run left a record; the report reads them back to the same figures.
    assert len(list((out / "runs").glob("*/*/*.json"))) == 20
    again = harness("eval", "report", str(out), "--json", *ks)
    assert again.returncode == 0 and json.loads(again.stdout) == document
    readable = harness("eval", "report", str(out))
    assert "add-farewell / script:script-hasty: 2/5 passed" in readable.stdout
    assert "pass@1 0.400" in readable.stdout and "failing run trace:" in readable.stdout


def test_each_run_has_a_fresh_working_copy_removed_afterwards_and_offline_means_loopback_only(
    tmp_path: Path,
) -> None:
    """The engine sees only what setup made (not an earlier run's files), works in a temporary directory
    that is gone after the run, and with --offline has no network interface but loopback."""
    probe = script(
        tmp_path / "script-probe.sh",
        'ls -A; pwd; touch leftover; awk -F: \'NR > 2 {gsub(/ /, "", $1); print "if:" $1}\' /proc/net/dev\n',
    )
    out = tmp_path / "eval"
    done = harness(
        "eval", "run", str(FAMILIES / "fix-typo"), "--runs", "2", "--engines", probe, "--out", str(out),
        "--offline", "--mode", "process", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    workdirs = []
    for index in range(2):
        record = json.loads((out / "runs" / "fix-typo" / "script-script-probe" / f"{index}.json").read_text())
        engine = next(e for e in trace_events(str(record["trace"])) if e["type"] == "engine")
        lines = str(engine["stdout"]).splitlines()
        assert lines[0] == "greet.py" and "leftover" not in lines
        assert [line for line in lines if line.startswith("if:")] == ["if:lo"]
        workdirs.append(Path(lines[1]))
    assert workdirs[0] != workdirs[1]
    assert not any(path.exists() for path in workdirs)


def test_an_engine_that_never_ends_is_killed_with_its_children(tmp_path: Path) -> None:
    """A hostile engine that starts a child and sleeps forever cannot hang the eval: at --timeout its
    whole process group is killed, the run is `failed` (the engine's fault), and the next run goes on."""
    stuck = script(
        tmp_path / "script-stuck.sh", 'sleep 600 &\necho $! > "$HARNESS_EVAL_FAMILY/../child"\nwait\n'
    )
    family = tmp_path / "family"
    family.mkdir()
    (family / "brief.md").write_text("wait forever\n")
    script(family / "setup", "true\n")
    script(family / "judge", "true\n")
    out = tmp_path / "eval"
    done = harness(
        "eval", "run", str(family), "--runs", "2", "--engines", stuck, "--out", str(out), "--timeout", "2",
        "--mode", "process", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (group,) = json.loads(done.stdout)["groups"]
    assert (group["n"], group["passed"]) == (2, 0)
    record = json.loads((out / "runs" / "family" / "script-script-stuck" / "0.json").read_text())
    assert record["reason"] == "engine timed out after 2 s" and record["judgeExit"] is None
    child = int((tmp_path / "child").read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_setup_failures_are_errors_not_runs_and_secrets_stay_out_of_traces(tmp_path: Path) -> None:
    """A run whose setup fails never reached the engine: it is an `error`, outside n. An engine that
    prints a token from its environment leaves it redacted in the trace."""
    family = tmp_path / "family"
    family.mkdir()
    (family / "brief.md").write_text("anything\n")
    script(family / "setup", '[ "$HARNESS_EVAL_RUN" != 1 ] || exit 3\n')
    script(family / "judge", "true\n")
    leak = script(tmp_path / "script-leak.sh", 'echo "token $GH_TOKEN"\n')
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    out = tmp_path / "eval"
    done = harness(
        "eval", "run", str(family), "--runs", "3", "--engines", leak, "--out", str(out), "--mode", "process",
        "--json", env={"GH_TOKEN": token},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (group,) = json.loads(done.stdout)["groups"]
    assert (group["n"], group["passed"], group["errors"]) == (2, 2, 1)
    runs = out / "runs" / "family" / "script-script-leak"
    assert json.loads((runs / "1.json").read_text())["reason"] == "setup failed (exit 3)"
    text = (runs / "0.trace" / "trace-000000000001.ndjson").read_text()
    assert token not in text and "[REDACTED:env:GH_TOKEN]" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["eval", "run", "{missing}", "--engines", CAREFUL, "--out", "{out}"], "no task family at"),
        (["eval", "run", "{family}", "--engines", "claude,nonsense", "--out", "{out}"], "unknown engine"),
        (
            ["eval", "run", "{family}", "--engines", "script:/nonexistent", "--out", "{out}"],
            "not an executable",
        ),
        (["eval", "run", "{family}", "--engines", CAREFUL, "--out", "{out}", "--runs", "0"], "--runs"),
        (["eval", "run", "{no_judge}", "--engines", CAREFUL, "--out", "{out}"], "no executable `judge`"),
        (["eval", "report", "{out}"], "no eval at"),
        (["eval", "run", "{family}", "--engines", CAREFUL, "--out", "{out}", "--mode", "tmux"], "--mode"),
        (["eval", "run", "{family}", "--engines", CAREFUL, "--out", "{out}", "--offline"], "--mode process"),
        (["eval", "run", "{family}", "--engines", "claude=/bin/x", "--out", "{out}"], "NAME=BIN"),
    ],
)
def test_bad_input_is_one_line_with_status_2(tmp_path: Path, args: list[str], words: str) -> None:
    no_judge = tmp_path / "no-judge"
    no_judge.mkdir()
    (no_judge / "brief.md").write_text("x\n")
    script(no_judge / "setup", "true\n")
    names = {
        "missing": str(tmp_path / "missing"),
        "out": str(tmp_path / "eval"),
        "family": str(FAMILIES / "fix-typo"),
        "no_judge": str(no_judge),
    }
    done = harness(*(arg.format(**names) for arg in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("harness: bad_request:") and words in done.stderr
    assert done.stderr.count("\n") == 1
    listed = harness(*(arg.format(**names) for arg in args), "--json")
    assert json.loads(listed.stdout)["error"] == "bad_request"


def test_a_used_out_and_a_damaged_record_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    first = harness(
        "eval", "run", str(FAMILIES / "fix-typo"), "--runs", "1", "--engines", CAREFUL, "--out", str(out),
        "--mode", "process",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    second = harness(
        "eval", "run", str(FAMILIES / "fix-typo"), "--runs", "1", "--engines", CAREFUL, "--out", str(out),
        "--mode", "process",
    )  # fmt: skip
    assert second.returncode == 2 and "already holds an eval" in second.stderr
    (out / "runs" / "fix-typo" / "script-script-careful" / "0.json").write_text("[" * 100_000)
    damaged = harness("eval", "report", str(out))
    assert damaged.returncode == 2 and "is not a run record" in damaged.stderr


def test_real_engine_adapters_run_each_cli_non_interactively() -> None:
    """The adapters for the user's providers (not run here: they need the engines and a provider)."""
    assert eval_runner.engine("claude").command("do it") == [
        "claude", "-p", "do it", "--output-format", "json", "--dangerously-skip-permissions",
    ]  # fmt: skip
    assert eval_runner.engine("codex").command("do it")[:2] == ["codex", "exec"]
    assert eval_runner.engine("gemini").command("do it") == ["gemini", "-p", "do it", "--yolo"]
    assert not eval_runner.engine("claude").brief_on_stdin
    assert eval_runner.turns('noise\n{"type": "result", "num_turns": 7}\n') == 7
    assert eval_runner.turns("no json here") is None
    # JSON.stringify leaves U+2028 and U+0085 raw in a string: they are text, not line ends.
    assert eval_runner.turns('{"num_turns": 4, "result": "a\u2028b\x85c"}\n') == 4


CODEX_CONFIG = """\
model = "fake-model"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:{port}/v1"
env_key = "FAKE_MODEL_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[features]
daemon_auto_start = false
apps = false
plugins = false
remote_plugin = false
in_app_updates = false
tool_suggest = false
"""


@pytest.mark.engines
def test_real_engines_offline_against_the_scripted_model(tmp_path: Path) -> None:
    """The real adapters end to end: Claude Code (`claude -p`) and Codex (`codex exec`), each run inside
    `unshare -n` against the scripted model (tests/engines/fake_model.py, started by --model-server with
    the family's fake-model.json), do both families' tasks; every run passes and Claude's turns are read
    from its JSON result."""
    from tests.engines.launch import CLAUDE_BIN, CODEX_BIN, FAKE_MODEL, install_problem

    problem = install_problem()
    if problem:
        pytest.skip(f"engines not available: {problem}")
    port = 8765
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(CODEX_CONFIG.format(port=port))
    (home / ".claude.json").write_text(
        json.dumps(
            {"hasCompletedOnboarding": True, "bypassPermissionsModeAccepted": True, "autoUpdates": False}
        )
    )
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "ANTHROPIC_AUTH_TOKEN": "fake-token-for-loopback",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
        "CODEX_HOME": str(home / ".codex"),
        "FAKE_MODEL_API_KEY": "fake-key-for-loopback",
    }
    server = (
        f'exec {sys.executable} {FAKE_MODEL} --port {port} --script "$HARNESS_EVAL_FAMILY/fake-model.json"'
    )
    out = tmp_path / "eval"
    done = harness(
        "eval", "run", str(FAMILIES / "fix-typo"), str(FAMILIES / "add-farewell"), "--runs", "2",
        "--engines", f"claude={CLAUDE_BIN},codex={CODEX_BIN}", "--out", str(out), "--offline",
        "--model-server", server, "--model-port", str(port), "--timeout", "120", "--mode", "process",
        "--json", env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    groups = {(g["family"], g["engine"]): g for g in json.loads(done.stdout)["groups"]}
    assert set(groups) == {(f, e) for f in ("fix-typo", "add-farewell") for e in ("claude", "codex")}
    for key, group in groups.items():
        assert (group["n"], group["passed"]) == (2, 2), (key, group["failingTraces"])
        assert {k: v["exact"] for k, v in group["passAtK"].items()} == {"1": "1", "2": "1"}
    assert groups[("fix-typo", "claude")]["meanTurns"] == 2  # one tool call, then the final text
    assert groups[("add-farewell", "claude")]["meanTurns"] == 3
    assert groups[("fix-typo", "codex")]["meanTurns"] is None  # codex exec does not report turns


def test_an_engine_that_floods_its_output_or_leaves_a_child_holding_it_cannot_stall_the_eval(
    tmp_path: Path,
) -> None:
    """An engine printing 50 MB leaves only the tail in the trace; one that leaves a background child
    holding its output open ends its step when it exits (the child is killed), not at the timeout."""
    flood = script(tmp_path / "script-flood.sh", "head -c 50000000 /dev/zero | tr '\\0' x\necho\n")
    linger = script(tmp_path / "script-linger.sh", "sleep 600 &\necho done\n")
    out = tmp_path / "eval"
    # A step that waited for the child would outlast this call's 300 s and fail it.
    done = harness(
        "eval",
        "run",
        str(FAMILIES / "fix-typo"),
        "--runs",
        "1",
        "--engines",
        f"{flood},{linger}",
        "--out",
        str(out),
        "--timeout",
        "3600",
        "--mode",
        "process",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    runs = out / "runs" / "fix-typo"
    flooded = next(
        e for e in trace_events(str(runs / "script-script-flood" / "0.trace")) if e["type"] == "engine"
    )
    assert len(str(flooded["stdout"])) == eval_runner.KEPT_OUTPUT
    lingered = json.loads((runs / "script-script-linger" / "0.json").read_text())
    assert (lingered["engineExit"], lingered["reason"]) == (0, "judge exit 1")  # judged, not timed out


SESSION_CAREFUL = f"script:{FAMILIES / 'engines' / 'session-careful'}"
SESSION_HASTY = f"script:{FAMILIES / 'engines' / 'session-hasty'}"


def test_each_run_is_a_session_of_its_own_with_its_trace_kept(tmp_path: Path) -> None:
    """Issue 22: "Each run is a coordination session of its own (the sessions issue) in a fresh working
    copy, with its trace kept." Two families x two scripted engines x 5 runs, every engine step a `run`
    session of the eval's own daemon, the scripts failing by run number as in process mode: pass@k checked
    against the estimator computed by hand (EXPECTED)."""
    out = tmp_path / "eval"
    ks = [arg for k in range(1, 6) for arg in ("--k", str(k))]
    families = [str(FAMILIES / "fix-typo"), str(FAMILIES / "add-farewell")]
    done = harness(
        "eval", "run", *families, "--runs", "5", "--engines", f"{SESSION_CAREFUL},{SESSION_HASTY}",
        "--out", str(out), "--timeout", "240", "--json", *ks, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    groups = {(g["family"], g["engine"]): g for g in json.loads(done.stdout)["groups"]}
    assert set(groups) == {(family, engine.replace("script-", "session-")) for family, engine in EXPECTED}
    sessions = set()
    for (family, script_engine), (passed, pass_at, _) in EXPECTED.items():
        key = (family, script_engine.replace("script-", "session-"))
        group = groups[key]
        assert (group["n"], group["passed"], group["errors"]) == (5, passed, 0), (key, group)
        assert {int(k): Fraction(v["exact"]) for k, v in group["passAtK"].items()} == pass_at, key
        assert group["meanTurns"] == 1  # the brief is the only prompt a run session gives its engine
        # The report lists each failing run's trace and its session's trace.
        assert len(group["failingTraces"]) == 2 * (5 - passed), key
        for index in range(5):
            record = json.loads(
                (out / "runs" / family / eval_runner.slug(key[1]) / f"{index}.json").read_text()
            )
            session = record["session"]
            assert (session["termination"], session["reason"]) == (
                "concluded",
                f"conclude by {session['sessionId']}",
            )
            sessions.add(session["sessionId"])
            # The session's trace is kept in the eval's data directory, from its start to its summary.
            lines = list(read_trace(Path(record["sessionTrace"])))
            kinds = [line.event["type"] for line in lines if line.source == "orchestrator"]
            assert kinds[0] == "session_start" and kinds[-1] == "summary"
            assert Path(record["sessionTrace"]).parent.parent == out / "daemon"
            assert 0 < record["seconds"] < 240
            engine_event = next(e for e in trace_events(str(record["trace"])) if e["type"] == "engine")
            assert engine_event["session"]["sessionId"] == session["sessionId"]
            if record["status"] == "failed":
                assert {record["trace"], record["sessionTrace"]} <= set(group["failingTraces"])
    assert len(sessions) == 20
    # The eval's daemon and its engines' tmux server are gone with the eval.
    assert not (out / "daemon" / "tmux" / "agents.sock").exists() or subprocess.run(
        ["tmux", "-S", str(out / "daemon" / "tmux" / "agents.sock"), "list-sessions"],
        capture_output=True, check=False,
    ).returncode != 0  # fmt: skip
    assert not (out / "daemon" / "daemon.json").exists()  # written while the daemon runs


def test_session_engines_that_never_conclude_exit_at_once_or_exit_later_and_leave_nothing_running(
    tmp_path: Path,
) -> None:
    """Hostile engines in session mode: one that never concludes cannot hang the eval (at --timeout its run
    is `failed` and its engine, a process in the eval's tmux server, is ended); one that exits at once, and
    one that joins but exits before its brief could be written (it never shows a prompt), never got their
    task: each is an `error`, outside n, however the machine's load orders its exit against the session's
    start; one that exits after its brief reached it stops its session (agent_crashed), and the run is
    judged like any other."""
    stuck = script(tmp_path / "script-stuck.sh", f"echo $$ > {tmp_path / 'stuck.pid'}\nexec sleep 600\n")
    gone = script(tmp_path / "script-gone.sh", "exit 0\n")
    out = tmp_path / "eval"
    silent_path = tmp_path / "script-silent.sh"
    silent = script(silent_path, "exit 0\n")  # rewritten below, once its session id is known
    family = eval_runner.load_family(FAMILIES / "fix-typo")
    sid = eval_runner.session_id(family, eval_runner.engine(silent), 0)
    # Joins, never shows a prompt, and exits once its desk holds its brief queued (the team's trace says so).
    queued = f'"noticeId":"{sid}/{sid}.brief/question","state":"queued"'
    traces = str(out / "daemon" / "traces" / f"team-{sid}" / "trace-*.ndjson")
    exit_when = (
        "import glob, time\n"
        f"while not any({queued!r} in open(p).read() for p in glob.glob({traces!r})):\n"
        "    time.sleep(0.2)\n"
    )
    script(silent_path, f"exec {sys.executable} -c {shlex.quote(exit_when)}\n")
    late = f"script:{FAMILIES / 'engines' / 'session-quitter'}"  # quits on its brief without replying
    engines = ",".join((stuck, gone, silent, late))
    done = harness(
        "eval", "run", str(FAMILIES / "fix-typo"), "--runs", "1", "--engines", engines,
        "--out", str(out), "--timeout", "60", "--json", timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    groups = {g["engine"]: g for g in json.loads(done.stdout)["groups"]}
    assert {name: (g["n"], g["passed"], g["errors"]) for name, g in groups.items()} == {
        "script:script-stuck": (1, 0, 0),
        "script:script-gone": (0, 0, 1),
        "script:script-silent": (0, 0, 1),
        "script:session-quitter": (1, 0, 0),
    }
    runs = out / "runs" / "fix-typo"
    timed_out = json.loads((runs / "script-script-stuck" / "0.json").read_text())
    assert (timed_out["reason"], timed_out["judgeExit"]) == ("engine timed out after 60 s", None)
    assert not Path(f"/proc/{int((tmp_path / 'stuck.pid').read_text())}").exists()
    never = json.loads((runs / "script-script-gone" / "0.json").read_text())
    assert never["reason"].startswith("cannot start script:script-gone: "), never
    silent_run = json.loads((runs / "script-script-silent" / "0.json").read_text())
    assert silent_run["reason"].startswith(
        "cannot start script:script-silent: it ended before its brief reached it (agent_crashed: "
    ), silent_run
    assert (silent_run["judgeExit"], silent_run.get("session")) == (None, None)
    crashed = json.loads((runs / "script-session-quitter" / "0.json").read_text())
    assert (crashed["status"], crashed["reason"], crashed["session"]["termination"]) == (
        "failed",
        "judge exit 1",
        "stopped",
    )
    assert crashed["session"]["reason"].startswith("agent_crashed:"), crashed
    assert crashed["sessionTrace"] in groups["script:session-quitter"]["failingTraces"]
