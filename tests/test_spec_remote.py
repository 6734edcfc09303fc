# The remote spec's tables are the code's: a bound, channel, refusal, error code or frame kind of the
# layer between machines (io/seal.py, io/relay.py, io/pairing.py, io/remote.py, and io/throttled_log.py that
# bounds their refusal logs) changes spec/remote-v1.md in the same commit, or this fails.
#
# How the code side is read, and why it is robust:
# - Bounds: each row's `where` names the code (`module.NAME`, `module.Class.field` of an attrs class, read
#   on a default instance, or `module.Callable(param)` for a signature default); a literal without a name is
#   `module.function: code text`, which must occur in that function's source. The `number` column is a
#   Python number expression (`1 << 48`), evaluated here without `eval` and compared with value and type.
#   Completeness is checked the other way too: every numeric `Final` constant, every RelayLimits field and
#   every numeric literal default of a signature in those modules must have its row.
# - Channels: the branches of `RemoteNode._execute` are read from its syntax tree (`channel == "..."`, and the
#   `message["..."]` fields each branch reads), not by text search; and each channel is then sent a request,
#   built from the table's fields, to a real node in-process, which must answer with the table's response key.
# - Refusals and codes: the string constants `SealError`, `PairingError`, `RemoteUnavailable`, `error_frame`,
#   relay notices and `"error":` responses are raised or built with, read from the modules' syntax trees
#   (names resolved in the module). Each seal refusal is also produced for real and must change no state.
from __future__ import annotations

import ast
import inspect
import json
import operator
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from harness.cli import output
from harness.cli import pair as pair_cli
from harness.core import bounded_json, remote_grant
from harness.core import delivery as d
from harness.core.codec import desk_command_to_json
from harness.core.errors import ErrorCode
from harness.io import pairing, relay, remote, remote_client, seal, throttled_log
from harness.io.team_delivery import DeliveryReport
from tests.spec_tables import read_table

SPEC = "remote-v1.md"
MODULES: dict[str, ModuleType] = {
    "relay": relay,
    "seal": seal,
    "pairing": pairing,
    "remote": remote,
    "remote_client": remote_client,
    "throttled_log": throttled_log,
}

_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.LShift: operator.lshift,
}


def _number(text: str) -> int | float:
    """A number written as a Python expression of literals and + - * // <<, evaluated without eval."""

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise AssertionError(f"not a number expression: {text!r}")

    return value(ast.parse(text, mode="eval").body)  # type: ignore[no-any-return]


def _resolve(path: str) -> Any:
    """`module.a.b`: attributes from a module; an attrs class on the way is read on its default instance."""
    module, *names = path.split(".")
    obj: Any = MODULES[module]
    for name in names:
        if isinstance(obj, type) and attrs.has(obj):
            obj = obj()
        obj = getattr(obj, name)
    return obj


def _source(obj: Any) -> str:
    return textwrap.dedent(inspect.getsource(obj))


def _tree(module: ModuleType) -> ast.Module:
    return ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))


