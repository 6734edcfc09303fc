# The fast path of `harness team` must accept exactly the Typer commands' grammar, and hand everything else
# (typos, missing arguments) to Typer, which explains it; the help it renders without Typer must name what
# Typer's names, for every command.
from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from harness.cli import app as app_module
from harness.cli import main
from harness.cli.app import app, team_app
from harness.cli.commands import COMMON_OPTIONS, SPECS, Options, parse_fast
from harness.cli.fast import TOP, declared_help, run_fast


def test_the_fast_grammar_is_the_typer_grammar() -> None:
    group = typer.main.get_group(team_app)
    assert {opt for param in group.params for opt in param.opts} == set(COMMON_OPTIONS)
    for name, spec in SPECS.items():
        command = group.commands[name]
        options = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
        arguments = [param.name for param in command.params if param.param_type_name == "argument"]
        assert options == set(spec.options) | set(COMMON_OPTIONS), name
        assert arguments == [*spec.required, *spec.optional], name


def test_plain_invocations_parse_and_the_rest_goes_to_typer() -> None:
    argv = ["team", "--team", "t1", "--home", "/h", "reply", "q1", "an answer", "--evidence", "a:1"]
    parsed = parse_fast([*argv, "--evidence=b:2", "--json", "--key", "k"])
    assert parsed is not None
    spec, opts, values = parsed
    assert spec is SPECS["reply"]
    assert (opts.team, opts.home, opts.key, opts.json) == ("t1", "/h", "k", True)
    assert values == {"question_id": "q1", "text": "an answer", "evidence": ["a:1", "b:2"], "text_file": None,
                      "member": None}  # fmt: skip
    parsed = parse_fast(
        ["team", "--team", "t", "ask", "bob", "--ttl", "30", "--text-file", "-", "--no-notify"]
    )
    assert parsed is not None and parsed[2]["ttl"] == 30.0 and parsed[2]["text_file"] == Path("-")
    assert parsed[2]["no_notify"] is True and parsed[2]["text"] is None
    assert parse_fast(["team", "--team", "t", "wait", "q"])[2]["seconds"] == 30.0  # type: ignore[index]
    # The typed commands take their rows' arguments and options (core/actions.py) under their CLI names.
    parsed = parse_fast(["team", "--team", "t", "cancel", "q1", "--reason", "no_answer"])
    assert parsed is not None and parsed[2] == {"question_id": "q1", "reason": "no_answer"}
    parsed = parse_fast(["team", "--team", "t", "remove", "bob"])
    assert parsed is not None and parsed[2] == {"membership_id": "bob"}
    parsed = parse_fast(["team", "--team", "t", "--key-file", "/k", "inbox", "--socket", "/s"])
    assert parsed is not None
    assert (parsed[1].key_file, parsed[1].socket, parsed[1].key) == (Path("/k"), "/s", None)
    for argv in (
        ["team", "--help"],
        ["team", "--team", "t", "inbox", "--help"],
        ["team", "--team", "t", "wait"],
        ["team", "--team", "t", "ask", "bob", "-5 is a number"],
        ["team", "--team", "t", "ask", "bob", "x", "extra"],
        ["team", "--team", "t", "wait", "q", "--seconds", "soon"],
        ["team", "--team", "t", "create"],
        ["team", "--team"],
        ["team", "--team", "t", "explode"],
        ["daemon", "status"],
        ["team", "--team", "t", "ask", "--", "bob", "x"],
        ["team", "--team", "t", "inbox", "--port", "9"],  # gone: the daemon listens on a socket file
    ):
        assert parse_fast(argv) is None, argv


