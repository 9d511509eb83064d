"""The client's tools (OpenAI function calling): offered to the final step's worker, run by the client.

A run whose final worker calls tools ends with those calls (its answer is whatever text came with them). The
client runs them and sends the results back; the same worker then goes on with its own conversation plus the
results, as a new step of the same run (a tool turn), until it answers in text. Nothing is re-planned: the
team's work is done, and what remains is between the client and the final worker.

Call ids name their run and step (`call_<run id>_<step>_<n>`), so a client that keeps no state on the server
(Codex sends `store: false` and resends the whole history) finds its run again by the ids it echoes back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conductor_mcp.core.limits import MAX_TOOL_OUTPUT_CHARS
from conductor_mcp.core.pool import CONDUCTOR_ID
from conductor_mcp.core.prompts import TOOL_TURN_INSTRUCTION
from conductor_mcp.core.records import Run, StepRecord, ToolCall, ToolResult
from conductor_mcp.core.workflow import Step
from conductor_mcp.errors import RequestError

CALL_ID = re.compile(r"^call_([0-9a-f]{16})_(\d+)_(\d+)$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


def function_tools(raw: Any, tool_choice: Any = None, where: str = "tools") -> list[dict[str, Any]]:
    """A request's function tools in chat format (either API's shape accepted). Other kinds (web search, a
    namespace tool) are left out: a worker can only call functions. `tool_choice: "none"` offers none. Their
    number and size are bounded by the RunRequest they go into."""
    if raw is None or tool_choice == "none":
        return []
    if not isinstance(raw, list):
        raise RequestError(f"{where}: must be a list of tools")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise RequestError(f"{where}[{i}]: must be an object")
        if tool.get("type") != "function":
            continue
        spec = tool.get("function", tool)  # Chat Completions nests the function; Responses does not
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise RequestError(f"{where}[{i}].name: must be 1-128 letters, digits, '_', '.' or '-', got {name!r}")
        function = {"name": name, **{k: spec[k] for k in ("description", "parameters", "strict") if k in spec}}
        tools.append({"type": "function", "function": function})
    return tools


def call_id(run_id: str, step_index: int, n: int) -> str:
    return f"call_{run_id}_{step_index}_{n}"


def run_of_call(identifier: str) -> str | None:
    """The run a call id was made by, or None for an id this server did not make."""
    match = CALL_ID.match(identifier)
    return match.group(1) if match else None


def tool_result(identifier: Any, output: Any, where: str) -> ToolResult:
    """One tool output from a request, checked and cut to size."""
    if not isinstance(identifier, str) or not identifier:
        raise RequestError(f"{where}: the call id is missing; say which tool call this output answers")
    if not isinstance(output, str):
        output = json.dumps(output)
    if len(output) > MAX_TOOL_OUTPUT_CHARS:
        cut = len(output) - MAX_TOOL_OUTPUT_CHARS
        output = output[:MAX_TOOL_OUTPUT_CHARS] + f"\n[... {cut} more characters cut]"
    return ToolResult(call_id=identifier, output=output)


def final_record(run: Run) -> StepRecord | None:
    """The record of the workflow's last top-level step, whose answer is the run's."""
    if run.workflow is None or not run.workflow.steps:
        return None
    key = str(len(run.workflow.steps) - 1)
    return next((r for r in run.steps if r.key == key), None)


def offers_tools(run: Run, record: StepRecord) -> bool:
    """Whether this step's worker is given the client's tools: the final top-level step, a worker's."""
    return bool(run.tools) and record.worker_id != CONDUCTOR_ID and final_record(run) is record


def add_tool_turn(run: Run, results: list[ToolResult]) -> list[int]:
    """Give the client's results to a run whose final step called tools: a new step (a tool turn) for the same
    worker, or the same turn again if it did not finish. Raises RequestError when the run is not waiting for
    these results; returns the position of the turn's record (for Store.update)."""
    last = final_record(run)
    retry = last if last is not None and last.tool_results and last.status != "done" else None
    asked = next((r for r in run.steps if r.key == str(retry.access[0])), None) if retry else last
    if asked is None or asked.status != "done" or not asked.tool_calls:
        raise RequestError(
            f"input: run {run.id} is not waiting for tool results (its last step called no tools); "
            "send a new user message instead"
        )
    given = {result.call_id: result for result in results}
    missing = [call.id for call in asked.tool_calls if call.id not in given]
    if missing:
        raise RequestError(f"input: no tool output for call {', '.join(missing)}; answer every call of the last turn")
    answers = [given[call.id] for call in asked.tool_calls]
    run.answer = None
    if retry is not None:
        retry.tool_results, retry.status, retry.error = answers, "pending", None
        return [run.steps.index(retry)]
    assert run.workflow is not None  # final_record found a step
    step = Step(worker=asked.visible_id, instruction=TOOL_TURN_INSTRUCTION, access=[asked.index])
    run.workflow.steps.append(step)
    index = len(run.workflow.steps) - 1
    record = StepRecord(
        key=str(index),
        index=index,
        worker_id=asked.worker_id,
        visible_id=asked.visible_id,
        model=asked.model,
        instruction=step.instruction,
        access=step.access,
        tool_results=answers,
    )
    run.steps.append(record)
    return [len(run.steps) - 1]


def turn_messages(
    previous_messages: list[dict[str, Any]], previous: StepRecord, turn: StepRecord
) -> list[dict[str, Any]]:
    """A tool turn's messages: the previous step's conversation, the tool calls it ended with, then the client's
    results (on the turn's own record)."""
    calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in previous.tool_calls
    ]
    results = [{"role": "tool", "tool_call_id": r.call_id, "content": r.output} for r in turn.tool_results]
    asked = {"role": "assistant", "content": previous.output or None, "tool_calls": calls}
    return [*previous_messages, asked, *results]


def tool_calls_of(run_id: str, step_index: int, asked: list[tuple[str, str]]) -> list[ToolCall]:
    """The (name, arguments) a model asked for, as ToolCalls with this server's ids."""
    return [
        ToolCall(id=call_id(run_id, step_index, n), name=name, arguments=arguments)
        for n, (name, arguments) in enumerate(asked)
    ]
