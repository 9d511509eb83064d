"""The OpenAI wire formats, in: a Responses or Chat Completions body as a run request (openai_replies.py: out).

Pure translation, no I/O: the door (doors/openai/routes.py) reads the HTTP request, calls the service and sends what
these functions build. The last user message is the task; everything else (instructions, system and developer
messages, earlier turns, tool calls and their outputs) becomes the run's context, in order, labelled by role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from conductor_mcp.core.client_tools import function_tools, run_of_call, tool_result
from conductor_mcp.core.records import Run, ToolResult
from conductor_mcp.core.request import EFFORT_LIMITS
from conductor_mcp.errors import RequestError

TEXT_PARTS = {"text", "input_text", "output_text", "summary_text", "refusal"}
UNSUPPORTED_PARTS = {
    "input_image": "image",
    "image_url": "image",
    "input_file": "file",
    "file": "file",
    "input_audio": "audio",
    "audio": "audio",
}
SKIPPED_ITEMS = {"reasoning", "item_reference"}  # encrypted or unresolvable: nothing a worker could read


@dataclass(frozen=True)
class Asked:
    """What an OpenAI request asks of a run, in the door-neutral terms of a RunRequest (the model unresolved)."""

    model: str
    task: str
    context: str | None
    stream: bool
    run_fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolReply:
    """A request that brings the client's tool results for a run's final worker, who goes on (no new run)."""

    model: str
    run_id: str
    results: list[ToolResult]
    stream: bool


def _part_text(part: Any, where: str) -> str:
    if isinstance(part, str):
        return part
    kind = part.get("type") if isinstance(part, dict) else None
    kind = kind if isinstance(kind, str) else None
    if kind in TEXT_PARTS and isinstance(part.get("text"), str):
        return part["text"]
    if kind in UNSUPPORTED_PARTS:
        raise RequestError(f"{where}: {UNSUPPORTED_PARTS[kind]} input ({kind}) is not supported; send text parts only")
    raise RequestError(f"{where}: content part of type {kind!r} is not supported; send text parts only")


def _content_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "\n".join(_part_text(part, f"{where}.content[{i}]") for i, part in enumerate(content))
    raise RequestError(f"{where}.content: must be a string or a list of text parts")


def _item_turn(item: Any, where: str) -> tuple[str, str] | None:
    """One Responses input item as (role, text); None for items with nothing readable."""
    if not isinstance(item, dict):
        raise RequestError(f"{where}: must be an object (a message or an item)")
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise RequestError(f"{where}.type: must be a string such as 'message', got {kind!r:.40}")
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str):
            raise RequestError(f"{where}.role: missing; say who wrote the message (user, assistant, system, developer)")
        return role, _content_text(item.get("content"), where)
    if kind == "function_call":
        return "assistant", f"(called tool {item.get('name')} with arguments {item.get('arguments')})"
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _content_text(output, where)
        return "tool", f"(output of tool call {item.get('call_id')})\n{text}"
    if kind in SKIPPED_ITEMS:
        return None
    return str(kind), json.dumps({k: v for k, v in item.items() if k != "id"})


def _called(call: Any, where: str) -> str:
    """An assistant message's tool call, as the context shows it."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise RequestError(f"{where}: must be a tool call object with a 'function' object (name, arguments)")
    return f"(called tool {function.get('name')} with arguments {function.get('arguments')})"