def test_typer_hands_the_commands_the_values_the_fast_path_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Typer commands are generated from declarations (cli/app.team_command); each must reach its spec
    # with the same options and values as the fast parser gives for the same words.
    seen: list[tuple[Options, dict[str, Any]]] = []
    for name, spec in SPECS.items():
        monkeypatch.setitem(SPECS, name, dataclasses.replace(spec, run=lambda o, v: seen.append((o, v))))
    group = typer.main.get_command(app)
    for argv in (
        ["team", "--team", "t1", "reply", "q1", "an answer", "--evidence", "a:1", "--json", "--key", "k"],
        ["team", "--team", "t", "ask", "bob", "--ttl", "30", "--text-file", "-", "--no-notify", "--id", "o"],
        ["team", "--team", "t", "wait", "q", "--seconds", "5", "--machine", "m", "--socket", "/s"],
        ["team", "--team", "t", "--key-file", "/k", "inbox", "--home", "/h"],
        ["team", "--team", "t", "status"],
        ["team", "--team", "t", "key", "bob", "--home", "/h"],
        ["team", "--team", "t", "create", "--file", "team.json"],
        ["team", "list"],
        ["team", "get", "--team", "t", "--home", "/h", "--json"],
        ["team", "--team", "t", "ask", "bob", "hi", "--team", "u", "--machine", "m"],
        ["team", "inbox", "--key-file", "/k", "--team", "t"],
        # the typed commands, generated from the action table's rows
        ["team", "--team", "t", "cancel", "q1", "--reason", "no_answer", "--json"],
        ["team", "--team", "t", "expire", "q1"],
        ["team", "--team", "t", "remove", "bob", "--home", "/h"],
        ["team", "--team", "t", "pause"],
    ):
        parsed = parse_fast(argv)
        assert parsed is not None, argv
        _spec, fast_opts, fast_values = parsed
        group.main(argv, standalone_mode=False)
        opts, values = seen.pop()
        assert values == fast_values, argv
        assert vars(opts) == vars(fast_opts), argv


def test_common_options_go_before_or_after_the_subcommand() -> None:
    """Issue 17: `harness team get --team ID` failed with "No such option"."""
    for argv in (
        ["team", "--team", "t", "--home", "/h", "--key", "k", "--json", "--machine", "m", "get"],
        ["team", "get", "--team", "t", "--home", "/h", "--key", "k", "--json", "--machine", "m"],
        ["team", "--home", "/h", "--json", "get", "--team=t", "--key", "k", "--machine", "m"],
    ):
        parsed = parse_fast(argv)
        assert parsed is not None, argv
        opts = parsed[1]
        assert (opts.team, opts.home, opts.key, opts.json, opts.machine) == ("t", "/h", "k", True, "m"), argv
    parsed = parse_fast(["team", "--team", "t", "inbox", "--team", "u"])
    assert parsed is not None and parsed[1].team == "u"  # the subcommand's win
    parsed = parse_fast(["team", "inbox", "--key-file", "/k"])
    assert parsed is not None and parsed[1].key_file == Path("/k")


def run(
    argv: list[str], capsys: pytest.CaptureFixture[str], *, typer_only: bool = False
) -> tuple[int, str, str]:
    if typer_only:
        from harness.cli.app import run_typer

        try:
            status = run_typer(argv, "--json" in argv)
        except SystemExit as stop:
            status = int(stop.code or 0)
    else:
        status = main.run(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_typer_takes_the_common_options_after_the_subcommand_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path)
    for command in (["get"], ["watch", "--seconds", "1"], ["export", "--out", str(tmp_path / "x")]):
        status, out, _ = run(
            ["team", *command, "--team", "t1", "--home", home, "--json"], capsys, typer_only=True
        )
        body = json.loads(out)
        assert (status, body["error"]) in ((3, "unreachable"), (1, "not_found")), (command, out)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert run(["--version"], capsys) == (0, f"harness {version('harness')}\n", "")


def test_usage_errors_are_one_line_or_one_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["team", "--team", "t", "explode", "--json"], capsys)
    assert status == 2 and json.loads(out)["error"] == "bad_request" and err == ""
    assert "harness team --help" in json.loads(out)["detail"]
    status, out, err = run(["team", "--team", "t", "wait", "q", "--seconds", "soon"], capsys)
    assert status == 2 and out == "" and err.startswith("harness: bad_request: ") and err.count("\n") == 1
    status, out, err = run(["daemon", "status", "--nope"], capsys)
    assert status == 2 and err.startswith("harness: bad_request: No such option: --nope")
    # A typed command's missing required option is said before anything is asked of a daemon (none runs
    # for this data directory: a call would be `unreachable`, exit 3), and a prefix is not resolved first.
    home = ["--home", "/nonexistent/harness-home"]
    status, out, err = run(["team", "--team", "t", "expire", "4f2a", "--json", *home], capsys)
    assert status == 2 and err == "", out
    assert json.loads(out) == {
        "error": "bad_request",
        "detail": "give --reason: why, as the question will show it: 1 to 32 of a-z and '_', like no_answer.",
        "operationId": None,
    }


# --- the commands run without click's parser (cli/app.parse_direct) -----------------------------------------

SAMPLES: dict[type, list[str]] = {str: ["x y", ""], int: ["7"], float: ["2.5", "3"], Path: ["some/dir/", "f"]}


