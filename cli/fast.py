# The commands a person or an agent runs most, without Typer: importing Typer and building its parser takes
# longer than the 0.25 s a command may take to start (see scripts/bench_cli_start.py). `run_fast` handles
# the help of every command, `harness team` (every plain invocation that `commands.parse_fast` reads),
# `harness daemon status` and `harness agent list`; anything else (another command, a typo, a missing
# argument) goes to the Typer application, which explains it. Help is rendered from what the Typer commands
# are built from: the tables of `team` (`commands.COMMANDS`, `TOP`, `TEAM_OTHERS`) and, for the other
# commands, their Typer declarations read from source (`Declarations`), so the two cannot drift.
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import shutil
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli import output
from harness.cli.commands import (
    COMMANDS,
    COMMON_HELP,
    COMMON_OPTIONS,
    PREFIX_HELP,
    NotFast,
    Options,
    Spec,
    Values,
    call,
    fail,
    match_command,
    parse_fast,
    show,
    take_option,
)
from harness.io import home as homes
from harness.io.client import Client, RemoteError, Uncertain, Unreachable, locate_socket

if TYPE_CHECKING:
    from harness.io.profiles import Observation

ABOUT = "team.v1: coding agents in terminals joined into a team through a durable exchange ledger."
# `harness COMMAND`: what each does, in `harness --help`.
TOP: dict[str, str] = {
    "team": "Teams: roster, questions and answers (init, create, ask, reply, inbox, wait, watch).",
    "agent": "Agents of this machine: start, attach, list, show, classify a screen.",
    "daemon": "The machine daemon that owns the team ledgers.",
    "pair": "Pair machines through a relay (end-to-end sealed).",
    "relay": "The relay between paired machines.",
    "web": "Serve a live page of the team on loopback, next to the running daemon; prints a one-time URL.",
    "doctor": "Check every ledger store (read-only, safe beside a running daemon); exit 1 if any is damaged.",
    "demo": "Watch two scripted agents in a private tmux server: a team, an ask, a reply, the continuation.",
    "check": "Model-check the protocol over the real reducers (scenarios, mutants).",
    "trace": "Read a trace offline: export, query, summary (no daemon needed).",
    "session": "Coordination sessions of engines in tmux: run, status, stop; tools: announce, rollcall, rfc.",
    "selfedit": "Write stdin to a file that .claude/settings.json allows (Edit rules), off branch main.",
    "eval": "Run task families N times per engine (setup, engine, judge) and report pass@k.",
    "channels": "Tab channels, off by default: the agents of a tmux window form a team; enable, disable.",
}
# The `harness team` commands that only the Typer application runs (a terminal view, a file copy).
TEAM_OTHERS: dict[str, str] = {
    "watch": "Read-only live view: roster, exchanges, the selected one in full.",
    "export": "Write a consistent backup of the team's ledger (safe beside a running daemon).",
    "delete": "Delete an archived team, once exported, while the daemon is stopped (frees its slot).",
}
FIRST_STEPS = """\
First team, on one machine:
  harness daemon start
  harness agent start --engine claude --name alice    (and bob, ...)
  harness team init --name demo                       (writes team.json)
  harness team create --file team.json
  harness team --team TEAM_ID watch"""

DAEMON_STATUS_OPTIONS = {"--home": ("home", "str"), "--json": ("json", "flag")}
AGENT_LIST_OPTIONS = {
    "--home": ("home", "str"),
    "--json": ("json", "flag"),
    "--wide": ("wide", "flag"),
    "--daemon-socket": ("socket", "str"),
}


def _width() -> int:
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def _entries(rows: list[tuple[str, str]]) -> list[str]:
    """`name  help` rows, the help wrapped beside the names (below them when a name is long)."""
    width = _width()
    column = min(max((len(name) for name, _ in rows), default=0) + 4, 28)
    lines = []
    for name, about in rows:
        wrapped = textwrap.wrap(about, max(width - column, 20)) or [""]
        if len(name) + 4 > column:
            lines.append(f"  {name}")
        else:
            lines.append(f"  {name:<{column - 2}}{wrapped.pop(0)}")
        lines.extend(" " * column + line for line in wrapped)
    return lines


def _paragraphs(text: str) -> list[str]:
    width = _width()
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        lines.extend(["", *textwrap.wrap(paragraph, width - 2, initial_indent="  ", subsequent_indent="  ")])
    return lines


