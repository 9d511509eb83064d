"""The OpenAI wire formats, out: a run as a Responses or Chat Completions object (usage, ids, output items, the
outcome as OpenAI states it). Pure translation, no I/O; openai_wire.py reads requests the other way."""

from __future__ import annotations

import re
import time
from typing import Any

from conductor_mcp.core.client_tools import final_record
from conductor_mcp.core.outcome import BUDGETS
from conductor_mcp.core.records import Run, ToolCall
from conductor_mcp.errors import RequestError
from conductor_mcp.service.patches import patch_metadata

RESPONSE_ID = re.compile(r"^resp_([0-9A-Za-z]{1,64})(?:_\d{1,6})?$")


def turn_tokens(run: Run) -> tuple[int, int]:
    """The prompt and completion tokens this response accounts for: every token the run spent, conductor
    included (what the caller pays for); for a tool turn, the turn's own (earlier turns were reported already)."""
    last = final_record(run)
    if last is not None and last.tool_results:
        return last.prompt_tokens, last.completion_tokens
    return run.totals.prompt_tokens, run.totals.completion_tokens


def responses_usage(run: Run) -> dict[str, Any]:
    prompt, completion = turn_tokens(run)
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def chat_usage(run: Run) -> dict[str, Any]:
    prompt, completion = turn_tokens(run)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def response_id(run: Run) -> str:
    """`resp_<run id>`, then `resp_<run id>_<n>` for the n-th tool turn: each response of a run has its own id."""
    turns = sum(1 for step in run.steps if step.tool_results)
    return f"resp_{run.id}_{turns}" if turns else f"resp_{run.id}"


def run_of_response(identifier: str) -> str:
    """The run a response id (`resp_<run id>` or `resp_<run id>_<n>`) belongs to; RequestError for another."""
    match = RESPONSE_ID.match(identifier)
    if match is None:
        raise RequestError(f"previous_response_id: {identifier[:80]!r} is not a response id of this server (resp_...)")
    return match.group(1)


def pending_calls(run: Run) -> list[ToolCall]:
    """The client's tools the run's final worker called, for the client to run (none once it answered)."""
    last = final_record(run)
    return list(last.tool_calls) if last is not None and last.status == "done" else []


def function_call_item(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call.id.removeprefix('call_')}",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }


def finished_ok(run: Run) -> bool:
    """A run that has an answer to give: done (a budget or cap stop gives its best answer, as incomplete)."""
    return run.status == "done" and run.answer is not None


def outcome(run: Run) -> tuple[str, str | None]:
    """The one mapping of a run's outcome to OpenAI's terms: the response status, and why it is incomplete.

    A limit (the caller's max_output_tokens or max_usd, the server's budget, a call or depth cap) that left an
    answer is OpenAI's `incomplete` with the output so far; the run's own Stop says which limit (metadata)."""
    if run.status == "running":
        return "in_progress", None
    if not finished_ok(run):
        return "failed", None
    if run.stop is not None and run.stop.is_limit:
        return "incomplete", "max_output_tokens"
    return "completed", None


def message_item(run: Run, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{response_id(run).removeprefix('resp_')}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def reasoning_item(run: Run, summary: str) -> dict[str, Any]:
    identifier = f"rs_{response_id(run).removeprefix('resp_')}"
    return {"type": "reasoning", "id": identifier, "summary": [{"type": "summary_text", "text": summary}]}


def answer_items(run: Run) -> list[dict[str, Any]]:
    """The answer as output items: the assistant's text (left out when it only called tools), then its calls."""
    calls = pending_calls(run)
    text = [message_item(run, run.answer or "")] if run.answer or not calls else []
    return [*text, *(function_call_item(call) for call in calls)]


def response_object(run: Run, model: str, output: list[dict[str, Any]], created: int) -> dict[str, Any]:
    """A Responses `response` for a run in any state (`in_progress` while it runs)."""
    status, reason = outcome(run)
    metadata: dict[str, Any] = {"conductor_run_id": run.id, **patch_metadata(run)}
    if run.stop is not None and status != "completed":
        metadata["conductor_stop"] = run.stop.kind
    return {
        "id": response_id(run),
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": output,
        "usage": responses_usage(run) if status != "in_progress" else None,
        "metadata": metadata,
        "error": run_error(run)[1] if status == "failed" else None,
        "incomplete_details": {"reason": reason} if reason else None,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "instructions": None,
    }


def run_error(run: Run) -> tuple[int, dict[str, Any]]:
    """Why a run gave no answer, and how to get one (its finished steps are kept), with the HTTP status:
    402 when a budget stopped it before any answer, else 500."""
    message = (
        f"run {run.id} {run.status}: {run.error or 'no answer'}; its finished steps are kept: "
        f"GET /v1/runs/{run.id} shows them, and MCP continue_workflow with run_id '{run.id}' resumes it"
    )
    if run.stop is not None and run.stop.kind in BUDGETS:
        message += "; or raise max_output_tokens / max_tokens / metadata.max_usd"
        return 402, {"message": message, "type": "insufficient_quota", "param": None, "code": "budget_exhausted"}
    return 500, {"message": message, "type": "server_error", "param": None, "code": "run_failed"}


def chat_tool_calls(run: Run) -> list[dict[str, Any]]:
    return [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in pending_calls(run)
    ]


def finish_reason(run: Run) -> str:
    return "tool_calls" if pending_calls(run) else "length" if outcome(run)[0] == "incomplete" else "stop"


def chat_object(run: Run, model: str, created: int) -> dict[str, Any]:
    calls = chat_tool_calls(run)
    message = {"role": "assistant", "content": run.answer or (None if calls else run.answer)}
    return {
        "id": f"chatcmpl-{response_id(run).removeprefix('resp_')}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {**message, **({"tool_calls": calls} if calls else {})},
                "finish_reason": finish_reason(run),
                "logprobs": None,
            }
        ],
        "usage": chat_usage(run),
        "conductor_run_id": run.id,
        **patch_metadata(run),
    }


def now_s() -> int:
    return int(time.time())