def direct_commands(root: typer.Typer) -> Iterator[tuple[list[str], Any]]:
    """Every command of `root` (its words and CommandInfo) that parse_direct reads."""
    groups: list[tuple[list[str], typer.Typer]] = [([], root)]
    for prefix, group in groups:
        for info in group.registered_commands:
            assert info.callback is not None
            words = [*prefix, info.name or typer.main.get_command_name(info.callback.__name__)]
            if app_module._declared(info.callback) is not None and app_module._command(root, words):
                yield words, info
        for sub in group.registered_groups:
            assert sub.typer_instance is not None and isinstance(sub.name, str)
            groups.append(([*prefix, sub.name], sub.typer_instance))


def variants(words: list[str], params: list[Any]) -> Iterator[list[str]]:
    """The required words only; every option with the first samples; again, inline and reversed."""
    arguments = [p for p in params if not p.flags]
    needed = [[p.flags[0], SAMPLES[p.kind][0]] for p in params if p.flags and p.required]
    yield [
        *words,
        *(w for pair in needed for w in pair),
        *(SAMPLES[p.kind][0] for p in arguments if p.required),
    ]
    for index in (0, -1):
        pieces = []
        for param in params:
            sample = SAMPLES.get(param.kind, [""])[index]
            if not param.flags:
                pieces.append([sample])
            elif param.kind is bool:
                pieces.append([param.flags[-1]])
            elif param.many:
                pieces.append([param.flags[0], sample, f"{param.flags[0]}=b"])
            else:
                pieces.append(
                    [param.flags[index], sample] if index == 0 else [f"{param.flags[index]}={sample}"]
                )
        if index == -1:
            pieces.reverse()
            pieces.sort(key=lambda piece: piece[0].startswith("-"))  # arguments keep their order
        yield [*words, *(w for piece in pieces for w in piece)]


def test_direct_parsing_gives_each_command_what_click_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands of plain options skip click (its parse imports pydantic, slower than a whole `team` call);
    for every such command, the values handed over are click's, value and type."""
    root = app_module.application(TOP)
    covered = []
    for words, info in list(direct_commands(root)):
        seen: list[dict[str, Any]] = []

        @functools.wraps(info.callback)
        def record(**values: Any) -> None:
            seen.append(values)  # noqa: B023 (used before the loop moves on)

        params = app_module._declared(info.callback)
        assert params is not None
        monkeypatch.setattr(info, "callback", record)
        for argv in variants(words, params):
            direct = app_module.parse_direct(root, argv)
            assert direct is not None and direct[0] is record, argv
            typer.main.get_command(root).main(argv, prog_name="harness", standalone_mode=False)
            clicked = seen.pop()
            assert direct[1] == clicked, argv
            assert {k: type(v) for k, v in direct[1].items()} == {k: type(v) for k, v in clicked.items()}, (
                argv
            )
        covered.append(" ".join(words))
    assert {"doctor", "daemon status", "daemon stop", "agent list", "trace query", "session status"} <= set(
        covered
    )


def test_words_click_must_explain_are_left_to_it() -> None:
    root = app_module.application(TOP)
    for argv in (
        ["doctor", "--help"],
        ["doctor", "--team"],
        ["doctor", "--json=1"],
        ["doctor", "--nope"],
        ["doctor", "extra"],
        ["doctor", "--team", "-x"],
        ["doctor", "--team", "\udcff"],
        ["doctor", "--", "x"],
        ["daemon"],
        ["daemon", "prune"],
        ["daemon", "statu"],
        ["pair", "create", "--ttl", "nan"],
        ["pair", "create", "--ttl", "1e3"],
        ["web", "--team", "t", "--web-port", " 5"],
        ["agent", "show"],
        ["agent", "show", "a", "b"],
        ["agent", "classify", "-", "--engine", "claude"],
        ["check"],
        ["team", "list"],
        ["eval", "run", "x"],
    ):
        assert app_module.parse_direct(root, argv) is None, argv


# --- help without Typer (cli/fast.py renders it from the commands' declarations) ----------------------------


def help_lines(root: typer.Typer) -> Iterator[tuple[list[str], Any]]:
    """`harness WORDS --help` for every group and command of the whole application, with its click object."""
    found: list[tuple[list[str], Any]] = [([], typer.main.get_command(root))]
    for words, command in found:
        yield words, command
        for name, sub in getattr(command, "commands", {}).items():
            found.append(([*words, name], sub))


OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def test_fast_help_names_every_option_and_command_typer_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17: "`daemon status` / `--help` take 2.7-4.4 s"; every command's help is now rendered from its
    declarations without Typer. For every group and command, the fast help names the same options (and,
    for a group, the same commands, and for a command its arguments) as Typer's own help."""
    monkeypatch.setenv("COLUMNS", "200")  # no option name cut by a wrapped line, in either rendering
    root = app_module.application(TOP)
    checked = 0
    for words, command in help_lines(root):
        argv = [*words, "--help"]
        assert run_fast(argv), argv  # rendered here, never by Typer
        fast_text = capsys.readouterr().out
        command.main(argv[len(words) :], prog_name=" ".join(["harness", *words]), standalone_mode=False)
        typer_text = capsys.readouterr().out
        named, typer_named = set(OPTION.findall(fast_text)), set(OPTION.findall(typer_text))
        if words in ([], ["team"]):  # these two also teach first steps: more options are named
            assert typer_named <= named, argv
        else:
            assert named == typer_named, (argv, named ^ typer_named)
        flags = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
        assert flags | {"--help"} <= set(OPTION.findall(fast_text)), argv
        for name in getattr(command, "commands", {}):
            assert re.search(rf"^  {re.escape(name)}(  |$)", fast_text, re.M), (argv, name)
        for param in command.params:
            if param.param_type_name == "argument":
                metavar = param.metavar or str(param.name).upper()
                assert metavar.strip("[].") in fast_text, (argv, param.name)
        help_text = " ".join((command.help or "").split())
        assert " ".join(help_text.split()[:6]) in " ".join(fast_text.split()), argv
        checked += 1
    assert checked > 80  # every group and command of the application, `team board task add` included


def test_help_of_a_command_the_reader_cannot_follow_is_left_to_typer(tmp_path: Path) -> None:
    """A declaration the reader cannot evaluate (a help text computed at run time) gives no fast help, so
    Typer renders it rather than a wrong one."""
    from harness.cli import fast

    module = tmp_path / "declared_elsewhere.py"
    module.write_text(
        "from typing import Annotated\nimport typer\nfrom os import getcwd\ndemo_app = typer.Typer()\n"
        "@demo_app.command()\n"
        "def run(path: Annotated[str, typer.Option(help=getcwd())] = '.') -> None:\n    pass\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        fast.DECLARED["demo-x"] = ("declared_elsewhere", "demo_app")
        fast.TOP["demo-x"] = "A group declared in a test."
        assert declared_help(["demo-x", "--help"]) is None
        assert declared_help(["demo-x", "run", "--help"]) is None
    finally:
        del fast.DECLARED["demo-x"], fast.TOP["demo-x"]
        sys.path.remove(str(tmp_path))


# Each a command line whose help used to import Typer, rich and click (close to a second of CPU).
HELP_ARGVS = [
    *([name, "--help"] for name in TOP),
    ["session", "run", "--help"],
    ["session", "announce", "--help"],
    ["check", "--help"],
    ["agent", "start", "--help"],
    ["daemon", "prune", "--help"],
    ["team", "watch", "--help"],
    ["team", "board", "--help"],
    ["team", "board", "task", "--help"],
    ["team", "--team", "t", "board", "task", "add", "--help"],
    ["session"],  # a group alone: its help, and status 2 as Typer's no_args_is_help
    ["daemon"],
]


def test_help_imports_neither_typer_nor_rich_nor_click() -> None:
    """Each `harness ... --help` above runs in one fresh interpreter, one after the other; after each,
    no module of Typer (and its click), rich or pydantic may have been imported, nor the I/O stacks behind
    the commands (trio, the model checker)."""
    probe = (
        "import contextlib, io, json, sys\n"
        "from harness.cli import main\n"
        "heavy = ('typer', 'click', 'rich', 'pydantic', 'trio', 'harness.models', 'textual')\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        status = main.run(argv)\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "    print(json.dumps([argv, status, loaded[:3]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(HELP_ARGVS)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [argv for argv, _status, _loaded in results] == HELP_ARGVS
    for argv, status, loaded in results:
        assert (status, loaded) == (0 if "--help" in argv else 2, []), argv


def test_a_reader_that_leaves_early_gets_no_error(tmp_path: Path) -> None:
    """`harness --help | head -1` printed "harness: internal: BrokenPipeError" when head left first."""
    for argv in (["--help"], ["session", "run", "--help"], ["team", "--help"]):
        errors = tmp_path / "stderr"
        with errors.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "harness.cli.main", *argv], stdout=subprocess.PIPE, stderr=stderr
            )
            assert process.stdout is not None
            process.stdout.close()  # long before the interpreter has started and written
            status = process.wait(timeout=120)
        assert (status, errors.read_text()) == (1, ""), argv
