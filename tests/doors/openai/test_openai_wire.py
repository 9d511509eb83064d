"""The OpenAI wire translation on its own (no server): conversations into task and context, limits into a run."""

from __future__ import annotations

import re

import pytest

from conductor_mcp.core.limits import MAX_CONTEXT_CHARS
from conductor_mcp.core.request import RunRequest
from conductor_mcp.doors.openai.replies import run_of_response
from conductor_mcp.doors.openai.wire import chat_request, chat_tool_reply, responses_request, responses_tool_reply
from conductor_mcp.errors import RequestError, RequestTooLarge


def test_a_codex_style_history_keeps_tool_turns_in_order_and_skips_reasoning() -> None:
    asked = responses_request(
        {
            "model": "conductor",
            "instructions": "You are Codex.",
            "stream": True,
            "tools": [{"type": "function", "name": "exec_command", "parameters": {}}],
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox rules"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
                {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
                {"type": "function_call", "name": "exec_command", "arguments": '{"cmd": "ls"}', "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": "main.py"},
            ],
        }
    )
    assert asked.task == "fix the bug" and asked.stream
    assert asked.context is not None and "opaque" not in asked.context
    order = ["[instructions]\nYou are Codex.", "[developer]\nsandbox rules", "exec_command", "c1)\nmain.py"]
    assert [asked.context.index(piece) for piece in order] == sorted(asked.context.index(p) for p in order)


def test_chat_messages_and_limits() -> None:
    asked = chat_request(
        {
            "model": "conductor/sim",
            "max_tokens": 900,
            "reasoning_effort": "minimal",
            "metadata": {"max_usd": "0.5"},
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "the task"}]},
            ],
        }
    )
    assert asked.task == "the task" and asked.context == "[system]\nsys"
    assert asked.run_fields == {"budget": {"max_tokens": 900, "max_usd": 0.5}, "max_steps": 1, "tools": ()}
    high = chat_request({"model": "m", "reasoning_effort": "high", "messages": [{"role": "user", "content": "x"}]})
    assert high.run_fields["max_steps"] == 20 and "self_correct" not in high.run_fields


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ({"model": "conductor"}, RequestError, "input: missing"),
        ({"input": "x"}, RequestError, "model: missing"),
        ({"model": "c", "input": [{"role": "assistant", "content": "hi"}]}, RequestError, "no user message"),
        (
            {"model": "c", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            RequestError,
            "file input (input_file) is not supported",
        ),
        ({"model": "c", "input": "x", "metadata": {"max_usd": "lots"}}, RequestError, "metadata.max_usd"),
        ({"model": "c", "input": "x", "reasoning": {"effort": "max"}}, RequestError, "reasoning.effort: must be"),
    ],
)
def test_bad_requests_name_the_field(body: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        responses_request(body)


def test_a_history_over_the_context_limit_is_too_large_for_the_request_it_becomes() -> None:
    """The wire only translates; the RunRequest the door builds from it checks every size, as for any door."""
    asked = responses_request({"model": "c", "input": "x", "instructions": "y" * (MAX_CONTEXT_CHARS + 1)})
    with pytest.raises(RequestTooLarge, match=r"context: \d+ characters exceeds the limit of 400000"):
        RunRequest.of(task=asked.task, context=asked.context, **asked.run_fields)


OUR_CALL = "call_0123456789abcdef_2_0"


def test_trailing_tool_outputs_answer_the_run_their_call_ids_name() -> None:
    history = [
        {"role": "user", "content": "fix the bug"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": OUR_CALL},
        {"type": "function_call_output", "call_id": OUR_CALL, "output": "ok"},
    ]
    reply = responses_tool_reply({"model": "conductor", "input": history, "stream": True}, None)
    assert reply is not None and reply.run_id == "0123456789abcdef" and reply.stream
    assert [(r.call_id, r.output) for r in reply.results] == [(OUR_CALL, "ok")]
    new_question = [*history, {"role": "user", "content": "now explain it"}]
    assert responses_tool_reply({"model": "conductor", "input": new_question}, None) is None  # a new task
    theirs = [history[0], {"type": "function_call_output", "call_id": "call_theirs", "output": "ok"}]
    assert responses_tool_reply({"model": "conductor", "input": theirs}, None) is None  # not our call: history
    by_id = responses_tool_reply({"model": "conductor", "input": theirs}, run_of_response("resp_00000000000000aa_3"))
    assert by_id is not None and by_id.run_id == "00000000000000aa"


def test_chat_tool_messages_after_the_last_user_message_are_a_tool_reply() -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": OUR_CALL, "type": "function", "function": {"name": "w", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": OUR_CALL, "content": [{"type": "text", "text": "rain"}]},
    ]
    reply = chat_tool_reply({"model": "conductor", "messages": messages})
    assert reply is not None and reply.results[0].output == "rain" and reply.run_id == "0123456789abcdef"
    assert chat_tool_reply({"model": "conductor", "messages": messages[:1]}) is None
    with pytest.raises(RequestError, match="tools: must be a list"):
        chat_request({"model": "conductor", "messages": messages[:1], "tools": {"type": "function"}})
