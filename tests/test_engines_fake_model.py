# The scripted fake model without any engine: each provider protocol it speaks (Anthropic Messages SSE,
# OpenAI Responses SSE, Gemini streamGenerateContent / generateContent) answered the way the real CLIs need
# (a shell tool call from the script, the final text after the tool result, plain text for side requests,
# schema-shaped JSON for Gemini's router), the script's templates and answer files, gates that hold an answer
# until released, and the control API over TCP and the Unix socket. Fast; runs everywhere.
from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engines.fake_model import (
    FakeModelClient,
    FakeModelServer,
    Script,
    anthropic_conversation,
    decide,
    schema_instance,
    serve,
)

SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "when_regex": r"reply (?P<qid>Q\d+)",
            "run": "harness reply {{qid}} {{answer|q}}",
            "answer_file": "answers/{{qid}}.txt",
            "final": "Answered {{qid}}.",
        },
        {"when": "two steps", "run": ["echo one", "echo two"], "final": "Both ran."},
        {"when": "just talk", "text": "Hello there."},
        {"when": "held", "text": "Released.", "gate": "g", "gate_timeout": 10},
    ],
    "default": "Nothing scripted.",
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeModelServer]:
    (tmp_path / "answers").mkdir()
    (tmp_path / "answers" / "Q7.txt").write_text("it's 42\n", encoding="utf-8")
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(SCRIPT), encoding="utf-8")
    running = serve(Script.load(script_file), unix_path=tmp_path / "fake.sock")
    yield running
    running.close()


def post(server: FakeModelServer, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        event, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            events.append((event, data))
    return events


BASH = [{"name": "Bash", "input_schema": {}}]


def test_anthropic_tool_call_then_final_text(server: FakeModelServer) -> None:
    user = {"role": "user", "content": [{"type": "text", "text": "please reply Q7 now"}]}
    status, kind, raw = post(
        server, "/v1/messages?beta=true", {"stream": True, "tools": BASH, "messages": [user]}
    )
    assert status == 200 and kind == "text/event-stream"
    events = sse(raw)
    assert [e for e, _ in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * (len(events) - 5),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1][1]["content_block"]["name"] == "Bash"
    arguments = json.loads(
        "".join(d["delta"]["partial_json"] for e, d in events if e == "content_block_delta")
    )
    assert arguments["command"] == "harness reply Q7 'it'\"'\"'s 42'"
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

    tool_use = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
    }
    result = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
            {"type": "text", "text": "<system-reminder>ignore me</system-reminder>"},
        ],
    }
    _, _, raw = post(
        server, "/v1/messages", {"stream": True, "tools": BASH, "messages": [user, tool_use, result]}
    )
    events = sse(raw)
    text = "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")
    assert text == "Answered Q7." and events[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_side_requests_get_plain_text(server: FakeModelServer) -> None:
    user = {"role": "user", "content": "reply Q7 please, and name this session"}
    _, _, raw = post(server, "/v1/messages", {"stream": False, "tools": [], "messages": [user]})
    answer = json.loads(raw)
    assert answer["content"][0]["type"] == "text" and answer["stop_reason"] == "end_turn"


def test_responses_function_call_with_escalation(server: FakeModelServer) -> None:
    server.state.script = Script.from_json(
        {"rules": [{"when": "go", "run": "echo hi > out.txt", "escalate": True, "description": "why"}]}
    )
    body: dict[str, Any] = {
        "tools": [{"type": "function", "name": "exec_command"}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        ],
    }
    _, _, raw = post(server, "/v1/responses", body)
    events = sse(raw)
    assert [e for e, _ in events] == [
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    item = events[2][1]["item"]
    assert item["type"] == "function_call" and item["name"] == "exec_command"
    assert json.loads(item["arguments"]) == {
        "cmd": "echo hi > out.txt",
        "sandbox_permissions": "require_escalated",
        "justification": "why",
    }
    assert events[3][1]["response"]["usage"]["total_tokens"] > 0
    body["input"] += [
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    events = sse(post(server, "/v1/responses", body)[2])
    deltas = "".join(d["delta"] for e, d in events if e == "response.output_text.delta")
    assert deltas == "Done."


def test_chat_completions_tool_call_then_final_text(server: FakeModelServer) -> None:
    """Grok CLI's wire: OpenAI chat completions, streamed as `data:` lines ending with `[DONE]`; the role only
    in the first delta (Grok CLI concatenates repeated string fields); a `bash` tool call, then the text."""
    server.state.script = Script.from_json({"rules": [{"when": "go", "run": "echo hi > out.txt"}]})
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Grok CLI."},
        {"role": "user", "content": "go"},
    ]
    status, kind, raw = post(
        server, "/v1/chat/completions", {"messages": messages, "tools": tools, "stream": True}
    )
    lines = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert (status, kind, lines[-1]) == (200, "text/event-stream", "[DONE]")
    chunks = [json.loads(line)["choices"][0] for line in lines[:-1]]
    assert [c["delta"].get("role") for c in chunks] == ["assistant", *[None] * (len(chunks) - 1)]
    (call,) = [t for c in chunks for t in c["delta"].get("tool_calls", [])]
    assert call["function"]["name"] == "bash" and call["index"] == 0
    assert json.loads(call["function"]["arguments"]) == {"command": "echo hi > out.txt"}
    assert chunks[-1]["finish_reason"] == "tool_calls"
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "Command executed successfully", "tool_call_id": call["id"]},
    ]
    _, kind, raw = post(server, "/v1/chat/completions", {"messages": messages, "tools": tools})
    answer = json.loads(raw)["choices"][0]  # not streamed: Grok CLI's headless mode
    assert kind == "application/json" and answer["message"]["content"] == "Done."
    assert answer["finish_reason"] == "stop" and "tool_calls" not in answer["message"]
    status, _, raw = post(server, "/v1/chat/completions", {"messages": messages[:2]})  # no shell tool offered
    assert json.loads(raw)["choices"][0]["message"]["content"] == "Scripted session"


