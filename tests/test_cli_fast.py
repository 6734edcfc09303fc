# The fast path of `harness team` must accept exactly the Typer commands' grammar, and hand everything else
# (help, typos, missing arguments) to Typer, which explains it.
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import typer.main

from harness.cli import main
from harness.cli.app import app, team_app
from harness.cli.commands import COMMON_OPTIONS, SPECS, Options, parse_fast


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
