# A scripted stand-in for the model providers, so the real engine CLIs (Claude Code, Codex, Gemini CLI, Grok
# CLI) can run their whole TUI offline: one stdlib process speaks Anthropic Messages, OpenAI Responses, Gemini
# generateContent and OpenAI Chat Completions well enough for a shell tool call, its approval, and a final
# text. What the "model" does is a script: rules keyed on the last user turn (the notice pasted into the
# engine) that name the shell command the engine runs next, then the final text once the tool result comes
# back. It never reasons; it only makes the engine act so that a test can watch the screen and the disk.
#
# The engines run inside a private network namespace (loopback only), so this server runs in that namespace
# too: it serves the provider APIs on 127.0.0.1:PORT there, and the same control API on a Unix socket, which
# lives in the filesystem and so is reachable from the test process outside the namespace.
#
# Control API (both listeners): POST /__script (replace the script), GET /__log (every request served;
# `?since=N`, `?bodies=1`), POST /__release {"gate": name} (let a held answer go), POST /__reset (clear the
# log and gates), GET /__health.
#
# Script (JSON):
#   {"rules": [{"when": "reply Q1", "run": "echo {{answer|q}} > out.txt", "final": "Done.",
#               "when_regex": "reply (?P<qid>Q\\w+)", "answer_file": "answers/q1.txt",
#               "delay": 0.0, "final_delay": 0.0, "gate": "g1", "escalate": false, "text": null,
#               "description": "why"}],
#    "default": "Nothing scripted for that.", "side_text": "Untitled"}
# A rule matches when its `when` is a substring of the last user turn and its `when_regex` is found in it
# (either may be left out, not both; the regex's named groups become template variables); the first rule
# that matches wins. `run` is one command or a list run one after another (one per tool result); then `final`
# is answered. `text` instead of `run` answers plain text at once. Templates: `{{name}}` inserts a variable
# as is, `{{name|q}}` shell-quoted; variables: the regex groups, `prompt`, and `answer` (the content of
# `answer_file`, itself a template, relative to the folder of the script file the server started with).
# `delay` holds the first answer, `final_delay` the final text, `gate` holds the first answer until released
# (at most `gate_timeout` s). `escalate` asks Codex for `require_escalated`, which shows its approval dialog.
# Requests that offer no shell tool (titles, routing) get `side_text`; Gemini's router gets JSON that fits
# its responseJsonSchema.
#
# A team test answers a notice by running the command line the notice itself gives, e.g.
#   {"when_regex": "(?P<cmd>harness reply (?P<qid>Q\\w+))", "run": "{{cmd}} {{answer|q}}",
#    "answer_file": "/abs/answers/{{qid}}.txt", "final": "Answered {{qid}}."}
from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import re
import shlex
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

JSON = Any
SHELL_TOOLS = ("Bash", "exec_command", "shell", "run_shell_command", "local_shell", "bash")
_TAGGED_BLOCK = re.compile(r"\A\s*<([A-Za-z_][\w-]*)(?:\s[^>]*)?>.*</\1>\s*\Z", re.DOTALL)
_TEMPLATE = re.compile(r"\{\{\s*(\w+)\s*(\|\s*q\s*)?\}\}")


# ---------------------------------------------------------------------------------------------- the script


@dataclass(frozen=True)
class Rule:
    when: str | None = None
    when_regex: str | None = None
    run: tuple[str, ...] = ()
    final: str = "Done."
    text: str | None = None
    answer_file: str | None = None
    description: str = "Run the scripted command"
    delay: float = 0.0
    final_delay: float = 0.0
    gate: str | None = None
    gate_timeout: float = 120.0
    escalate: bool = False

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON]) -> Rule:
        known = set(cls.__dataclass_fields__)
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown rule fields: {sorted(unknown)}")
        run = raw.get("run", ())
        runs = (run,) if isinstance(run, str) else tuple(str(r) for r in run)
        values = {k: v for k, v in raw.items() if k != "run"}
        return cls(run=runs, **values)

    def variables(self, prompt: str, base: Path | None) -> dict[str, str] | None:
        """The template variables if this rule matches `prompt`, else None."""
        if self.when is not None and self.when not in prompt:
            return None
        found: dict[str, str] = {"prompt": prompt}
        if self.when_regex is not None:
            match = re.search(self.when_regex, prompt)
            if match is None:
                return None
            found.update({k: v for k, v in match.groupdict().items() if v is not None})
        if self.when is None and self.when_regex is None:
            return None
        if self.answer_file is not None:
            path = Path(_render(self.answer_file, found))
            if not path.is_absolute() and base is not None:
                path = base / path
            found["answer"] = path.read_text(encoding="utf-8").rstrip("\n")
        return found