def _option_rows(options: dict[str, tuple[str, str]], about: dict[str, str]) -> list[tuple[str, str]]:
    rows = []
    for flag, (dest, kind) in options.items():
        value = {"flag": "", "float": " SECONDS" if "second" in dest or dest == "ttl" else " NUMBER"}.get(
            kind, " " + dest.upper()
        )
        rows.append((flag + value, about.get(flag, "")))
    return rows


def top_help() -> str:
    lines = [
        "Usage: harness [--version] COMMAND ...",
        *_paragraphs(ABOUT),
        "",
        "Commands:",
        *_entries(list(TOP.items())),
        "",
        FIRST_STEPS,
        "",
        "`harness COMMAND --help` tells more.",
    ]
    return "\n".join(lines)


def team_help() -> str:
    commands = [(name, spec.help.split("\n")[0]) for name, spec in COMMANDS.items()]
    lines = [
        "Usage: harness team [COMMON OPTIONS] COMMAND [ARGS] [OPTIONS]",
        *_paragraphs(TOP["team"] + " " + PREFIX_HELP),
        "",
        "Commands:",
        *_entries([*commands, *TEAM_OTHERS.items()]),
        "",
        "Common options (before or after COMMAND):",
        *_entries([*_option_rows(COMMON_OPTIONS, COMMON_HELP), HELP_OPTION]),
    ]
    return "\n".join(lines)


def command_help(name: str, spec: Spec) -> str:
    arguments = [a.upper() for a in spec.required] + [f"[{a.upper()}]" for a in spec.optional]
    usage_line = " ".join(["Usage: harness team", name, "[OPTIONS]", *arguments])
    lines = [usage_line, *_paragraphs(spec.help)]
    described = [(a.upper(), spec.about[a]) for a in (*spec.required, *spec.optional) if a in spec.about]
    if described:
        lines += ["", "Arguments:", *_entries(described)]
    if spec.options:
        lines += ["", "Options:", *_entries(_option_rows(spec.options, spec.about))]
    lines += ["", "Common options:", *_entries([*_option_rows(COMMON_OPTIONS, COMMON_HELP), HELP_OPTION])]
    return "\n".join(lines)


def _help(argv: list[str]) -> str | None:
    """The help `argv` asks for, when it is `harness`, `harness --help`, or `harness team ... --help`."""
    if argv in ([], ["--help"]):
        return top_help()
    if not argv or argv[0] != "team" or (len(argv) > 1 and "--help" not in argv):
        return None
    words = argv[1:]
    for index, word in enumerate(words):
        name = word if word in TEAM_OTHERS else match_command(words[index:])
        if name is None:
            continue
        if name in TEAM_OTHERS:  # a command only Typer runs, declared in cli/app.py
            return _team_other_help(name)
        after = words[index + len(name.split()) : index + len(name.split()) + 1]
        group = f"{name} {' '.join(after)}"
        if any(other.startswith(group + " ") for other in COMMANDS):
            return team_group_help(group)  # `board task`
        if any(other.startswith(name + " ") for other in COMMANDS):
            return team_group_help(name)  # `board`: a command and a group
        return command_help(name, COMMANDS[name])
    return team_help()


def subgroup_help(prefix: str) -> str:
    """The help of a group of `team` commands named by their leading words (`board task`)."""
    return f"{prefix}: {', '.join(_below(prefix))}."


def _below(prefix: str) -> list[str]:
    """The words that follow `prefix` in the names of `team` commands, sorted."""
    depth = len(prefix.split())
    return sorted({name.split()[depth] for name in COMMANDS if name.startswith(prefix + " ")})


def team_group_help(prefix: str) -> str:
    """`harness team board --help`, `harness team board task --help`: a group's own command (`board`, with
    the options every team command takes) and the commands below it, as cli/app.py builds them."""
    spec = COMMANDS.get(prefix)
    rows = []
    for word in _below(prefix):
        name = f"{prefix} {word}"
        grouped = any(other.startswith(name + " ") for other in COMMANDS)
        rows.append((word, subgroup_help(name) if grouped and name not in COMMANDS else COMMANDS[name].help))
    lines = [
        f"Usage: harness team {prefix} [OPTIONS] COMMAND [ARGS]...",
        *_paragraphs(subgroup_help(prefix) if spec is None else spec.help),
    ]
    options = (
        []
        if spec is None
        else _option_rows({**spec.options, **COMMON_OPTIONS}, {**spec.about, **COMMON_HELP})
    )
    lines += ["", "Options:", *_entries([*options, HELP_OPTION])]
    lines += ["", "Commands:", *_entries([(word, about.split("\n")[0]) for word, about in rows])]
    return "\n".join(lines)


