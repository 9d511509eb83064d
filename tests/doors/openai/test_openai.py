"""The OpenAI-compatible door driven by the official openai SDK against a real `serve --http` process (sim pool)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import HttpServer, scripted_pool, sim_pool_doc, write_pool

pytestmark = [pytest.mark.slow]

TOKEN = "openai-door-token-for-tests"
TASK = "What is 6 * 7? Explain step by step."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("openai")
    pool_dir = root / "pools"
    pool_dir.mkdir()
    slow = {name: {"first_token_s": 60} for name in ("alpha", "beta", "gamma")}
    write_pool(pool_dir, sim_pool_doc(name="slowsim", simulation={"workers": slow}))
    scripted_pool(
        pool_dir, "chain3", [("model_0", "Draft.", []), ("model_1", "Improve.", [0]), ("model_2", "Finish.", [1])]
    )
    env = {
        "CONDUCTOR_POOL": "sim",
        "CONDUCTOR_HTTP_TOKEN": TOKEN,
        "CONDUCTOR_SIM_TIME_SCALE": "0.01",
        "CONDUCTOR_OPENAI_KEEPALIVE_S": "0.2",
    }
    started = HttpServer(root / "state", pool_dir, **env)
    yield started
    started.stop()


def base_url(server: HttpServer) -> str:
    return f"http://127.0.0.1:{server.port}/v1"


@pytest.fixture
def client(server: HttpServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url(server), api_key=TOKEN, max_retries=0)


def stored_run(server: HttpServer, run_id: str) -> dict:
    response = httpx.get(f"{base_url(server)}/runs/{run_id}", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return response.json()


def test_models_list_the_default_and_every_pool(client: openai.OpenAI) -> None:
    ids = {model.id for model in client.models.list()}
    assert {"conductor", "conductor/sim", "conductor/slowsim"} <= ids


def test_responses_create_answers_with_provenance_and_full_usage(client: openai.OpenAI, server: HttpServer) -> None:
    raw = client.responses.with_raw_response.create(
        model="conductor",
        instructions="Answer briefly.",
        input=[
            {"role": "developer", "content": "You are careful."},
            {"role": "user", "content": "Earlier question"},
            {"role": "assistant", "content": "Earlier answer"},
            {"role": "user", "content": [{"type": "input_text", "text": TASK}]},
        ],
    )
    response = raw.parse()
    assert response.metadata is not None
    run_id = response.metadata["conductor_run_id"]
    assert raw.headers["x-conductor-run-id"] == run_id
    assert response.status == "completed" and response.output_text
    run = stored_run(server, run_id)
    assert run["status"] == "done" and run["answer"] == response.output_text
    assert run["task"] == TASK and run["pool"] == "sim"
    assert run["context"].index("[instructions]\nAnswer briefly.") < run["context"].index("[developer]\nYou are")
    assert run["context"].index("[user]\nEarlier question") < run["context"].index("[assistant]\nEarlier answer")
    assert response.usage is not None and response.usage.total_tokens == run["totals"]["total_tokens"]
    assert run["totals"]["conductor_tokens"] > 0  # the conductor's tokens are in what the caller pays for


def test_responses_stream_reasoning_then_answer_then_completed(client: openai.OpenAI, server: HttpServer) -> None:
    kinds: list[str] = []
    summary = ""
    with client.responses.stream(model="conductor/sim", input=TASK, reasoning={"effort": "low"}) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.reasoning_summary_text.delta":
                summary += event.delta
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    first_text = kinds.index("response.output_text.delta")
    assert kinds.index("response.reasoning_summary_text.delta") < first_text
    assert summary.startswith("run ") and "planning\nworkflow of" in summary and "run done" in summary
    assert final.metadata is not None
    run = stored_run(server, final.metadata["conductor_run_id"])
    assert final.output_text == run["answer"] and run["max_steps"] == 2  # effort low: at most two steps
    assert final.usage is not None and final.usage.total_tokens == run["totals"]["total_tokens"]


def test_chat_completions_with_and_without_stream(client: openai.OpenAI, server: HttpServer) -> None:
    messages = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": TASK}]
    completion = client.chat.completions.create(model="conductor", messages=messages)  # type: ignore[arg-type]
    run_id = completion.model_extra["conductor_run_id"]  # type: ignore[index]
    run = stored_run(server, run_id)
    assert completion.choices[0].message.content == run["answer"] and run["context"] == "[system]\nBe exact."
    assert completion.usage is not None and completion.usage.total_tokens == run["totals"]["total_tokens"]

    chunks = list(client.chat.completions.create(model="conductor/sim", messages=messages, stream=True))  # type: ignore[arg-type]
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    run = stored_run(server, (chunks[0].model_extra or {})["conductor_run_id"])
    assert "workflow of" in reasoning and content == run["answer"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == run["totals"]["total_tokens"]


def test_errors_in_openai_shape(client: openai.OpenAI, server: HttpServer) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="conductor/nope", input="hi")
    assert unknown.value.code == "model_not_found" and "conductor/sim" in unknown.value.message
    with pytest.raises(openai.AuthenticationError) as auth:
        openai.OpenAI(base_url=base_url(server), api_key="wrong", max_retries=0).models.list()
    assert auth.value.code == "invalid_api_key" and "CONDUCTOR_HTTP_TOKEN" in auth.value.message
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="conductor", input=[{"role": "user", "content": [image]}])  # type: ignore[list-item]
    assert "image input (input_image) is not supported" in bad.value.message
    with pytest.raises(openai.BadRequestError) as no_input:
        client.chat.completions.create(model="conductor", messages=[])
    assert no_input.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as effort:
        client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "x"}], reasoning_effort="extreme"
        )  # type: ignore[arg-type]
    assert effort.value.param == "reasoning_effort"
    with pytest.raises(openai.APIStatusError) as large:
        client.responses.create(model="conductor", input="x" * 100_001)
    assert large.value.status_code == 413 and large.value.code == "request_too_large"
    missing = httpx.get(f"{base_url(server)}/runs/{'0' * 16}", headers={"authorization": f"Bearer {TOKEN}"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"


def test_budget_and_effort_become_the_run_limits(client: openai.OpenAI, server: HttpServer) -> None:
    response = client.responses.create(
        model="conductor",
        input=TASK,
        max_output_tokens=50_000,
        metadata={"max_usd": "2.5"},
        reasoning={"effort": "xhigh"},
    )
    run = stored_run(server, response.metadata["conductor_run_id"])  # type: ignore[index]
    assert run["budget"] == {"max_tokens": 50_000, "max_usd": 2.5}
    assert run["max_steps"] == 20 and run["self_correct"] is True
    with pytest.raises(openai.APIStatusError) as spent:
        client.responses.create(model="conductor", input=TASK, max_output_tokens=1)
    assert spent.value.status_code == 402 and spent.value.code == "budget_exhausted"
    run = stored_run(server, spent.value.response.headers["x-conductor-run-id"])
    assert run["status"] == "failed" and run["conductor_calls"]  # the conductor's call is kept, paid for


def test_a_budget_that_stops_a_run_midway_answers_incomplete_with_the_best_answer(
    client: openai.OpenAI, server: HttpServer
) -> None:
    """OpenAI's contract for a response cut short by max_output_tokens: 200, status incomplete with the reason, and
    the output so far (Chat: finish_reason length). Before, the door answered 402 with no output at all."""
    probe = stored_run(
        server, client.responses.create(model="conductor/chain3", input=TASK).metadata["conductor_run_id"]
    )  # type: ignore[index]
    conductor, first = probe["conductor_calls"][0], probe["steps"][0]
    after_first = sum(c["prompt_tokens"] + c["completion_tokens"] for c in (conductor, first))
    response = client.responses.create(model="conductor/chain3", input=TASK, max_output_tokens=after_first + 5)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == first["output"] and response.metadata["conductor_stop"] == "token_budget"  # type: ignore[index]
    run = stored_run(server, response.metadata["conductor_run_id"])  # type: ignore[index]
    assert run["status"] == "done" and [s["status"] for s in run["steps"]] == ["done", "skipped", "skipped"]
    chat = client.chat.completions.create(
        model="conductor/chain3", messages=[{"role": "user", "content": TASK}], max_tokens=after_first + 5
    )
    assert chat.choices[0].finish_reason == "length" and chat.choices[0].message.content == first["output"]


def test_stream_starts_at_once_and_keeps_alive_and_a_disconnect_cancels_nothing(server: HttpServer) -> None:
    body = {"model": "conductor/slowsim", "input": TASK, "stream": True}
    headers = {"authorization": f"Bearer {TOKEN}"}
    started = time.monotonic()
    lines: list[str] = []
    with httpx.stream("POST", f"{base_url(server)}/responses", json=body, headers=headers, timeout=30) as response:
        run_id = response.headers["x-conductor-run-id"]
        for line in response.iter_lines():
            if not lines:
                first_event_s = time.monotonic() - started
            lines.append(line)
            if line == ": keep-alive":
                break  # the client goes away mid-run
    assert first_event_s < 0.2 and lines[0] == "event: response.created"
    assert lines[-1] == ": keep-alive" and stored_run(server, run_id)["status"] == "running"
    deadline = time.monotonic() + 30
    while (run := stored_run(server, run_id))["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run["status"] == "done" and run["answer"]  # the run went on to the end


def test_sse_events_are_well_formed(server: HttpServer) -> None:
    body = {"model": "conductor", "messages": [{"role": "user", "content": TASK}], "stream": True}
    response = httpx.post(
        f"{base_url(server)}/chat/completions", json=body, headers={"authorization": f"Bearer {TOKEN}"}
    )
    data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert all(json.loads(chunk)["object"] == "chat.completion.chunk" for chunk in data[:-1])


def test_previous_response_id_carries_the_conversation_across_a_restart(tmp_path: Path) -> None:
    env = {"CONDUCTOR_POOL": "sim", "CONDUCTOR_HTTP_TOKEN": TOKEN, "CONDUCTOR_SIM_TIME_SCALE": "0.01"}
    first_server = HttpServer(tmp_path, None, **env)
    try:
        sdk = openai.OpenAI(base_url=base_url(first_server), api_key=TOKEN, max_retries=0)
        first = sdk.responses.create(model="conductor", input="Name a prime number.", instructions="Be brief.")
    finally:
        first_server.stop()
    server = HttpServer(tmp_path, None, **env)
    try:
        sdk = openai.OpenAI(base_url=base_url(server), api_key=TOKEN, max_retries=0)
        second = sdk.responses.create(model="conductor", input=TASK, previous_response_id=first.id)
        assert second.metadata is not None
        run = stored_run(server, second.metadata["conductor_run_id"])
        with pytest.raises(openai.NotFoundError) as unknown:
            sdk.responses.create(model="conductor", input=TASK, previous_response_id="resp_0000000000000000")
    finally:
        server.stop()
    assert run["task"] == TASK
    assert "Be brief." in run["context"] and "[user]\nName a prime number." in run["context"]
    assert f"[assistant]\n{first.output_text}" in run["context"]
    assert unknown.value.param == "previous_response_id"


def test_a_run_that_fails_mid_stream_ends_the_stream_with_its_error(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="conductor", input=TASK, max_output_tokens=1, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.error is not None and failed.error.code == "budget_exhausted"
    assert failed.usage is not None and failed.usage.total_tokens > 0  # what was spent is still reported
    with pytest.raises(openai.APIError, match="budget reached"):
        list(
            client.chat.completions.create(
                model="conductor", messages=[{"role": "user", "content": TASK}], max_tokens=1, stream=True
            )
        )


def test_the_host_check_guards_the_openai_door_too(server: HttpServer) -> None:
    headers = {"authorization": f"Bearer {TOKEN}", "host": "evil.example:80"}
    refused = httpx.get(f"{base_url(server)}/models", headers=headers)
    assert refused.status_code == 421 and refused.json()["error"]["code"] == "forbidden"


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL_TASK = 'Should I take an umbrella in Paris? Call get_weather {"city": "Paris"} first.'


def test_tool_call_round_trip_through_responses_and_previous_response_id(
    client: openai.OpenAI, server: HttpServer
) -> None:
    first = client.responses.create(model="conductor/sim", input=TOOL_TASK, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert first.metadata is not None
    run_id = first.metadata["conductor_run_id"]
    assert first.id == f"resp_{run_id}" and calls[0].call_id.startswith(f"call_{run_id}_")

    second = client.responses.create(
        model="conductor/sim",
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "rain, 12 C"}],
    )
    assert second.id == f"resp_{run_id}_1" and (second.metadata or {})["conductor_run_id"] == run_id
    assert "Tool result: rain, 12 C" in second.output_text
    assert not [item for item in second.output if item.type == "function_call"]
    run = stored_run(server, run_id)
    final, turn = run["steps"][-2], run["steps"][-1]
    assert turn["worker_id"] == final["worker_id"] and turn["access"] == [final["index"]]
    assert turn["tool_results"] == [{"call_id": calls[0].call_id, "output": "rain, 12 C"}]
    assert len(run["conductor_calls"]) == 1  # no re-planning: the turn is a step of the same run
    assert run["status"] == "done" and run["answer"] == second.output_text
    assert second.usage is not None
    assert second.usage.total_tokens == turn["prompt_tokens"] + turn["completion_tokens"]  # this turn's own


def test_a_stateless_client_resending_the_history_continues_the_same_run(
    client: openai.OpenAI, server: HttpServer
) -> None:
    """Codex's way: `store: false`, no previous_response_id, the whole conversation every turn."""
    history: list[dict] = [{"role": "user", "content": TOOL_TASK}]
    with client.responses.stream(model="conductor/sim", input=history, tools=[WEATHER_TOOL], store=False) as stream:  # type: ignore[arg-type,list-item]
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    call = next(item for item in first.output if item.type == "function_call")
    history += [
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    with client.responses.stream(model="conductor/sim", input=history, tools=[WEATHER_TOOL], store=False) as stream:  # type: ignore[arg-type,list-item]
        second = stream.get_final_response()
    assert first.metadata is not None and second.metadata == first.metadata
    assert "Tool result: sunny" in second.output_text
    bad = [*history[:-1], {"type": "function_call_output", "call_id": "call_0123456789abcdef_0_0", "output": "x"}]
    with pytest.raises(openai.NotFoundError):  # a call id in this server's form, of no stored run
        client.responses.create(model="conductor/sim", input=bad, tools=[WEATHER_TOOL])  # type: ignore[arg-type,list-item]


def test_tool_calls_round_trip_through_chat_completions(client: openai.OpenAI, server: HttpServer) -> None:
    tools = [{"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}]
    messages: list[dict] = [{"role": "user", "content": TOOL_TASK}]
    first = client.chat.completions.create(model="conductor/sim", messages=messages, tools=tools)  # type: ignore[arg-type]
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "snow"},
    ]
    not_asked = {"role": "tool", "tool_call_id": call.id[:-1] + "9", "content": "?"}
    with pytest.raises(openai.BadRequestError) as missing:  # every call of the turn needs its output
        client.chat.completions.create(model="conductor/sim", messages=[*messages[:-1], not_asked], tools=tools)  # type: ignore[arg-type]
    chunks = list(client.chat.completions.create(model="conductor/sim", messages=messages, tools=tools, stream=True))  # type: ignore[arg-type]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Tool result: snow" in content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (chunks[0].model_extra or {})["conductor_run_id"] == (first.model_extra or {})["conductor_run_id"]
    assert "no tool output for call" in missing.value.message and missing.value.param == "messages"


def test_a_tool_turn_continues_after_a_server_restart(tmp_path: Path) -> None:
    env = {"CONDUCTOR_POOL": "sim", "CONDUCTOR_HTTP_TOKEN": TOKEN, "CONDUCTOR_SIM_TIME_SCALE": "0"}
    first_server = HttpServer(tmp_path, None, **env)
    try:
        sdk = openai.OpenAI(base_url=base_url(first_server), api_key=TOKEN, max_retries=0)
        first = sdk.responses.create(model="conductor", input=TOOL_TASK, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    finally:
        first_server.stop()
    call = next(item for item in first.output if item.type == "function_call")
    server = HttpServer(tmp_path, None, **env)
    try:
        sdk = openai.OpenAI(base_url=base_url(server), api_key=TOKEN, max_retries=0)
        second = sdk.responses.create(
            model="conductor",
            previous_response_id=first.id,
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "fog"}],
        )
    finally:
        server.stop()
    assert first.metadata is not None and second.metadata is not None
    assert "Tool result: fog" in second.output_text
    assert second.metadata["conductor_run_id"] == first.metadata["conductor_run_id"]