@dataclass(frozen=True)
class Script:
    rules: tuple[Rule, ...] = ()
    default: str = "Nothing is scripted for that."
    side_text: str = "Scripted session"
    base: Path | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, JSON], base: Path | None = None) -> Script:
        rules = tuple(Rule.from_json(r) for r in raw.get("rules", ()))
        return cls(
            rules=rules,
            default=str(raw.get("default", cls.default)),
            side_text=str(raw.get("side_text", cls.side_text)),
            base=base,
        )

    @classmethod
    def load(cls, path: Path) -> Script:
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")), base=path.resolve().parent)


def _render(template: str, variables: Mapping[str, str]) -> str:
    def put(match: re.Match[str]) -> str:
        value = variables.get(match.group(1), "")
        return shlex.quote(value) if match.group(2) else value

    return _TEMPLATE.sub(put, template)


# ---------------------------------------------------------------------------------- conversations, decided


@dataclass(frozen=True)
class Conversation:
    """What every protocol reduces to: the user turns and tool results in order, and the tools offered."""

    items: tuple[tuple[str, str], ...]  # ("user", text) | ("tool_result", text) | ("assistant", text)
    tools: tuple[str, ...]

    def has_shell_tool(self) -> bool:
        return any(name in SHELL_TOOLS for name in self.tools)

    def last_user_turn(self) -> tuple[str, int]:
        """The last user text and how many tool results followed it."""
        steps = 0
        for kind, text in reversed(self.items):
            if kind == "tool_result":
                steps += 1
            elif kind == "user":
                return text, steps
        return "", steps


@dataclass(frozen=True)
class Decision:
    kind: str  # "tool" | "text"
    text: str = ""
    command: str = ""
    description: str = ""
    escalate: bool = False
    delay: float = 0.0
    gate: str | None = None
    gate_timeout: float = 0.0
    rule: int | None = None
    prompt: str = ""
    steps: int = 0


def decide(script: Script, conversation: Conversation) -> Decision:
    if not conversation.has_shell_tool():
        return Decision(kind="text", text=script.side_text)
    prompt, steps = conversation.last_user_turn()
    for index, rule in enumerate(script.rules):
        variables = rule.variables(prompt, script.base)
        if variables is None:
            continue
        first = steps == 0
        base = Decision(
            kind="text",
            delay=rule.delay if first else rule.final_delay,
            gate=rule.gate if first else None,
            gate_timeout=rule.gate_timeout,
            rule=index,
            prompt=prompt,
            steps=steps,
        )
        if rule.text is not None and first:
            return dataclasses.replace(base, text=_render(rule.text, variables))
        if steps < len(rule.run):
            return dataclasses.replace(
                base,
                kind="tool",
                command=_render(rule.run[steps], variables),
                description=_render(rule.description, variables),
                escalate=rule.escalate,
            )
        return dataclasses.replace(base, text=_render(rule.final, variables))
    return Decision(kind="text", text=script.default, prompt=prompt, steps=steps)


def _user_text(parts: Sequence[str]) -> str | None:
    """Joins a user message's text parts, leaving out wholly tagged context blocks (system reminders,
    environment context); None when nothing is left."""
    kept = [p for p in parts if p.strip() and not _TAGGED_BLOCK.match(p)]
    return "\n".join(kept) if kept else None


def _texts(content: JSON, text_types: tuple[str, ...] = ("text", "input_text")) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") in text_types
        ]
    return []