@functools.cache
def _team_app() -> Group:
    return declarations("harness.cli.app").group("team_app")


def _team_other_help(name: str) -> str | None:
    """`harness team watch --help` (export, delete): read from its declaration in cli/app.py."""
    try:
        command = _team_app().commands.get(name)
    except Unreadable:
        return None
    return None if not isinstance(command, Command) else render_command(f"team {name}", command)


def _parse(argv: list[str], table: dict[str, tuple[str, str]]) -> Values | None:
    """The options of a command that takes options only, or None to let Typer read (and explain) `argv`."""
    values: Values = {}
    index = 0
    try:
        while index < len(argv):
            index = take_option(argv, index, table, values)
    except NotFast:
        return None
    return values


def run_fast(argv: list[str]) -> bool:
    """Run `argv` without Typer when this module (or `commands.parse_fast`) reads it; False otherwise."""
    text = _help(argv) or declared_help(argv)
    if text is not None:
        print(text)
        return True
    alone = declared(argv) if len(argv) == 1 and argv[0] not in SINGLE else None  # `harness session`
    if isinstance(alone, Group) and alone.alone_is_help:
        print(render_group(" ".join(argv), alone))
        raise SystemExit(output.USAGE)  # as Typer: a group named alone is a usage error that shows the help
    parsed = parse_fast(argv)
    if parsed is not None:
        spec, opts, values = parsed
        spec.run(opts, values)
        return True
    if argv[:2] == ["daemon", "status"] and (given := _parse(argv[2:], DAEMON_STATUS_OPTIONS)) is not None:
        opts = Options().merge(bool(given.get("json")), given.get("home"), None, None)
        daemon_status(opts)
        return True
    if argv[:2] == ["agent", "list"] and (given := _parse(argv[2:], AGENT_LIST_OPTIONS)) is not None:
        opts = Options().merge(bool(given.get("json")), given.get("home"), given.get("socket"), None)
        opts.wide = bool(given.get("wide"))
        agent_list(opts)
        return True
    return False


# --- harness daemon status ----------------------------------------------------------------------------------


def running(opts: Options, home: Path) -> dict[str, Any]:
    """What a daemon that answers on its socket says of itself (daemon_status), or exit 3."""
    where: Path | None = None
    try:
        where, info = locate_socket(home, None)
        assert info is not None
        with Client(where) as client:
            capabilities = client.check_compatible()
            status = client.request("daemon_status", owner_token=homes.read_owner_token(home))
    except Unreachable as error:
        fail(opts, output.UNREACHABLE, "unreachable", error.detail)
    except (Uncertain, RemoteError) as error:
        detail = f"the daemon at {where} does not answer: {error.detail}"
        fail(opts, output.UNREACHABLE, "unreachable", detail)
    if capabilities.get("machineId") != info.get("machineId"):
        detail = f"{where} is another daemon's socket; {home} has no daemon"
        fail(opts, output.UNREACHABLE, "unreachable", detail)
    return {**status, "home": str(home), "running": True}


def daemon_status(opts: Options) -> None:
    show(opts, running(opts, homes.resolve_home(opts.home)), output.show_mapping)


# --- harness agent list -------------------------------------------------------------------------------------


def show_observation(observation: dict[str, Any], look: output.Look) -> None:
    safe = "safe to write" if observation["safeToWrite"] else "not safe to write"
    flags = [name for name in ("busy", "draft", "dialog") if observation[name]]
    output.say(f"{observation['state']} ({safe}{'; ' + ', '.join(flags) if flags else ''})", look)
    for line in observation["evidence"]:
        output.say(f"  | {line}", look)