def _chat_turn(message: Any, where: str) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError(f"{where}: must be a message object with a role")
    role, text = message["role"], _content_text(message.get("content"), where)
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise RequestError(f"{where}.tool_calls: must be a list of tool calls")
    calls = [_called(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(tool_calls)]
    if role == "tool":
        text = f"(output of tool call {message.get('tool_call_id')})\n{text}"
    return role, "\n".join(t for t in [text, *calls] if t)


def _task_and_context(turns: list[tuple[str, str]], field_name: str) -> tuple[str, str | None]:
    """The last user message is the task; every other turn, in order and labelled, is the context (their sizes
    are the RunRequest's to check)."""
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None or not turns[last_user][1].strip():
        raise RequestError(f"{field_name}: no user message with text; the last user message is the task")
    context = "\n\n".join(f"[{role}]\n{text}" for i, (role, text) in enumerate(turns) if i != last_user and text)
    return turns[last_user][1], context or None


def _run_fields(body: dict[str, Any], max_tokens: Any, effort: Any, effort_name: str) -> dict[str, Any]:
    """max tokens and metadata.max_usd become the budget; the reasoning effort, how many steps the team may take;
    the client's function tools go to the final step's worker."""
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise RequestError("metadata: must be an object of string values")
    max_usd = metadata.get("max_usd")
    try:
        max_usd = None if max_usd is None else float(max_usd)
    except (TypeError, ValueError):
        raise RequestError(f"metadata.max_usd: must be a number of US dollars, got {max_usd!r}") from None
    if effort is not None and (not isinstance(effort, str) or effort not in EFFORT_LIMITS):  # a list is unhashable
        raise RequestError(f"{effort_name}: must be one of {', '.join(EFFORT_LIMITS)}, got {effort!r}")
    tools = tuple(function_tools(body.get("tools"), body.get("tool_choice")))
    limits = EFFORT_LIMITS[effort] if effort is not None else {}
    chosen = {"workers": _workers(metadata["workers"])} if metadata.get("workers") is not None else {}
    chosen |= {"workspace": str(metadata["workspace"])} if metadata.get("workspace") is not None else {}
    return {"budget": {"max_tokens": max_tokens, "max_usd": max_usd}, "tools": tools, **chosen, **limits}


def _workers(value: Any) -> Any:
    """metadata.workers: the choice of workers as JSON text (OpenAI's metadata values are strings), or as an
    object from clients that send one; the RunRequest checks its shape."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise RequestError(
            'metadata.workers: must be JSON such as {"only": ["id"], "exclude": ["id"]} (pool ids)'
        ) from None


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model: missing; use 'conductor' or 'conductor/<pool>' (GET /v1/models lists them)")
    return model


def earlier_turns(previous: Run) -> list[tuple[str, str]]:
    """A stored run as the turns before a request that names it (`previous_response_id`)."""
    turns = [("earlier context", previous.context)] if previous.context else []
    return [*turns, ("user", previous.task), ("assistant", previous.answer or "")]


def responses_request(body: dict[str, Any], earlier: list[tuple[str, str]] | None = None) -> Asked:
    """A `POST /v1/responses` body, translated; `earlier`: the conversation its previous_response_id stands for."""
    model, raw = _model(body), body.get("input")
    if isinstance(raw, str):
        turns = [("user", raw)]
    elif isinstance(raw, list):
        turns = [turn for i, item in enumerate(raw) if (turn := _item_turn(item, f"input[{i}]")) is not None]
    else:
        raise RequestError("input: missing; send a string or a list of messages")
    turns[:0] = earlier or []
    instructions = body.get("instructions")
    if instructions:
        turns.insert(0, ("instructions", _content_text(instructions, "instructions")))
    task, context = _task_and_context(turns, "input")
    reasoning = body.get("reasoning") or {}
    if not isinstance(reasoning, dict):
        raise RequestError(f'reasoning: must be an object such as {{"effort": "high"}}, got {reasoning!r}')
    effort = reasoning.get("effort")
    fields = _run_fields(body, body.get("max_output_tokens"), effort, "reasoning.effort")
    return Asked(model, task, context, bool(body.get("stream")), fields)


def chat_request(body: dict[str, Any]) -> Asked:
    """A `POST /v1/chat/completions` body, translated."""
    model, messages = _model(body), body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: missing; send a non-empty list of messages")
    turns = [_chat_turn(message, f"messages[{i}]") for i, message in enumerate(messages)]
    task, context = _task_and_context(turns, "messages")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    fields = _run_fields(body, max_tokens, body.get("reasoning_effort"), "reasoning_effort")
    return Asked(model, task, context, bool(body.get("stream")), fields)


def _after_last_user(items: list[Any], is_user: Any) -> list[Any]:
    last_user = max((i for i, item in enumerate(items) if is_user(item)), default=-1)
    return items[last_user + 1 :]


def _tool_reply(model: str, run_id: str | None, results: list[ToolResult], stream: bool) -> ToolReply | None:
    run_id = run_id or (run_of_call(results[-1].call_id) if results else None)
    return ToolReply(model, run_id, results, stream) if results and run_id else None


def responses_tool_reply(body: dict[str, Any], previous_run_id: str | None) -> ToolReply | None:
    """A Responses request that answers a run's tool calls: `function_call_output` items after the last user
    message, for the run its previous_response_id names or (Codex: no stored state) its call ids name."""
    raw = body.get("input")
    if not isinstance(raw, list):
        return None
    items = _after_last_user(raw, lambda item: isinstance(item, dict) and item.get("role") == "user")
    results = [
        tool_result(item.get("call_id"), item.get("output"), f"input[{len(raw) - len(items) + i}]")
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return _tool_reply(_model(body), previous_run_id, results, bool(body.get("stream")))


def chat_tool_reply(body: dict[str, Any]) -> ToolReply | None:
    """A Chat Completions request whose messages end in `tool` messages answering calls this server made."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    tail = _after_last_user(messages, lambda m: isinstance(m, dict) and m.get("role") == "user")
    results = [
        tool_result(m.get("tool_call_id"), _content_text(m.get("content"), "messages[-1]"), "messages")
        for m in tail
        if isinstance(m, dict) and m.get("role") == "tool"
    ]
    return _tool_reply(_model(body), None, results, bool(body.get("stream")))