def _strings(node: ast.expr, module: ModuleType) -> Iterator[str]:
    """The string a code expression stands for when it is a literal or a module-level name; else nothing."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Name) and isinstance(getattr(module, node.id, None), str):
        yield getattr(module, node.id)


def _calls(module: ModuleType, callee: str) -> Iterator[ast.Call]:
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            if name == callee:
                yield node


def _call_args(module: ModuleType, callee: str, position: int) -> set[str]:
    return {
        text
        for call in _calls(module, callee)
        if len(call.args) > position
        for text in _strings(call.args[position], module)
    }


# --- bounds -------------------------------------------------------------------------------------------------


def _bounds() -> list[dict[str, str]]:
    return read_table(SPEC, "remote-bounds")


def test_bounds_table_equals_code() -> None:
    for row in _bounds():
        number, where = _number(row["number"]), row["where"]
        if ": " in where:  # a literal in a function's code
            path, code = where.split(": ", 1)
            assert code in _source(_resolve(path)), f"{row['bound']}: {code!r} is not in {path}"
            assert row["number"] in code, f"{row['bound']}: the number must be the one in {code!r}"
            continue
        if where.endswith(")"):  # a signature default: module.Callable(param)
            path, param = where[:-1].split("(")
            actual = inspect.signature(_resolve(path)).parameters[param].default
        else:
            actual = _resolve(where)
        assert (type(number), number) == (type(actual), actual), f"{row['bound']} ({where}) is {actual!r}"


def _frame_kind_constants() -> set[str]:
    return {"seal.SEALED", "pairing.PAIR_REQUEST", "pairing.PAIR_REPLY"}


def test_every_numeric_constant_of_the_layer_has_a_row() -> None:
    wheres = {row["where"] for row in _bounds()}
    for name, module in MODULES.items():
        for node in _tree(module).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if "Final" not in ast.unparse(node.annotation):
                    continue
                value = getattr(module, node.target.id)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    path = f"{name}.{node.target.id}"
                    assert path in wheres or path in _frame_kind_constants(), f"{path} has no bound row"
    for field in attrs.fields(relay.RelayLimits):
        assert f"relay.RelayLimits.{field.name}" in wheres


def _literal_defaults(module: ModuleType) -> Iterator[tuple[str, str]]:
    """(Callable, param) of each numeric literal default in the module's signatures (__init__: its class)."""

    def visit(body: list[ast.stmt], owner: str | None) -> Iterator[tuple[str, str]]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                positional = args.posonlyargs + args.args
                with_defaults = positional[len(positional) - len(args.defaults) :]
                pairs = list(zip(with_defaults, args.defaults, strict=True))
                pairs += [
                    (a, v) for a, v in zip(args.kwonlyargs, args.kw_defaults, strict=True) if v is not None
                ]
                if owner is None:
                    name = node.name
                else:
                    name = owner if node.name == "__init__" else f"{owner}.{node.name}"
                for arg, default in pairs:
                    if isinstance(default, ast.Constant) and type(default.value) in (int, float):
                        yield name, arg.arg

    yield from visit(_tree(module).body, None)


def test_every_literal_default_of_the_layer_has_a_row() -> None:
    wheres = {row["where"] for row in _bounds()}
    not_bounds = {"relay.Relay.serve(port)"}  # 0 means "pick a free port", not a bound
    for name, module in MODULES.items():
        for callable_name, param in _literal_defaults(module):
            path = f"{name}.{callable_name}({param})"
            assert path in wheres or path in not_bounds, f"{path} has no bound row"


# --- channels -----------------------------------------------------------------------------------------------


def _dispatched_channels() -> dict[str, set[str]]:
    """Channel -> the `message[...]` fields its branch reads, from the syntax tree of RemoteNode._execute."""
    tree = ast.parse(_source(remote.RemoteNode._execute))
    branches: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "channel":
            assert len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq), "dispatch is `channel == ...` only"
            assert isinstance(node.comparators[0], ast.Constant), "a channel is a string literal"
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, (right,) = node.test.left, node.test.comparators
            if isinstance(left, ast.Name) and left.id == "channel" and isinstance(right, ast.Constant):
                branches[str(right.value)] = {
                    str(sub.slice.value)
                    for stmt in node.body
                    for sub in ast.walk(stmt)
                    if isinstance(sub, ast.Subscript)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "message"
                    and isinstance(sub.slice, ast.Constant)
                }
    return branches


def _channels() -> list[dict[str, str]]:
    return read_table(SPEC, "remote-channels")


def _fields(row: dict[str, str]) -> set[str]:
    return {field.strip() for field in row["request fields"].split(",")}


def test_channel_table_equals_the_channels_the_node_dispatches() -> None:
    assert {row["channel"]: _fields(row) for row in _channels()} == _dispatched_channels()