def _observe(entry: dict[str, Any]) -> Observation:
    """What the desk would see on the agent's pane now (inbox-only and plain-shell panes read offline)."""
    import trio  # only when there is a pane to look at

    from harness.io.tmux import LOOK_SECONDS, AgentTerminal, ProcessRunner, look

    pane = entry.get("tmux") or {}
    socket = str(pane.get("socket"))
    terminal = AgentTerminal(
        str(entry.get("agentId")),
        str(entry.get("engine")),
        socket,
        str(pane.get("target")),
        inbox_only=entry.get("inboxOnly") is True,
    )
    runner = ProcessRunner(socket, deadline=LOOK_SECONDS)  # a stuck server shows its agents offline
    return trio.run(lambda: look(runner, terminal)).observation


def with_observation(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "observation": _observe(entry).to_json()}


def show_agents(result: dict[str, Any], look: output.Look) -> None:
    agents = result["agents"]
    if not agents:
        output.say("no agents registered on this machine", look)
        return
    ids = output.short_ids((str(a.get("agentId")) for a in agents), look.wide)
    rows = []
    for agent in agents:
        pane = agent.get("tmux") or {}
        state = agent["observation"]["state"] + ("  inbox-only" if agent.get("inboxOnly") is True else "")
        where = f"{pane.get('target')}@{pane.get('socket')}"
        rows.append([ids[str(agent.get("agentId"))], agent.get("name"), agent.get("engine"), state, where])
    columns = ["agent", "name", "engine", "screen", "tmux pane@server"]
    output.print_table("Agents", columns, rows, look, ids=4)


def agent_list(opts: Options) -> None:
    result = call(opts, "agent_list", team=False)
    agents = [with_observation(agent) for agent in result.get("agents", [])]
    show(opts, {**result, "agents": agents}, show_agents)


# --- the help of every other command, read from its Typer declarations ------------------------------------
# `harness GROUP [COMMAND] --help` is rendered from the source of the module that declares the group (with
# `ast`, not by importing it: importing Typer alone takes a third of the time a command may take, and the
# modules behind `check` or `session` far more). What is read is what Typer reads: the decorators, each
# parameter's `typer.Option`/`typer.Argument`, the docstrings. A declaration this reader cannot follow (a
# name it cannot evaluate, a command registered in a loop) makes it give up, and Typer renders the help;
# tests/test_cli_fast.py keeps the two equal in substance for every command.

# Where each top-level command is declared: (module, attribute), a Typer group or a command function. The
# Typer application (cli/app.py) adds each from here, with TOP's text as its help.
DECLARED: dict[str, tuple[str, str]] = {
    "team": ("harness.cli.app", "team_app"),
    "agent": ("harness.cli.agent", "app"),
    "daemon": ("harness.cli.app", "daemon_app"),
    "pair": ("harness.cli.pair", "pair_app"),
    "relay": ("harness.cli.relay", "relay_app"),
    "web": ("harness.cli.app", "web"),
    "doctor": ("harness.cli.app", "doctor"),
    "demo": ("harness.cli.app", "demo"),
    "check": ("harness.cli.check", "check_command"),
    "trace": ("harness.cli.trace", "trace_app"),
    "session": ("harness.cli.session", "session_app"),
    "selfedit": ("harness.cli.selfedit", "selfedit_command"),
    "eval": ("harness.cli.eval", "eval_app"),
    "channels": ("harness.cli.channels", "app"),
}
# The top-level commands that are one command, not a group of them (each is a function where DECLARED says).
SINGLE = frozenset({"web", "doctor", "demo", "check", "selfedit"})
# Modules whose constants a declaration may name and that the fast path imports anyway.
_CHEAP = {"harness.cli.fast", "harness.cli.commands", "harness.cli.output"}
# What Typer shows for a value of each type.
_METAVARS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "Path": "PATH", "bool": ""}


UNKNOWN = object()  # a default the reader does not compute: the help does not show it


class Unreadable(Exception):
    """A declaration the reader cannot follow: Typer renders that help."""


@dataclass
class Param:
    flags: tuple[str, ...]  # () for an argument
    metavar: str
    help: str
    required: bool
    default: Any


@dataclass
class Command:
    help: str
    short_help: str | None
    params: list[Param]


@dataclass
class Group:
    help: str
    commands: dict[str, Command | Group] = field(default_factory=dict)
    complete: bool = True  # False when something else registers commands on it (in a loop, say)
    alone_is_help: bool = (
        False  # `harness GROUP` alone prints the help (and exits 2), as Typer's no_args_is_help
    )


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n", maxsplit=1)[0].split())