def test_gemini_stream_and_router(server: FakeModelServer) -> None:
    tools = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "two steps please"}]}]
    path = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
    for expected in ("echo one", "echo two"):
        _, kind, raw = post(server, path, {"contents": contents, "tools": tools})
        assert kind == "text/event-stream"
        part = sse(raw)[0][1]["candidates"][0]["content"]["parts"][0]
        assert part["functionCall"] == {
            "name": "run_shell_command",
            "args": {"command": expected, "description": "Run the scripted command"},
        }
        contents += [
            {"role": "model", "parts": [part]},
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {}}}]},
        ]
    raw = post(server, path, {"contents": contents, "tools": tools})[2]
    assert sse(raw)[0][1]["candidates"][0]["content"]["parts"] == [{"text": "Both ran."}]

    schema = {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "model_choice": {"type": "string", "enum": ["flash", "pro"]},
        },
        "required": ["reasoning", "model_choice"],
    }
    router = {"contents": contents[:1], "generationConfig": {"responseJsonSchema": schema}}
    answer = json.loads(post(server, "/v1beta/models/gemini-lite:generateContent", router)[2])
    decided = json.loads(answer["candidates"][0]["content"]["parts"][0]["text"])
    assert decided == {"reasoning": "scripted", "model_choice": "flash"}


def test_gate_holds_the_answer_until_released(server: FakeModelServer, tmp_path: Path) -> None:
    result: dict[str, float] = {}
    user = {"role": "user", "content": "held please"}

    def ask() -> None:
        post(server, "/v1/messages", {"stream": True, "tools": BASH, "messages": [user]})
        result["done"] = time.monotonic()

    asker = threading.Thread(target=ask)
    asker.start()
    time.sleep(0.5)
    assert "done" not in result
    released = time.monotonic()
    FakeModelClient(unix_path=tmp_path / "fake.sock").release("g")
    asker.join(timeout=10)
    assert result["done"] >= released


def test_control_api_script_and_log(server: FakeModelServer, tmp_path: Path) -> None:
    client = FakeModelClient(unix_path=tmp_path / "fake.sock")
    assert client.health()
    client.set_script({"rules": [{"when": "hello", "text": "Hi from the new script."}]})
    events = sse(
        post(
            server,
            "/v1/messages",
            {"stream": True, "tools": BASH, "messages": [{"role": "user", "content": "hello"}]},
        )[2]
    )
    assert "".join(d["delta"].get("text", "") for e, d in events if e == "content_block_delta") == (
        "Hi from the new script."
    )
    log = FakeModelClient(port=server.port).log()
    assert [(e["api"], e["action"], e["prompt"]) for e in log] == [("anthropic", "text", "hello")]
    assert "body" not in log[0] and "body" in client.log(bodies=True)[0]
    with pytest.raises(RuntimeError):
        client.set_script({"rules": [{"bogus": 1}]})


def test_decide_defaults_and_reminders() -> None:
    script = Script.from_json(SCRIPT)
    only_reminder = anthropic_conversation(
        {
            "tools": BASH,
            "messages": [
                {"role": "user", "content": "just talk"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}],
                },
            ],
        }
    )
    assert decide(script, only_reminder).text == "Hello there."
    nothing = anthropic_conversation({"tools": BASH, "messages": [{"role": "user", "content": "weather?"}]})
    assert decide(script, nothing).text == "Nothing scripted." and decide(script, nothing).rule is None


def test_schema_instance_shapes() -> None:
    assert schema_instance({"type": "array", "items": {"type": "integer"}, "minItems": 1}) == [0]
    assert schema_instance({"anyOf": [{"type": "boolean"}, {"type": "string"}]}) is False
    assert schema_instance({"type": ["null", "number"], "minimum": 3}) == 3


def test_team_notice_runs_the_command_line_it_gives(tmp_path: Path) -> None:
    (tmp_path / "Q12.txt").write_text("Use the blue one; it's tested.\n", encoding="utf-8")
    rule = {
        "when_regex": r"(?P<cmd>harness reply (?P<qid>Q\w+))",
        "run": "{{cmd}} {{answer|q}}",
        "answer_file": str(tmp_path / "{{qid}}.txt"),
        "final": "Answered {{qid}}.",
    }
    script = Script.from_json({"rules": [rule]})
    notice = "[team] alice asks (Q12): which colour?\nAnswer with: harness reply Q12 '<your answer>'"
    conversation = anthropic_conversation({"tools": BASH, "messages": [{"role": "user", "content": notice}]})
    decision = decide(script, conversation)
    assert decision.kind == "tool"
    assert decision.command == "harness reply Q12 'Use the blue one; it'\"'\"'s tested.'"