class _Desk:
    """This machine's desk as the node sees it: takes every owner request, reports what it holds."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def _take(self, command: object) -> None:
        self.requests.append(command)

    submit = hold = release = cancel = consume = _take

    async def status(self, team_id: str, notice_ids: list[str]) -> list[DeliveryReport]:
        return [DeliveryReport(team_id, n, "queued", "offline") for n in notice_ids]


async def test_each_channel_answers_a_request_built_from_the_table(tmp_path: Path) -> None:
    team, notice = "t-spec", "t-spec/q1/question"
    samples: dict[str, object] = {
        "frame": json.dumps({"type": "team", "requestId": "r1", "action": "get", "teamId": team}),
        "command": desk_command_to_json(d.Hold(0, team)),  # binds the team's owner here (section 5.2)
        "commands": [desk_command_to_json(d.Release(0, team))],
        "teamId": team,
        "noticeIds": [notice],
        "report": {"teamId": team, "noticeId": notice, "state": "queued", "reason": "offline"},
    }
    node = remote.RemoteNode(tmp_path / "home", log=lambda line: None)
    reports: list[DeliveryReport] = []
    frames: list[str] = []

    async def ledger(frame: str, origin: str) -> remote.TeamAnswer:
        frames.append(frame)
        return remote.TeamAnswer(json.dumps({"type": "team_result", "requestId": "r1", "result": {}}))

    async def report(item: DeliveryReport) -> None:
        reports.append(item)

    node.local_delivery, node.report_local, node._handle_team = _Desk(), report, ledger
    peer = pairing.Peer("machine-owner", seal.Identity.generate().public, "ws://127.0.0.1:1", 0)
    node._learn_holder(team, peer.machine_id)  # it was sent notices of the team: it may report on them
    for row in _channels():  # in table order: the delivery hold binds the owner that status then needs
        message: dict[str, object] = {"k": "req", "id": row["channel"], "ch": row["channel"]}
        message |= {field: samples[field] for field in _fields(row)}
        response = await node._execute(peer, message)
        assert "error" not in response, (row["channel"], response)
        assert set(response) == {row["response"].split(":")[0]}, (row["channel"], response)
    assert await node._execute(peer, {"ch": "no-such-channel"}) == {
        "error": "bad_request",
        "detail": "unknown channel 'no-such-channel'",
    }
    assert len(frames) == 1 and "ownerToken" in json.loads(frames[0])  # `get` is an observation
    assert len(reports) == 1
    stranger = attrs.evolve(peer, machine_id="machine-stranger")  # never sent a notice of the team
    refused = await node._execute(stranger, {"ch": "report", "report": samples["report"]})
    assert refused["error"] == "not_found" and len(reports) == 1
    assert (await node._execute(peer, {"ch": "report", "report": []}))["error"] == "bad_request"


def test_observation_actions_equal_code() -> None:
    rows = read_table(SPEC, "observation-actions")
    assert {row["action"] for row in rows} == remote.OBSERVATION_ACTIONS


def test_frame_kinds_equal_code() -> None:
    rows = read_table(SPEC, "frame-kinds")
    spec = {int(row["byte"], 16) for row in rows}
    assert spec == {seal.SEALED, remote.UNPAIRED_BLOB[0], pairing.PAIR_REQUEST, pairing.PAIR_REPLY}
    # The node's receive loop dispatches on every kind but the pairing reply (`pair accept` waits for it).
    dispatched = set()
    for node in ast.walk(ast.parse(_source(remote.RemoteNode._receive_loop))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "kind":
            code = compile(ast.Expression(node.comparators[0]), "<kind>", "eval")
            dispatched.add(eval(code, vars(remote))[0])  # the node's own expression
    assert dispatched == spec - {pairing.PAIR_REPLY}


# --- refusals and codes -------------------------------------------------------------------------------------


def test_seal_refusals_equal_the_reasons_seal_error_is_raised_with() -> None:
    spec = {row["reason"] for row in read_table(SPEC, "seal-refusals")}
    assert spec == _call_args(seal, "SealError", 0)
    assert _call_args(remote, "_refused", 1) <= spec  # the node's own refusals use the same reasons


def _receiver_state(receiver: seal.ReceiveSession) -> tuple[object, ...]:
    mark = receiver.path.read_bytes() if receiver.path.exists() else b""
    return receiver.epoch, receiver.hwm, receiver.seen, mark


def test_each_seal_refusal_happens_as_the_table_says_and_changes_no_state(tmp_path: Path) -> None:
    a, b = seal.Identity.generate(), seal.Identity.generate()
    sender = seal.SendSession(tmp_path / "send.json", a, b.public, block=4, rekey_at=8)
    receiver = seal.ReceiveSession(tmp_path / "recv.json", b, a.public, window=4)
    seen: set[str] = set()

    def refused(reason: str, frame: bytes) -> None:
        before = _receiver_state(receiver)
        try:
            receiver.open(frame)
        except seal.SealError as error:
            assert error.reason == reason
        else:
            raise AssertionError(f"{reason}: the frame was accepted")
        assert _receiver_state(receiver) == before, f"a {reason} frame changed the receiver"
        seen.add(reason)

    first, second = sender.seal(b"1"), sender.seal(b"2")
    assert receiver.open(second) == b"2"
    refused("malformed", second[: seal.OVERHEAD - 1])
    refused("malformed", b"\x09" + second[1:])
    tampered = bytearray(sender.seal(b"3"))
    tampered[-1] ^= 1
    refused("forged", bytes(tampered))
    refused("forged", seal.SendSession(tmp_path / "other.json", b, b.public).seal(b"not from a"))
    refused("replay", second)
    while sender.epoch == 1:
        newer = sender.seal(b"next epoch")
    assert receiver.open(newer) == b"next epoch"
    refused("stale", first)
    refused("replay", newer)

    last = tmp_path / "last.json"
    state = {"epoch": seal.MAX_EPOCH, "ephemeral": seal.b64(bytes(32)), "reserved": 8}
    last.write_text(json.dumps(state))
    try:
        seal.SendSession(last, a, b.public, block=4, rekey_at=8).seal(b"one more")
    except seal.SealError as error:
        assert error.reason == "exhausted"
    else:
        raise AssertionError("a sender past its last epoch sealed a frame")
    assert json.loads(last.read_text()) == state
    assert seen | {"exhausted"} == {row["reason"] for row in read_table(SPEC, "seal-refusals")}


def test_relay_notices_equal_code() -> None:
    spec = {row["notice"] for row in read_table(SPEC, "relay-notices")}
    assert spec == _call_args(relay, "_notice", 1)


def _relay_counters() -> tuple[set[str], set[str]]:
    """(counters `Relay._refused` is called with, `PREFIX_REASON` for those named by an f-string; every
    counter the relay increments by a literal key)."""
    refused: set[str] = set()
    for call in _calls(relay, "_refused"):
        name = call.args[0]
        if isinstance(name, ast.JoinedStr) and isinstance(name.values[0], ast.Constant):
            refused.add(f"{name.values[0].value}REASON")
        refused |= set(_strings(name, relay))
    counted = {
        node.target.slice.value
        for node in ast.walk(_tree(relay))
        if isinstance(node, ast.AugAssign)
        and isinstance(node.target, ast.Subscript)
        and isinstance(node.target.slice, ast.Constant)
        and ast.unparse(node.target.value) == "self.stats"
    }
    return refused, counted


def _names(reason: str, text: str) -> bool:
    return re.search(rf"\b{reason}\b", text) is not None


def test_relay_refusals_equal_code() -> None:
    table = read_table(SPEC, "relay-refusals")
    rows = {name.strip(): row for row in table for name in row["counter"].split(",")}
    refused, counted = _relay_counters()
    for name in refused:
        prefix, _, reason = name.partition("_")
        row = rows.get(name) or rows.get(f"{prefix}_REASON")
        assert row is not None, f"relay counter {name} has no row"
        assert name in rows or _names(reason, row["when"]), f"the {prefix}_REASON row does not name {reason}"
    assert set(rows) <= refused | counted, set(rows) - refused - counted
    # The reasons a hello or frame is refused for: the bounded parser's, and the relay's own for a hello.
    parser = _call_args(bounded_json, "JsonRefused", 0)
    proven = list(ast.walk(ast.parse(_source(relay._proven_key))))
    own = {text for n in proven if isinstance(n, ast.Return) and n.value for text in _strings(n.value, relay)}
    own |= {text for n in proven if isinstance(n, ast.IfExp) for text in _strings(n.orelse, relay)}
    assert own == {"binary", "shape", "proof"}
    for reason in parser | own:
        assert _names(reason, rows["hello_REASON"]["when"]), reason
    for reason in parser | {"binary", "shape"}:
        assert _names(reason, rows["frame_REASON"]["when"]), reason


def test_pairing_refusals_equal_code() -> None:
    rows = read_table(SPEC, "pairing-refusals")
    built = _call_args(pairing, "PairingError", 0)
    for node in ast.walk(_tree(pairing)):  # the refusals A answers in its reply: {"ok": False, "error": ...}
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "error":
                    built |= set(_strings(value, pairing))
    assert {row["code"] for row in rows} == built
    # `harness pair`: offline is "unreachable" (3), every other refusal a protocol error (1).
    rule = "output.UNREACHABLE if code == pairing.OFFLINE else output.PROTOCOL_ERROR"
    assert rule in _source(pair_cli._fail)
    for row in rows:
        expected = output.UNREACHABLE if row["code"] == pairing.OFFLINE else output.PROTOCOL_ERROR
        assert int(row["CLI exit"]) == expected, row


def _grant_codes() -> set[str]:
    """The codes of core/remote_grant.py's refusals (`reject(E.NAME, ...)`, E being ErrorCode)."""
    return {
        ErrorCode[node.args[0].attr].value
        for node in ast.walk(_tree(remote_grant))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "reject"
        and isinstance(node.args[0], ast.Attribute)
    }


