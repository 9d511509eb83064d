"""A bounded tool loop: a model given workspace tools calls them, reads what they return, and answers.

It is written against one small callable, `complete(messages, tools=...)`, that returns a completion with text,
tool calls (name, JSON arguments), tokens and cost: `functools.partial(providers.complete, spec, label=...)` is one
(models/providers.py's Completion has that shape). At most `max_turns` model calls (two at least): the last one is
offered no tools, with a note that it must answer now, so the loop always ends with an answer. Each tool result is
cut to `max_tool_output_chars` before the model sees it; every call and result is kept (bounded) for the record.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from conductor_mcp.agents.tools import WorkspaceTools
from conductor_mcp.core.agent_records import ToolUse
from conductor_mcp.core.limits import RECORDED_ARGUMENT_CHARS, WORKSPACE_TOOL_OUTPUT_CHARS
from conductor_mcp.runtime.logs import redact_values

LAST_TURN_NOTE = "You have used every tool turn you had: answer now, from what you have found."


class ToolCompletion(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> list[tuple[str, str]]: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...


class Complete(Protocol):
    def __call__(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None
    ) -> Awaitable[ToolCompletion]: ...


@dataclass
class LoopResult:
    answer: str
    uses: list[ToolUse] = field(default_factory=list)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    ended: Literal["answered", "max_turns"] = "answered"


async def tool_loop(
    complete: Complete,
    messages: list[dict[str, Any]],
    tools: WorkspaceTools,
    *,
    max_turns: int,
    max_tool_output_chars: int = WORKSPACE_TOOL_OUTPUT_CHARS,
) -> LoopResult:
    """Run the loop on `messages` (a copy is extended; the caller's list is left as it is)."""
    if max_turns < 2:
        raise ValueError("max_turns must be at least 2: one turn to call tools, one to answer")
    history = list(messages)
    result = LoopResult(answer="")
    for turn in range(1, max_turns + 1):
        last = turn == max_turns
        if last and turn > 1:
            history.append({"role": "user", "content": LAST_TURN_NOTE})
        completion = await complete(history, tools=None if last else tools.schemas())
        result.turns = turn
        result.prompt_tokens += completion.prompt_tokens
        result.completion_tokens += completion.completion_tokens
        result.cost_usd += completion.cost_usd
        if last or not completion.tool_calls:
            result.answer = completion.text
            result.ended = "max_turns" if last and turn > 1 else "answered"
            return result
        await _call_tools(completion, history, tools, turn, result, max_tool_output_chars)
    raise AssertionError("unreachable: the last turn returns")


async def _call_tools(
    completion: ToolCompletion,
    history: list[dict[str, Any]],
    tools: WorkspaceTools,
    turn: int,
    result: LoopResult,
    max_chars: int,
) -> None:
    """Run the turn's tool calls in order and put them and their results in the history."""
    ids = [f"call_{turn}_{n}" for n in range(len(completion.tool_calls))]
    history.append(
        {
            "role": "assistant",
            "content": completion.text or None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                for call_id, (name, arguments) in zip(ids, completion.tool_calls, strict=True)
            ],
        }
    )
    for call_id, (name, arguments) in zip(ids, completion.tool_calls, strict=True):
        started = time.perf_counter()
        outcome = await tools.call(name, arguments)
        output = _cut(redact_values(outcome.output), max_chars)  # a file it read may hold a key the server knows
        history.append({"role": "tool", "tool_call_id": call_id, "content": output})
        result.uses.append(
            ToolUse(
                turn=turn,
                name=name[:100],
                arguments=_cut(arguments, RECORDED_ARGUMENT_CHARS),
                output=output,
                error=outcome.error,
                latency_s=round(time.perf_counter() - started, 4),
            )
        )


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... cut: {len(text) - limit} more characters]"
