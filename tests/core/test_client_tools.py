"""The client's tools on their own: definitions in either API's shape, call ids, and tool turns on a run."""

from __future__ import annotations

import json

import pytest

from conductor_mcp.core.client_tools import (
    add_tool_turn,
    call_id,
    function_tools,
    offers_tools,
    run_of_call,
    tool_calls_of,
    tool_result,
    turn_messages,
)
from conductor_mcp.core.limits import MAX_TOOLS_CHARS
from conductor_mcp.core.records import Run, StepRecord, ToolResult
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.errors import RequestError, RequestTooLarge

PARAMS = {"type": "object", "properties": {"cmd": {"type": "string"}}}


def test_both_api_shapes_become_chat_tools_and_other_kinds_are_left_out() -> None:
    responses_shape = {"type": "function", "name": "exec_command", "description": "run", "parameters": PARAMS}
    chat_shape = {"type": "function", "function": {"name": "read_file", "parameters": PARAMS, "strict": True}}
    tools = function_tools([responses_shape, {"type": "web_search"}, {"type": "namespace", "name": "x"}, chat_shape])
    assert tools == [
        {"type": "function", "function": {"name": "exec_command", "description": "run", "parameters": PARAMS}},
        {"type": "function", "function": {"name": "read_file", "parameters": PARAMS, "strict": True}},
    ]
    assert function_tools([responses_shape], tool_choice="none") == []
    assert function_tools(None) == []


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        ({"type": "function"}, RequestError, "tools: must be a list"),
        (["x"], RequestError, r"tools\[0\]: must be an object"),
        ([{"type": "function", "name": "rm -rf"}], RequestError, r"tools\[0\]\.name: must be 1-128 letters"),
    ],
)
def test_bad_tool_definitions_name_what_is_wrong(raw: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        function_tools(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([{"type": "function", "name": f"t{i}"} for i in range(129)], "tools: 129 function tools, over the limit"),
        ([{"type": "function", "name": "big", "description": "x" * MAX_TOOLS_CHARS}], "characters, over the limit"),
    ],
)
def test_too_many_or_too_large_tools_are_refused_as_too_large(raw: object, message: str) -> None:
    with pytest.raises(RequestTooLarge, match=message):
        RunRequest.of(task="t", tools=tuple(function_tools(raw)))


def test_call_ids_name_their_run_and_others_name_none() -> None:
    assert run_of_call(call_id("0123456789abcdef", 3, 1)) == "0123456789abcdef"
    assert run_of_call("call_abc") is None and run_of_call("toolu_01") is None


def test_a_long_tool_output_is_cut_with_a_note_and_a_missing_call_id_is_refused() -> None:
    result = tool_result("c1", "y" * 200_000, "input[3]")
    assert len(result.output) < 101_000 and result.output.endswith("more characters cut]")
    assert tool_result("c1", {"exit": 0}, "input[3]").output == '{"exit": 0}'
    with pytest.raises(RequestError, match=r"input\[3\]: the call id is missing"):
        tool_result(None, "out", "input[3]")


def _waiting_run() -> Run:
    """A finished two-step run whose final worker called one tool."""
    workflow = Workflow(steps=[Step(worker="a", instruction="plan"), Step(worker="b", instruction="do", access=[0])])
    steps = [
        StepRecord(key="0", index=0, worker_id="a", visible_id="a", model="sim/a", instruction="plan", status="done"),
        StepRecord(
            key="1",
            index=1,
            worker_id="b",
            visible_id="b",
            model="sim/b",
            instruction="do",
            access=[0],
            status="done",
            output="",
        ),
    ]
    run = Run(
        id="0123456789abcdef",
        task="t",
        pool="sim",
        pool_digest="d",
        conductor_model="sim/conductor",
        max_steps=4,
        workflow=workflow,
        steps=steps,
        status="done",
        answer="",
        tools=[{"type": "function", "function": {"name": "ls"}}],
    )
    steps[1].tool_calls = tool_calls_of(run.id, 1, [("ls", '{"path": "."}')])
    return run


def test_only_the_final_worker_is_offered_the_tools() -> None:
    run = _waiting_run()
    assert offers_tools(run, run.steps[1]) and not offers_tools(run, run.steps[0])


def test_a_tool_turn_is_a_new_step_for_the_same_worker_and_a_failed_one_is_tried_again() -> None:
    run = _waiting_run()
    call = run.steps[1].tool_calls[0]
    with pytest.raises(RequestError, match=f"no tool output for call {call.id}"):
        add_tool_turn(run, [ToolResult(call_id="other", output="x")])
    assert add_tool_turn(run, [ToolResult(call_id=call.id, output="a.py")]) == [2]
    turn = run.steps[2]
    assert (turn.worker_id, turn.access, turn.tool_results[0].output) == ("b", [1], "a.py")
    assert run.workflow is not None and len(run.workflow.steps) == 3 and run.answer is None
    messages = turn_messages([{"role": "user", "content": "t"}], run.steps[1], turn)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "ls", "arguments": json.dumps({"path": "."})}
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": "a.py"}

    turn.status, turn.error = "failed", "timed out"
    assert add_tool_turn(run, [ToolResult(call_id=call.id, output="b.py")]) == [2]  # the same turn, tried again
    assert len(run.steps) == 3 and turn.status == "pending" and turn.tool_results[0].output == "b.py"
    turn.status, turn.output = "done", "It has a.py and b.py."  # answered in text: nothing left to run
    with pytest.raises(RequestError, match="is not waiting for tool results"):
        add_tool_turn(run, [ToolResult(call_id=call.id, output="a.py")])