def test_remote_error_codes_equal_code() -> None:
    rows = read_table(SPEC, "remote-errors")
    codes = _call_args(remote, "RemoteUnavailable", 0) | _call_args(remote, "_fail_address", 1)
    codes |= _call_args(remote, "error_frame", 1)
    codes |= _call_args(relay, "_notice", 1)  # a relay notice becomes a request's failure as it is
    for node in ast.walk(_tree(remote)):
        if isinstance(node, ast.Dict):  # responses: {"error": CODE, ...}
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "error":
                    codes |= set(_strings(value, remote))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "failure" for t in node.targets
        ):
            codes |= set(_strings(node.value, remote))
    codes |= _grant_codes()  # a desk command's refusal is the grant's own (core `admit`, `rendered_here`)
    assert {row["code"] for row in rows} == codes
    # The gateway closes the connection on `uncertain` (the CLI's exit 4); any other code is an error frame.
    assert "if error.code == UNCERTAIN:" in _source(remote.RemoteNode._gateway_answer)
    for row in rows:
        expected = output.UNCERTAIN if row["code"] == remote.UNCERTAIN else output.PROTOCOL_ERROR
        assert int(row["CLI exit"]) == expected, row


def test_a_peer_remembers_at_least_as_many_answered_requests_as_its_replay_window_admits() -> None:
    # An old frame the window still admits must find its request id answered, or it would be served again.
    assert remote.DONE_CACHE >= seal.DEFAULT_WINDOW
