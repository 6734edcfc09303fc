# The fast path of `harness team` must accept exactly the Typer commands' grammar, and hand everything else
# (help, typos, missing arguments) to Typer, which explains it.
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer.main

from harness.cli.app import app, team_app
from harness.cli.commands import COMMON_OPTIONS, GROUP_OPTIONS, SPECS, Options, parse_fast


def test_the_fast_grammar_is_the_typer_grammar() -> None:
    group = typer.main.get_group(team_app)
    assert {opt for param in group.params for opt in param.opts} == set(GROUP_OPTIONS)
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
    ):
        parsed = parse_fast(argv)
        assert parsed is not None, argv
        _spec, fast_opts, fast_values = parsed
        group.main(argv, standalone_mode=False)
        opts, values = seen.pop()
        assert values == fast_values, argv
        assert vars(opts) == vars(fast_opts), argv
