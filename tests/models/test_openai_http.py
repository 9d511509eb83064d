"""The direct path to OpenAI-compatible servers sends what litellm sends and fails as litellm fails: the same request
body and key, the same usage and cost, for each HTTP status a failure of the name litellm gives it, retried where
litellm's is. Both are checked against one real capturing server on loopback, litellm's side by calling litellm
itself."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import litellm
import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.models import http_errors, openai_http, providers, retry
from conductor_mcp.models.backend import call_arguments
from conductor_mcp.models.completion import completion_prompt, completion_stops
from conductor_mcp.models.litellm_backend import RETRYABLE

SEEN: list[tuple[dict[str, str], dict[str, Any]]] = []
SEEN_PATHS: list[str] = []


class Capture(BaseHTTPRequestHandler):
    """Records each request; the model `status-N` answers HTTP N, `blank-once` a base model's text with no answer
    in it the first time, any other a completion with fixed usage."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        SEEN.append(({k.lower(): v for k, v in self.headers.items()}, body))
        SEEN_PATHS.append(self.path)
        status = int(body["model"].split("-", 1)[1]) if body["model"].startswith("status-") else 200
        message = {"role": "assistant", "content": "ANSWER: 42"}
        text = not self.path.endswith("/chat/completions")  # a base model's text completion
        choice = {"text": " ANSWER: 42\nQuestion: next"} if text else {"message": message}
        if body["model"] == "blank-once" and [seen["model"] for _, seen in SEEN].count("blank-once") == 1:
            choice = {"text": "\n\n"}  # stopped on its stop sequence "\n\n\n": nothing before it
        answer = {
            "id": "c",
            "object": "text_completion" if text else "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "length", **choice}],
            "usage": {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38},
        }
        out = json.dumps(answer if status == 200 else {"error": {"message": f"refused with {status}"}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def spec_at(base: str, model: str = "hosted_vllm/served", **fields: Any) -> ModelSpec:
    params = {"temperature": 0.2, "max_tokens": 64, "stop": ["\nQ:"], "extra_body": {"top_k": 5}}
    return ModelSpec(
        model=model,
        api_base=base,
        params=params,
        price={"input_per_mtok": 3, "output_per_mtok": 9},
        **{"max_retries": 0, **fields},
    )


MESSAGES = [{"role": "system", "content": "You are a worker."}, {"role": "user", "content": "What is 6 * 7?"}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True}}


async def test_a_call_sends_the_body_and_key_litellm_sends_and_reads_the_same_usage_and_cost(
    base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_TEST_KEY", "sk-direct-path-test-key-0123")
    spec = spec_at(base, api_key_env="BENCH_TEST_KEY")
    request = call_arguments(spec, MESSAGES, response_format=FORMAT)
    assert openai_http.eligible(request)
    reference = await litellm.acompletion(**request)
    litellm_headers, litellm_body = SEEN[-1]
    models = providers.Providers(Settings.from_env(state_dir=tmp_path))
    done = await models.complete(spec, MESSAGES, label="w", response_format=FORMAT)
    await models.aclose()
    headers, body = SEEN[-1]
    assert body == litellm_body  # extra_body merged, the served name, every param, the schema
    assert headers["authorization"] == litellm_headers["authorization"] == "Bearer sk-direct-path-test-key-0123"
    assert (done.prompt_tokens, done.completion_tokens) == (31, 7) == (reference.usage.prompt_tokens, 7)
    assert done.cost_usd == pytest.approx(reference._hidden_params["response_cost"])
    assert done.finish_reason == reference.choices[0].finish_reason == "length"
    assert done.text == "ANSWER: 42"


async def test_a_text_completion_sends_the_body_litellm_sends(base: str, tmp_path: Path) -> None:
    """A base-model worker's call (`prompt_style: completion`, every worker of the local pool) takes the direct
    path too, with litellm's body: the prompt, the params, extra_body merged; and every stop sequence, where
    litellm keeps the first 4 (OpenAI's own limit, which llama.cpp and vLLM do not have)."""
    spec = spec_at(base, prompt_style="completion")
    request = call_arguments(spec, MESSAGES)
    request["prompt"] = completion_prompt(request.pop("messages"))
    request["stop"] = completion_stops(request.get("stop"))
    assert openai_http.eligible(request)
    reference = await litellm.atext_completion(**request)
    litellm_path, litellm_body = SEEN_PATHS[-1], SEEN[-1][1]
    models = providers.Providers(Settings.from_env(state_dir=tmp_path))
    done = await models.complete(spec, MESSAGES, label="w")
    await models.aclose()
    body = SEEN[-1][1]
    assert SEEN_PATHS[-1] == litellm_path == "/v1/completions"
    assert body["stop"] == request["stop"] and litellm_body["stop"] == request["stop"][:4] and len(request["stop"]) > 4
    assert {**body, "stop": None} == {**litellm_body, "stop": None}
    assert (done.prompt_tokens, done.completion_tokens) == (31, 7) == (reference.usage.prompt_tokens, 7)
    assert done.text == "ANSWER: 42" and done.finish_reason == reference.choices[0].finish_reason == "length"


async def test_a_base_model_that_writes_no_answer_is_asked_again(base: str, tmp_path: Path) -> None:
    """A base model may stop before it answers (only blank lines, then a stop sequence): that attempt failed, so
    the call is made again and the step gets the answer of the next draw, not an empty one taken as done."""
    spec = spec_at(base, model="hosted_vllm/blank-once", prompt_style="completion", max_retries=1)
    models = providers.Providers(Settings.from_env(state_dir=tmp_path, retry_base_s=0))
    done = await models.complete(spec, MESSAGES, label="w")
    await models.aclose()
    assert done.text == "ANSWER: 42"
    assert [a.ok for a in done.attempts] == [False, True]
    assert "MalformedResponse" in str(done.attempts[0].error) and "wrote no answer" in str(done.attempts[0].error)


async def test_a_call_without_a_key_sends_litellm_s_placeholder(base: str, tmp_path: Path) -> None:
    spec = spec_at(base)
    await litellm.acompletion(**call_arguments(spec, MESSAGES))
    expected = SEEN[-1][0]["authorization"]
    models = providers.Providers(Settings.from_env(state_dir=tmp_path))
    await models.complete(spec, MESSAGES)
    await models.aclose()
    assert SEEN[-1][0]["authorization"] == expected


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 422, 429, 500, 502, 503, 504, 520])
async def test_an_error_status_fails_as_litellm_fails(base: str, status: int) -> None:
    """The same class name (an attempt reads `Name: message`) and the same retry, without litellm's classes."""
    request = call_arguments(spec_at(base, model=f"hosted_vllm/status-{status}"), MESSAGES)
    with pytest.raises(Exception) as from_litellm:
        await litellm.acompletion(**request)
    client = openai_http.OpenAIHttp()
    with pytest.raises(Exception) as direct:
        await client.chat(request)
    await client.aclose()
    assert type(direct.value).__name__ == type(from_litellm.value).__name__
    assert isinstance(direct.value, http_errors.CallError) and isinstance(direct.value, retry.FAILED)
    assert isinstance(direct.value, retry.RETRYABLE) == isinstance(from_litellm.value, RETRYABLE)
    assert f"refused with {status}" in str(direct.value) and str(from_litellm.value).endswith(str(direct.value))