def anthropic_conversation(body: Mapping[str, JSON]) -> Conversation:
    items: list[tuple[str, str]] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "user":
            blocks = content if isinstance(content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                items.extend(("tool_result", json.dumps(r.get("content"))) for r in results)
                continue
            text = _user_text(_texts(content))
            if text is not None:
                items.append(("user", text))
        else:
            items.append(("assistant", "\n".join(_texts(content))))
    tools = tuple(str(t.get("name", "")) for t in body.get("tools", []) or [])
    return Conversation(tuple(items), tools)


def responses_conversation(body: Mapping[str, JSON]) -> Conversation:
    items: list[tuple[str, str]] = []
    raw_input = body.get("input", [])
    if isinstance(raw_input, str):
        raw_input = [{"type": "message", "role": "user", "content": raw_input}]
    for item in raw_input:
        kind = item.get("type", "message")
        if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            items.append(("tool_result", json.dumps(item.get("output"))))
        elif kind == "message" and item.get("role") == "user":
            text = _user_text(_texts(item.get("content")))
            if text is not None:
                items.append(("user", text))
        elif kind == "message" and item.get("role") == "assistant":
            items.append(("assistant", "\n".join(_texts(item.get("content"), ("output_text", "text")))))
    tools = tuple(str(t.get("name", t.get("type", ""))) for t in body.get("tools", []) or [])
    return Conversation(tuple(items), tools)


def gemini_conversation(body: Mapping[str, JSON]) -> Conversation:
    items: list[tuple[str, str]] = []
    for content in body.get("contents", []):
        parts = content.get("parts", [])
        if content.get("role", "user") == "user":
            responses = [p for p in parts if "functionResponse" in p]
            if responses:
                items.extend(("tool_result", json.dumps(p["functionResponse"])) for p in responses)
                continue
            text = _user_text([str(p.get("text", "")) for p in parts if "text" in p])
            if text is not None:
                items.append(("user", text))
        else:
            items.append(("assistant", "\n".join(str(p.get("text", "")) for p in parts if "text" in p)))
    tools: list[str] = []
    for tool in body.get("tools", []) or []:
        tools.extend(str(d.get("name", "")) for d in tool.get("functionDeclarations", []) or [])
    return Conversation(tuple(items), tuple(tools))


def chat_conversation(body: Mapping[str, JSON]) -> Conversation:
    """OpenAI Chat Completions (Grok CLI): system, user, assistant (with tool_calls) and tool messages."""
    items: list[tuple[str, str]] = []
    for message in body.get("messages", []):
        role = message.get("role")
        if role == "tool":
            items.append(("tool_result", json.dumps(message.get("content"))))
        elif role == "user":
            text = _user_text(_texts(message.get("content")))
            if text is not None:
                items.append(("user", text))
        elif role == "assistant":
            items.append(("assistant", "\n".join(_texts(message.get("content")))))
    tools = tuple(str((t.get("function") or {}).get("name", "")) for t in body.get("tools", []) or [])
    return Conversation(tuple(items), tools)


def schema_instance(schema: JSON, *, depth: int = 0) -> JSON:
    """A small value matching a JSON schema (enough for Gemini's router and similar side requests)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    kind = str(kind).lower() if kind is not None else ("object" if "properties" in schema else "string")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: schema_instance(sub, depth=depth + 1) for name, sub in properties.items()}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), depth=depth + 1)] if schema.get("minItems") else []
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "scripted"


# ------------------------------------------------------------------------------------------- the server


@dataclass
class State:
    script: Script
    log: list[dict[str, JSON]] = field(default_factory=list)
    gates: dict[str, threading.Event] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entry: dict[str, JSON]) -> None:
        with self.lock:
            entry["seq"] = len(self.log)
            self.log.append(entry)

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(name, threading.Event())


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def _sse(event: str | None, data: JSON) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _chunks(text: str, size: int = 24) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def anthropic_events(decision: Decision, model: str) -> Iterator[bytes]:
    usage = {
        "input_tokens": 100,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message: dict[str, JSON] = {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    if decision.kind == "tool":
        block = {"type": "tool_use", "id": _new_id("toolu"), "name": "Bash", "input": {}}
        arguments = json.dumps({"command": decision.command, "description": decision.description})
        yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        for piece in _chunks(arguments, 40):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        for piece in _chunks(decision.text):
            delta = {"type": "text_delta", "text": piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        stop = "end_turn"
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def anthropic_message(decision: Decision, model: str) -> JSON:
    if decision.kind == "tool":
        content: list[JSON] = [
            {
                "type": "tool_use",
                "id": _new_id("toolu"),
                "name": "Bash",
                "input": {"command": decision.command, "description": decision.description},
            }
        ]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": decision.text}]
        stop = "end_turn"
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 12},
    }


def responses_events(decision: Decision, model: str) -> Iterator[bytes]:
    response: dict[str, JSON] = {
        "id": _new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    yield _sse("response.created", {"type": "response.created", "response": response})
    if decision.kind == "tool":
        arguments: dict[str, JSON] = {"cmd": decision.command}
        if decision.escalate:
            arguments["sandbox_permissions"] = "require_escalated"
            arguments["justification"] = decision.description
        item: dict[str, JSON] = {
            "type": "function_call",
            "id": _new_id("fc"),
            "call_id": _new_id("call"),
            "name": "exec_command",
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        yield _sse(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}},
        )
    else:
        item_id = _new_id("msg")
        added = {
            "type": "message",
            "id": item_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        yield _sse(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": added},
        )
        for piece in _chunks(decision.text):
            yield _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": piece,
                },
            )
        item = {
            "type": "message",
            "id": item_id,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": decision.text, "annotations": []}],
        }
    yield _sse(
        "response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}
    )
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 112,
    }
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    yield _sse("response.completed", {"type": "response.completed", "response": done})


def gemini_candidate(decision: Decision, model: str) -> JSON:
    if decision.kind == "tool":
        args = {"command": decision.command, "description": decision.description}
        parts: list[JSON] = [{"functionCall": {"name": "run_shell_command", "args": args}}]
    else:
        parts = [{"text": decision.text}]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 12, "totalTokenCount": 112},
        "modelVersion": model,
    }


def _chat_tool_call(decision: Decision) -> JSON:
    arguments = json.dumps({"command": decision.command})
    return {"id": _new_id("call"), "type": "function", "function": {"name": "bash", "arguments": arguments}}


def chat_chunks(decision: Decision, model: str) -> Iterator[bytes]:
    """A streamed chat completion as SSE `data:` lines: the role first (so a held answer shows busy), then the
    text in pieces or one whole tool call, then the finish reason and `[DONE]`. Only the first delta carries
    the role: Grok CLI concatenates repeated string fields of the deltas."""
    head = {
        "id": _new_id("chatcmpl"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: JSON, finish: str | None = None) -> bytes:
        return _sse(None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    if decision.kind == "tool":
        yield chunk({"tool_calls": [{"index": 0, **_chat_tool_call(decision)}]})
        finish = "tool_calls"
    else:
        for piece in _chunks(decision.text):
            yield chunk({"content": piece})
        finish = "stop"
    yield chunk({}, finish)
    yield b"data: [DONE]\n\n"


def chat_completion(decision: Decision, model: str) -> JSON:
    message: dict[str, JSON] = {"role": "assistant", "content": decision.text or None}
    if decision.kind == "tool":
        message["tool_calls"] = [_chat_tool_call(decision)]
    return {
        "id": _new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if decision.kind == "tool" else "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1"
    state: State  # set on the subclass made per server

    # -- plumbing

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the log endpoint is the record
        return

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: int, payload: JSON) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _hold(self, decision: Decision) -> None:
        if decision.gate is not None:
            self.state.gate(decision.gate).wait(decision.gate_timeout)
        if decision.delay > 0:
            time.sleep(decision.delay)

    # -- verbs

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.state.record({"at": time.time(), "method": "HEAD", "path": self.path, "api": "head"})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/__health":
            self._send_json(200, {"ok": True, "pid": os.getpid()})
            return
        if url.path == "/__log":
            since = int(query.get("since", ["0"])[0])
            bodies = query.get("bodies", ["0"])[0] == "1"
            with self.state.lock:
                entries = [dict(e) for e in self.state.log[since:]]
            if not bodies:
                for entry in entries:
                    entry.pop("body", None)
            self._send_json(200, entries)
            return
        self.state.record({"at": time.time(), "method": "GET", "path": self.path, "api": "unknown"})
        if url.path.endswith("/models"):
            self._send_json(200, {"object": "list", "data": [], "models": []})
            return
        self._send_json(404, {"error": {"type": "not_found", "message": f"fake model: no GET {url.path}"}})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        raw = self._body()
        try:
            body: JSON = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        if url.path == "/__script":
            try:
                self.state.script = Script.from_json(body, base=self.state.script.base)
            except (TypeError, ValueError) as error:
                self._send_json(400, {"error": str(error)})
                return
            self._send_json(200, {"ok": True, "rules": len(self.state.script.rules)})
            return
        if url.path == "/__release":
            self.state.gate(str(body.get("gate", ""))).set()
            self._send_json(200, {"ok": True})
            return
        if url.path == "/__reset":
            with self.state.lock:
                self.state.log.clear()
                self.state.gates.clear()
            self._send_json(200, {"ok": True})
            return
        entry: dict[str, JSON] = {"at": time.time(), "method": "POST", "path": self.path, "body": body}
        if url.path.endswith("/messages/count_tokens"):
            entry["api"] = "anthropic-count"
            self.state.record(entry)
            self._send_json(200, {"input_tokens": 100})
        elif url.path.endswith("/messages"):
            self._anthropic(body, entry)
        elif url.path.endswith("/responses"):
            self._responses(body, entry)
        elif url.path.endswith("/chat/completions"):
            self._chat(body, entry)
        elif ":streamGenerateContent" in url.path or ":generateContent" in url.path:
            self._gemini(url.path, body, entry)
        elif ":countTokens" in url.path:
            entry["api"] = "gemini-count"
            self.state.record(entry)
            self._send_json(200, {"totalTokens": 100})
        else:
            entry["api"] = "unknown"
            self.state.record(entry)
            self._send_json(
                404, {"error": {"type": "not_found", "message": f"fake model: no POST {url.path}"}}
            )

    # -- providers

    def _decide(self, api: str, conversation: Conversation, entry: dict[str, JSON]) -> Decision:
        decision = decide(self.state.script, conversation)
        entry.update(
            {
                "api": api,
                "tools": list(conversation.tools),
                "side": not conversation.has_shell_tool(),
                "prompt": decision.prompt,
                "steps": decision.steps,
                "rule": decision.rule,
                "action": decision.kind,
                "command": decision.command,
                "text": decision.text,
            }
        )
        self.state.record(entry)
        return decision

    def _anthropic(self, body: JSON, entry: dict[str, JSON]) -> None:
        decision = self._decide("anthropic", anthropic_conversation(body), entry)
        model = str(body.get("model", "claude-fake"))
        if not body.get("stream"):
            self._hold(decision)
            self._send_json(200, anthropic_message(decision, model))
            return
        self._start_stream()
        events = anthropic_events(decision, model)
        self._chunk(next(events))  # message_start at once: the engine shows itself busy while held
        self._hold(decision)
        for event in events:
            self._chunk(event)
        self._end_stream()

    def _responses(self, body: JSON, entry: dict[str, JSON]) -> None:
        decision = self._decide("responses", responses_conversation(body), entry)
        self._start_stream()
        events = responses_events(decision, str(body.get("model", "fake-model")))
        self._chunk(next(events))
        self._hold(decision)
        for event in events:
            self._chunk(event)
        self._end_stream()

    def _chat(self, body: JSON, entry: dict[str, JSON]) -> None:
        decision = self._decide("chat", chat_conversation(body), entry)
        model = str(body.get("model", "fake-model"))
        if not body.get("stream"):
            self._hold(decision)
            self._send_json(200, chat_completion(decision, model))
            return
        self._start_stream()
        chunks = chat_chunks(decision, model)
        self._chunk(next(chunks))
        self._hold(decision)
        for chunk in chunks:
            self._chunk(chunk)
        self._end_stream()

    def _gemini(self, path: str, body: JSON, entry: dict[str, JSON]) -> None:
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if ":generateContent" in path:
            if schema is not None:
                entry.update({"api": "gemini-json", "side": True})
                self.state.record(entry)
                text = json.dumps(schema_instance(schema))
                self._send_json(200, gemini_candidate(Decision(kind="text", text=text), model))
                return
            decision = self._decide("gemini", gemini_conversation(body), entry)
            self._hold(decision)
            self._send_json(200, gemini_candidate(decision, model))
            return
        decision = self._decide("gemini-stream", gemini_conversation(body), entry)
        self._start_stream()
        self._hold(decision)
        self._chunk(f"data: {json.dumps(gemini_candidate(decision, model))}\r\n\r\n".encode())
        self._end_stream()


# ------------------------------------------------------------------------------------- servers and clients


class UnixHTTPServer(socketserver.ThreadingMixIn, HTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name = "unix"
        self.server_port = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        request, _ = self.socket.accept()
        return request, ("unix", 0)


@dataclass
class FakeModelServer:
    """A running fake model: TCP (provider APIs + control) and optionally a Unix control socket."""

    state: State
    tcp: ThreadingHTTPServer
    unix: UnixHTTPServer | None
    threads: list[threading.Thread]

    @property
    def port(self) -> int:
        return int(self.tcp.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        for gate in list(self.state.gates.values()):
            gate.set()
        for server in (self.tcp, self.unix):
            if server is not None:
                server.shutdown()
                server.server_close()
        for thread in self.threads:
            thread.join(timeout=5)


def serve(script: Script, *, port: int = 0, unix_path: Path | None = None) -> FakeModelServer:
    state = State(script=script)
    handler = type("BoundHandler", (Handler,), {"state": state})
    tcp = ThreadingHTTPServer(("127.0.0.1", port), handler)
    tcp.daemon_threads = True
    unix = None
    if unix_path is not None:
        unix_path.unlink(missing_ok=True)
        unix = UnixHTTPServer(str(unix_path), handler)  # type: ignore[arg-type]  # AF_UNIX takes a path
    threads = []
    for server in (tcp, unix):
        if server is not None:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            thread.start()
            threads.append(thread)
    return FakeModelServer(state, tcp, unix, threads)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


@dataclass(frozen=True)
class FakeModelClient:
    """Talks to a fake model's control API over its Unix socket (or TCP when `unix_path` is None)."""

    unix_path: Path | None = None
    port: int = 0
    timeout: float = 10.0

    def request(self, method: str, path: str, payload: JSON = None) -> JSON:
        if self.unix_path is not None:
            connection: http.client.HTTPConnection = _UnixConnection(str(self.unix_path), self.timeout)
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            data = json.dumps(payload).encode() if payload is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            body = response.read()
            if response.status >= 400:
                raise RuntimeError(f"fake model {method} {path}: {response.status} {body[:200]!r}")
            return json.loads(body) if body else None
        finally:
            connection.close()

    def set_script(self, script: Mapping[str, JSON]) -> None:
        self.request("POST", "/__script", dict(script))

    def log(self, *, since: int = 0, bodies: bool = False) -> list[dict[str, JSON]]:
        result = self.request("GET", f"/__log?since={since}&bodies={int(bodies)}")
        return list(result)

    def release(self, gate: str) -> None:
        self.request("POST", "/__release", {"gate": gate})

    def health(self) -> bool:
        try:
            return bool(self.request("GET", "/__health").get("ok"))
        except (OSError, RuntimeError, ValueError):
            return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", type=Path, help="JSON script file (rules)")
    parser.add_argument("--unix", type=Path, help="also serve the control API on this Unix socket")
    parser.add_argument("--ready-file", type=Path, help="write {pid, port} here once listening")
    args = parser.parse_args(argv)
    script = Script.load(args.script) if args.script else Script()
    server = serve(script, port=args.port, unix_path=args.unix)
    if args.ready_file is not None:
        temporary = args.ready_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"pid": os.getpid(), "port": server.port}), encoding="utf-8")
        temporary.replace(args.ready_file)
    print(f"fake model listening on {server.url}", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
