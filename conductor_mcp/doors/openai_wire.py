"""The OpenAI wire formats, both ways: a Responses or Chat Completions body in, a run's JSON and SSE events out.

Pure translation, no I/O: the door (doors/openai.py) reads the HTTP request, calls the service and sends what
these functions build. The last user message is the task; everything else (instructions, system and developer
messages, earlier turns, tool calls and their outputs) becomes the run's context, in order, labelled by role.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from conductor_mcp.core.records import Run
from conductor_mcp.core.request import MAX_CONTEXT_CHARS, MAX_STEPS_LIMIT, MAX_TASK_CHARS
from conductor_mcp.core.usage import BUDGET_REACHED, Totals
from conductor_mcp.errors import RequestError, RequestTooLarge

TEXT_PARTS = {"text", "input_text", "output_text", "summary_text", "refusal"}
UNSUPPORTED_PARTS = {
    "input_image": "image", "image_url": "image", "input_file": "file", "file": "file",
    "input_audio": "audio", "audio": "audio",
}  # fmt: skip
SKIPPED_ITEMS = {"reasoning", "item_reference"}  # encrypted or unresolvable: nothing a worker could read
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


@dataclass(frozen=True)
class Asked:
    """What an OpenAI request asks of a run, in the door-neutral terms of a RunRequest (the model unresolved)."""

    model: str
    task: str
    context: str | None
    stream: bool
    run_fields: dict[str, Any] = field(default_factory=dict)


def _part_text(part: Any, where: str) -> str:
    if isinstance(part, str):
        return part
    kind = part.get("type") if isinstance(part, dict) else None
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


def _chat_turn(message: Any, where: str) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError(f"{where}: must be a message object with a role")
    role, text = message["role"], _content_text(message.get("content"), where)
    calls = [f"(called tool {c.get('function', {}).get('name')} with arguments "
             f"{c.get('function', {}).get('arguments')})" for c in message.get("tool_calls") or []]  # fmt: skip
    if role == "tool":
        text = f"(output of tool call {message.get('tool_call_id')})\n{text}"
    return role, "\n".join(t for t in [text, *calls] if t)


def _task_and_context(turns: list[tuple[str, str]], field_name: str) -> tuple[str, str | None]:
    """The last user message is the task; every other turn, in order and labelled, is the context."""
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None or not turns[last_user][1].strip():
        raise RequestError(f"{field_name}: no user message with text; the last user message is the task")
    task = turns[last_user][1]
    if len(task) > MAX_TASK_CHARS:
        raise RequestTooLarge(
            f"{field_name}: the last user message has {len(task)} characters, over the limit of {MAX_TASK_CHARS}"
        )
    context = "\n\n".join(f"[{role}]\n{text}" for i, (role, text) in enumerate(turns) if i != last_user and text)
    if len(context) > MAX_CONTEXT_CHARS:
        raise RequestTooLarge(
            f"{field_name}: the earlier messages and instructions come to {len(context)} characters, over the "
            f"context limit of {MAX_CONTEXT_CHARS}; send a shorter history"
        )
    return task, context or None


def _run_fields(body: dict[str, Any], max_tokens: Any, effort: Any, effort_name: str) -> dict[str, Any]:
    """max tokens and metadata.max_usd become the budget; the reasoning effort, how many steps the team may take."""
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise RequestError("metadata: must be an object of string values")
    max_usd = metadata.get("max_usd")
    try:
        max_usd = None if max_usd is None else float(max_usd)
    except (TypeError, ValueError):
        raise RequestError(f"metadata.max_usd: must be a number of US dollars, got {max_usd!r}") from None
    if effort is not None and effort not in EFFORTS:
        raise RequestError(f"{effort_name}: must be one of {', '.join(EFFORTS)}, got {effort!r}")
    steps = {"none": 1, "minimal": 1, "low": 2, "high": MAX_STEPS_LIMIT, "xhigh": MAX_STEPS_LIMIT}.get(effort or "")
    fields: dict[str, Any] = {"budget": {"max_tokens": max_tokens, "max_usd": max_usd}, "max_steps": steps}
    if effort == "xhigh":
        fields["self_correct"] = True
    return fields


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
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
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


# -- out: runs as OpenAI objects ----------------------------------------------------------------------


def responses_usage(totals: Totals) -> dict[str, Any]:
    """Every token the run spent, conductor included: what the caller pays for."""
    return {
        "input_tokens": totals.prompt_tokens, "output_tokens": totals.completion_tokens,
        "total_tokens": totals.total_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }  # fmt: skip


def chat_usage(totals: Totals) -> dict[str, Any]:
    return {
        "prompt_tokens": totals.prompt_tokens, "completion_tokens": totals.completion_tokens,
        "total_tokens": totals.total_tokens,
    }  # fmt: skip


def finished_ok(run: Run) -> bool:
    """A run that has an answer to give: done (a budget or cap stop gives its best answer, as incomplete)."""
    return run.status == "done" and run.answer is not None


def message_item(run: Run, text: str) -> dict[str, Any]:
    return {
        "type": "message", "id": f"msg_{run.id}", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }  # fmt: skip


def reasoning_item(run: Run, summary: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{run.id}", "summary": [{"type": "summary_text", "text": summary}]}


def response_object(run: Run, model: str, output: list[dict[str, Any]], created: int) -> dict[str, Any]:
    """A Responses `response` for a run in any state (`in_progress` while it runs)."""
    status = "in_progress"
    if run.status != "running":
        status = ("incomplete" if run.stop_reason else "completed") if finished_ok(run) else "failed"
    return {
        "id": f"resp_{run.id}", "object": "response", "created_at": created, "status": status, "model": model,
        "output": output, "usage": responses_usage(run.totals) if status != "in_progress" else None,
        "metadata": {"conductor_run_id": run.id}, "error": run_error(run)[1] if status == "failed" else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "parallel_tool_calls": False, "tool_choice": "auto", "tools": [], "instructions": None,
    }  # fmt: skip


def run_error(run: Run) -> tuple[int, dict[str, Any]]:
    """Why a run gave no answer, and how to get one (its finished steps are kept), with the HTTP status:
    402 when the caller's own budget stopped it before any answer, else 500."""
    message = (
        f"run {run.id} {run.status}: {run.error or 'no answer'}; its finished steps are kept: "
        f"GET /v1/runs/{run.id} shows them, and MCP continue_workflow with run_id '{run.id}' resumes it"
    )
    if run.error and BUDGET_REACHED in run.error:
        message += "; or raise max_output_tokens / max_tokens / metadata.max_usd"
        return 402, {"message": message, "type": "insufficient_quota", "param": None, "code": "budget_exhausted"}
    return 500, {"message": message, "type": "server_error", "param": None, "code": "run_failed"}


def chat_object(run: Run, model: str, created: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{run.id}", "object": "chat.completion", "created": created, "model": model,
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": run.answer},
            "finish_reason": "length" if run.stop_reason else "stop", "logprobs": None,
        }],
        "usage": chat_usage(run.totals), "conductor_run_id": run.id,
    }  # fmt: skip


def now_s() -> int:
    return int(time.time())