class Declarations:
    """The Typer declarations of one module, read from its source."""

    def __init__(self, module: str) -> None:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise Unreadable(module)
        self.tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        self.names: dict[str, ast.AST] = {}
        for node in self.tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                self.names[node.targets[0].id] = node.value
            elif isinstance(node, ast.FunctionDef):
                self.names[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.names[alias.asname or alias.name] = ast.ImportFrom(node.module, [alias], 0)

    def value(self, node: ast.AST | None, local: dict[str, Any] | None = None) -> Any:
        """The value of a constant expression: literals, names of module constants, `+`, subscripts."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if local is not None and node.id in local:
                return local[node.id]
            found = self.names.get(node.id)
            if isinstance(found, ast.ImportFrom) and found.module in _CHEAP:
                return getattr(importlib.import_module(found.module), found.names[0].name)
            if isinstance(found, ast.expr):
                return self.value(found)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left, local) + self.value(node.right, local)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.value(node.operand, local)
        if isinstance(node, ast.Subscript):
            return self.value(node.value, local)[self.value(node.slice, local)]
        if isinstance(node, ast.Dict):
            return {
                self.value(k, local): self.value(v, local)
                for k, v in zip(node.keys, node.values, strict=True)
            }
        raise Unreadable(ast.dump(node) if node is not None else "nothing")

    def _default(self, node: ast.expr, local: dict[str, Any]) -> Any:
        """A parameter's default, or UNKNOWN when computed (from a module the reader does not import)."""
        try:
            return self.value(node, local)
        except Unreadable:
            return UNKNOWN

    def _typer_call(self, node: ast.AST) -> tuple[str, ast.Call] | None:
        """("Option" or "Argument", the call) when `node` is `typer.Option(...)` or `typer.Argument(...)`."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base, what = node.func.value, node.func.attr
            if isinstance(base, ast.Name) and base.id == "typer" and what in ("Option", "Argument"):
                return what, node
        return None

    def _annotation(self, node: ast.AST) -> ast.AST:
        """An annotation with the aliases it names (`JsonOpt = Annotated[...]`) replaced by their value."""
        while isinstance(node, ast.Name) and isinstance(self.names.get(node.id), ast.Subscript):
            node = self.names[node.id]
        return node

    def _kind(self, node: ast.AST) -> tuple[str, bool]:
        """The type of one value ("str", "int", ...) and whether the parameter takes a list of them."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # T | None
            sides = [side for side in (node.left, node.right) if not _is_none(side)]
            if len(sides) == 1:
                return self._kind(sides[0])
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "list":
            return self._kind(node.slice)[0], True
        if isinstance(node, ast.Name) and node.id in _METAVARS:
            return node.id, False
        raise Unreadable(ast.dump(node))

    def param(self, argument: ast.arg, default: ast.expr | None, local: dict[str, Any]) -> Param | None:
        """One parameter as Typer shows it; None for the context Typer passes."""
        if default is not None and self._typer_call(default):
            raise Unreadable(argument.arg)  # the old `= typer.Option(...)` form: Typer reads it
        annotation = self._annotation(argument.annotation) if argument.annotation else None
        if isinstance(annotation, ast.Attribute) and annotation.attr == "Context":
            return None
        info: tuple[str, ast.Call] | None = None
        if (
            isinstance(annotation, ast.Subscript)
            and isinstance(annotation.value, ast.Name)
            and annotation.value.id == "Annotated"
            and isinstance(annotation.slice, ast.Tuple)
        ):
            annotation, *extras = annotation.slice.elts
            info = next((found for e in extras if (found := self._typer_call(e))), None)
        if annotation is None:
            raise Unreadable(argument.arg)
        kind, many = self._kind(annotation)
        keywords = {} if info is None else {k.arg: k.value for k in info[1].keywords}
        if info is not None and info[1].args:
            decls = tuple(self.value(a, local) for a in info[1].args)
        else:
            decls = (f"--{argument.arg.replace('_', '-')}",)
        is_option = info[0] == "Option" if info else default is not None
        metavar = self.value(keywords["metavar"], local) if "metavar" in keywords else None
        value = None if default is None else self._default(default, local)
        about = self.value(keywords["help"], local) if "help" in keywords else ""
        if "hidden" in keywords:
            raise Unreadable(argument.arg)  # a hidden option: rare enough to leave to Typer
        if is_option:
            shown = _METAVARS[kind] + ("..." if many and kind != "bool" else "")
            return Param(decls, metavar or shown, about, default is None, value)
        return Param((), metavar or argument.arg.upper(), about, default is None, value)

    def command(self, function: ast.FunctionDef, keywords: dict[str, Any], local: dict[str, Any]) -> Command:
        arguments = function.args
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(arguments.defaults))
        pairs = [*zip(positional, [*defaults, *arguments.defaults], strict=True)]
        pairs += [*zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]
        params = [found for a, d in pairs if (found := self.param(a, d, local)) is not None]
        about = keywords.get("help") or local.get(f"{function.name}.__doc__") or ast.get_docstring(function)
        return Command(about or "", keywords.get("short_help"), params)

    def group(self, variable: str) -> Group:
        """The Typer group assigned to `variable` at module level, with what is registered on it."""
        made = self.names.get(variable)
        if not (
            isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and made.func.attr == "Typer"
        ):
            raise Unreadable(variable)
        keywords = {k.arg: k.value for k in made.keywords}
        group = Group(self.value(keywords["help"]) if "help" in keywords else "")
        group.alone_is_help = (
            "no_args_is_help" in keywords and self.value(keywords["no_args_is_help"]) is True
        )
        self._register(self.tree.body, variable, group, {})
        return group

    def _registration(
        self, node: ast.expr, variable: str, local: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """(what, keywords) when `node` is `variable.command(...)` or `variable.callback(...)`."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return None
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == variable):
            return None
        keywords = {k.arg: self.value(k.value, local) for k in node.keywords if k.arg}
        if node.func.attr == "command" and node.args:
            keywords["name"] = self.value(node.args[0], local)
        return node.func.attr, keywords

    def _add(
        self, group: Group, function: ast.FunctionDef, how: tuple[str, dict[str, Any]], local: dict[str, Any]
    ) -> None:
        what, keywords = how
        if what == "callback":
            group.help = group.help or keywords.get("help") or ast.get_docstring(function) or ""
            if self.command(function, keywords, local).params:
                group.complete = False  # options of the group itself: Typer shows them
        elif what == "command" and keywords.get("hidden") is True:
            return  # Typer lists it nowhere
        elif what == "command":
            name = keywords.get("name") or function.name.lower().replace("_", "-")
            group.commands[name] = self.command(function, keywords, local)
        else:
            group.complete = False

    def _register(self, body: list[ast.stmt], variable: str, group: Group, local: dict[str, Any]) -> None:
        """Follow the statements of `body` that register commands on `variable`: decorators, calls of the
        form `variable.command(NAME)(FUNCTION)`, `variable.add_typer(...)`, and calls of module functions
        that do so with their arguments."""
        functions: dict[str, ast.FunctionDef] = {}
        registrars = {variable} | {
            name
            for name, node in self.names.items()
            if isinstance(node, ast.FunctionDef)
            and any(isinstance(n, ast.Name) and n.id == variable for n in ast.walk(node))
        }
        for statement in body:
            if isinstance(statement, ast.FunctionDef):
                functions[statement.name] = statement
                for decorator in statement.decorator_list:
                    how = self._registration(decorator, variable, local)
                    if how is not None:
                        self._add(group, statement, how, local)
                continue
            made = isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == variable
            mentions = not made and any(
                isinstance(n, ast.Name) and n.id in registrars for n in ast.walk(statement)
            )
            call = statement.value if isinstance(statement, ast.Expr) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Call) and len(call.args) == 1:
                how = self._registration(call.func, variable, local)
                target = call.args[0]
                if how is not None and isinstance(target, ast.Name) and target.id in functions:
                    self._add(group, functions[target.id], how, local)
                    continue
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_typer"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == variable
            ):
                keywords = {k.arg: k.value for k in call.keywords}
                if not (len(call.args) == 1 and isinstance(call.args[0], ast.Name) and "name" in keywords):
                    raise Unreadable("add_typer")
                sub = self.group(call.args[0].id)
                if "help" in keywords:
                    sub.help = self.value(keywords["help"], local)
                group.commands[self.value(keywords["name"], local)] = sub
                continue
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and local == {}:
                helper = self.names.get(call.func.id)
                if isinstance(helper, ast.FunctionDef) and any(
                    isinstance(n, ast.Name) and n.id == variable for n in ast.walk(helper)
                ):
                    names = [a.arg for a in helper.args.args]
                    if call.keywords or len(call.args) != len(names):
                        raise Unreadable(call.func.id)
                    bound = {name: self.value(arg) for name, arg in zip(names, call.args, strict=True)}
                    self._register(helper.body, variable, group, bound)
                    continue
            if isinstance(statement, ast.Assign) and local:
                target = statement.targets[0]
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "__doc__"
                    and isinstance(target.value, ast.Name)
                ):
                    local[f"{target.value.id}.__doc__"] = self.value(statement.value, local)
                    continue
            if mentions:
                group.complete = False


@functools.cache
def declarations(module: str) -> Declarations:
    """A module's declarations, read once per process (the fuzz test asks for the help thousands of times)."""
    return Declarations(module)


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _flags_row(param: Param) -> str:
    return ", ".join(param.flags) + (f" {param.metavar}" if param.metavar else "")


def _about(param: Param) -> str:
    """The help of a parameter with what Typer adds to it: required, or the default when there is one."""
    if param.required:
        return f"{param.help} [required]".strip()
    if not any(param.default is nothing for nothing in (None, False, "", UNKNOWN)):
        return f"{param.help} [default: {param.default}]".strip()
    return param.help


def _short(entry: Command | Group) -> str:
    if isinstance(entry, Command) and entry.short_help:
        return entry.short_help
    return _first_paragraph(entry.help)


HELP_OPTION = ("--help", "Show this message and exit.")


def render_group(path: str, group: Group) -> str:
    lines = [f"Usage: harness {path} [OPTIONS] COMMAND [ARGS]...", *_paragraphs(group.help)]
    lines += ["", "Options:", *_entries([HELP_OPTION]), "", "Commands:"]
    lines += _entries([(name, _short(entry)) for name, entry in group.commands.items()])
    return "\n".join(lines)


def render_command(path: str, command: Command) -> str:
    arguments = [p for p in command.params if not p.flags]
    shown = [p.metavar if p.required or p.metavar.startswith("[") else f"[{p.metavar}]" for p in arguments]
    lines = [" ".join([f"Usage: harness {path} [OPTIONS]", *shown]), *_paragraphs(command.help)]
    if arguments:
        lines += ["", "Arguments:", *_entries([(p.metavar, _about(p)) for p in arguments])]
    options = [(_flags_row(p), _about(p)) for p in command.params if p.flags]
    lines += ["", "Options:", *_entries([*options, HELP_OPTION])]
    return "\n".join(lines)


@functools.cache
def _top(name: str) -> Command | Group | None:
    """`harness NAME` as its declarations say, with TOP's text as a group's help (as cli/app.py adds it);
    None when the reader cannot tell. Read once per process."""
    module, attribute = DECLARED[name]
    try:
        source = declarations(module)
        found = source.names.get(attribute)
        if name in SINGLE and isinstance(found, ast.FunctionDef):
            return source.command(found, {}, {})
        return replace(source.group(attribute), help=TOP[name])
    except Unreadable:
        return None


def declared(words: list[str]) -> Command | Group | None:
    """What `harness WORDS` names, read from its declarations; None when the reader cannot tell."""
    if not words or words[0] not in DECLARED or words[0] == "team":
        return None
    entry = _top(words[0])
    for word in words[1:]:
        if not isinstance(entry, Group) or not entry.complete or word not in entry.commands:
            return None
        entry = entry.commands[word]
    if isinstance(entry, Group) and not entry.complete:
        return None
    return entry


def declared_help(argv: list[str]) -> str | None:
    """The help `harness WORD... --help` asks for, when its words name a command or group the reader can
    read (no option before `--help`: Typer reads those)."""
    if len(argv) < 2 or argv[-1] != "--help" or any(word.startswith("-") for word in argv[:-1]):
        return None
    entry = declared(argv[:-1])
    if entry is None:
        return None
    path = " ".join(argv[:-1])
    return render_group(path, entry) if isinstance(entry, Group) else render_command(path, entry)