async def test_a_refused_connection_is_retryable_as_with_litellm(tmp_path: Path) -> None:
    from conductor_mcp.models.local import free_port

    request = call_arguments(spec_at(f"http://127.0.0.1:{free_port()}/v1"), MESSAGES)
    client = openai_http.OpenAIHttp()
    with pytest.raises(retry.RETRYABLE):
        await client.chat(request)
    await client.aclose()


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "content_filter", "eos", "max_tokens", "odd"])
def test_finish_reasons_read_as_litellm_reads_them(reason: str) -> None:
    from litellm.litellm_core_utils.core_helpers import map_finish_reason

    assert http_errors.finish_reason(reason) == map_finish_reason(reason)


def test_calls_the_direct_path_cannot_make_as_litellm_does_go_to_litellm(base: str) -> None:
    chat = call_arguments(spec_at(base), MESSAGES)
    assert openai_http.eligible(chat)
    assert not openai_http.eligible({**chat, "mock_response": "x"})  # litellm-only parameters
    assert not openai_http.eligible({**chat, "tools": [{"type": "function"}]})  # litellm rewrites tool schemas
    assert not openai_http.eligible({**chat, "model": "openai/gpt-5"})  # other providers
    assert not openai_http.eligible({k: v for k, v in chat.items() if k != "api_base"})


async def test_a_litellm_only_parameter_still_works_through_litellm(tmp_path: Path) -> None:
    from conductor_mcp.models.local import free_port

    spec = ModelSpec(
        model="hosted_vllm/x",
        api_base=f"http://127.0.0.1:{free_port()}/v1",
        params={"mock_response": "mocked by litellm"},
        max_retries=0,
    )
    models = providers.Providers(Settings.from_env(state_dir=tmp_path))
    assert (await models.complete(spec, MESSAGES)).text == "mocked by litellm"
    await models.aclose()
