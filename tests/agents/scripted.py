"""Scripted model servers on loopback, so real agent CLIs run offline: Codex's Responses API (`/v1/responses`,
streamed), Claude Code's Messages API (`/v1/messages`, streamed) and OpenAI chat completions (the tool loop).

A script is a list of tool calls and a final text. Each request is answered by the next move, chosen by how many
tool results the request already carries (so the server keeps no state, and the CLI's extra requests are answered
the same way): the k-th tool call, then the final text with the last tool result quoted, so a test can see that
the command really ran and what it printed. `hang=True` answers nothing until the server stops (a hung agent).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    calls: list[tuple[str, dict[str, Any]]]  # (tool name, arguments) in order; "NAMESPACE/name" for Codex's MCP tools
    final: str = "All done."
    hang: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    def move(self, results: list[str]) -> tuple[str, dict[str, Any]] | str:
        """The next tool call, or the final text once every call has its result."""
        if len(results) < len(self.calls):
            return self.calls[len(results)]
        return f"{self.final} Last tool result: {results[-1][:1500]}" if results else self.final


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


# ------------------------------------------------------------------------------------ Codex: Responses API


def responses_results(body: dict[str, Any]) -> list[str]:
    items = body.get("input") if isinstance(body.get("input"), list) else []
    return [str(i.get("output")) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def responses_reply(script: Script, body: dict[str, Any]) -> bytes:
    results = responses_results(body)
    move = script.move(results)
    if isinstance(move, str):
        item = {
            "type": "message",
            "id": f"msg_{len(results)}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": move, "annotations": []}],
        }
    else:
        name, arguments = move
        namespace, _, function = name.rpartition("/")  # Codex offers an MCP server's tools as one namespace tool
        item = {
            "type": "function_call",
            "id": f"fc_{len(results)}",
            "call_id": f"call_{len(results)}",
            "name": function,
            **({"namespace": namespace} if namespace else {}),
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
    usage = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 15,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 135,
    }
    response = {"id": f"resp_{len(results)}", "object": "response", "status": "completed", "usage": usage}
    return _sse(
        [
            ("response.created", {"type": "response.created", "response": {**response, "status": "in_progress"}}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": response}),
        ]
    )


# ------------------------------------------------------------------------------ Claude Code: Messages API


def messages_results(body: dict[str, Any]) -> list[str]:
    found = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                found.append(json.dumps(inner) if not isinstance(inner, str) else inner)
    return found


def messages_reply(script: Script, body: dict[str, Any]) -> bytes:
    results = messages_results(body)
    move = script.move(results) if body.get("tools") else script.final
    if isinstance(move, str):
        block: dict[str, Any] = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": move}
        stop = "end_turn"
    else:
        name, arguments = move
        block = {"type": "tool_use", "id": f"toolu_{len(results)}", "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        stop = "tool_use"
    message = {
        "id": f"msg_{len(results)}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 200, "output_tokens": 1},
    }
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 9},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


# ------------------------------------------------------------------------------- OpenAI chat completions


def chat_reply(script: Script, body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    results = [str(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    move = script.move(results) if body.get("tools") else script.final
    if isinstance(move, str):
        message: dict[str, Any] = {"role": "assistant", "content": move}
        finish = "stop"
    else:
        name, arguments = move
        call = {
            "id": f"call_{len(results)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {
        "id": f"chat_{len(results)}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
    }


# ------------------------------------------------------------------------------------------------ server


class ScriptedServer:
    """A ThreadingHTTPServer on 127.0.0.1 answering every POST from `script` (see the module docstring)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.stopping = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            server.script.requests.append({"path": self.path, "body": body})
            if server.script.hang:
                server.stopping.wait()
                return
            if self.path.startswith("/v1/responses"):
                self._send(responses_reply(server.script, body), "text/event-stream")
            elif self.path.startswith("/v1/messages"):
                if body.get("stream"):
                    self._send(messages_reply(server.script, body), "text/event-stream")
                else:
                    self._send(json.dumps(_plain_message(body)).encode(), "application/json")
            elif self.path.startswith("/v1/chat/completions"):
                self._send(json.dumps(chat_reply(server.script, body)).encode(), "application/json")
            else:
                self.send_error(404)

        def do_GET(self) -> None:
            self.send_error(404)

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    return Handler


def _plain_message(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_plain",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def tool_results(script: Script) -> Iterator[str]:
    """Every tool result the CLI sent back, in the order the requests came."""
    for request in script.requests:
        yield from responses_results(request["body"]) or messages_results(request["body"])
